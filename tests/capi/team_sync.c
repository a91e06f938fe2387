/* SPDX-License-Identifier: MIT
 * The C11 type-generic shmem_sync(team) of OpenSHMEM 1.5 beside the deprecated active-set
 * shmem_sync(start, stride, size, pSync): both synchronize, neither completes puts. */
#include "check.h"

long psync[SHMEM_SYNC_SIZE];

int main(int argc, char** argv) {
  seed_from_args(argc, argv);
  for (int i = 0; i < SHMEM_SYNC_SIZE; ++i) psync[i] = SHMEM_SYNC_VALUE;
  shmem_init();
  int me = shmem_my_pe(), n = shmem_n_pes(), right = (me + 1) % n, left = (me + n - 1) % n;
  long* box = shmem_calloc(1, sizeof(long));
  for (int round = 0; round < 3; ++round) {
    long v = (long)(rnd(round, me, 0) >> 2);
    shmem_long_atomic_set(box, v, right);
    shmem_quiet();
    int rc = shmem_sync(SHMEM_TEAM_WORLD); /* the one-argument form */
    CHECK(rc == 0, "shmem_sync(team) returned %d", rc);
    CHECK(*box == (long)(rnd(round, left, 0) >> 2), "round %d: box %ld", round, *box);
    shmem_sync(0, 0, n, psync); /* the active-set form still resolves to the 4-argument routine */
  }
  shmem_team_t evens;
  int ne = (n + 1) / 2;
  shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 2, ne, NULL, 0, &evens);
  if (evens != SHMEM_TEAM_INVALID) CHECK(shmem_sync(evens) == 0, "shmem_sync on a split team");
  if (evens != SHMEM_TEAM_INVALID) shmem_team_destroy(evens);
  for (int i = 0; i < SHMEM_SYNC_SIZE; ++i) CHECK(psync[i] == SHMEM_SYNC_VALUE, "pSync[%d] not restored", i);
  shmem_free(box);
  shmem_finalize();
  if (me == 0) printf("team_sync: OK on %d PEs\n", n);
  return 0;
}
