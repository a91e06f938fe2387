/* SPDX-License-Identifier: MIT
 * Same-host small collectives stage their parts in alternating halves of a buffer; every
 * member must agree on which half. Two ways they once did not:
 * - a collective over a subset active set (the even PEs) advanced only its members' count of
 *   the channel all active sets share, so the next whole-job active-set reduction read the
 *   wrong half on half the PEs (zeros);
 * - a team made in a slot that an earlier team had used inherited its members' counts, which
 *   differ between PEs that were and were not in the earlier team. */
#include "check.h"

long psync[SHMEM_REDUCE_SYNC_SIZE], psync2[SHMEM_REDUCE_SYNC_SIZE];
long pwrk[SHMEM_REDUCE_MIN_WRKDATA_SIZE + 64];
long src[4], dst[4 * 64];
long mine, all[64]; /* a team collective's source and dest: symmetric */

static void world_sum(int n, int round) {
  for (int i = 0; i < 4; ++i) src[i] = (long)(rnd(round, shmem_my_pe(), i) % 100000);
  shmem_barrier_all();
  shmem_long_sum_to_all(dst, src, 4, 0, 0, n, pwrk, psync2);
  for (int i = 0; i < 4; ++i) {
    long s = 0;
    for (int k = 0; k < n; ++k) s += (long)(rnd(round, k, i) % 100000);
    CHECK(dst[i] == s, "round %d: whole-job sum_to_all[%d] = %ld, expected %ld", round, i, dst[i], s);
  }
}

int main(int argc, char** argv) {
  seed_from_args(argc, argv);
  for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; ++i) psync[i] = psync2[i] = SHMEM_SYNC_VALUE;
  shmem_init();
  int me = shmem_my_pe(), n = shmem_n_pes();
  /* One collective on the even PEs (an odd number of them), then the whole job. */
  int size = (n + 1) / 2;
  if (me % 2 == 0) {
    for (int i = 0; i < 4; ++i) src[i] = me * 10 + i;
    shmem_fcollect64(dst, src, 4, 0, 1, size, psync);
    for (int k = 0; k < size; ++k)
      for (int i = 0; i < 4; ++i) CHECK(dst[k * 4 + i] == 2 * k * 10 + i, "even fcollect64 %d %d", k, i);
  }
  world_sum(n, 1);
  world_sum(n, 2);

  /* A team of the even PEs runs one collective and goes; then a team of the first half. */
  shmem_team_t evens, half;
  shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 2, size, NULL, 0, &evens);
  if (evens != SHMEM_TEAM_INVALID) {
    mine = (long)rnd(3, me, 0);
    shmem_long_fcollect(evens, all, &mine, 1);
    for (int k = 0; k < size; ++k) CHECK(all[k] == (long)rnd(3, 2 * k, 0), "evens fcollect %d", k);
    shmem_team_destroy(evens);
  }
  shmem_barrier_all();
  int hn = n / 2 > 0 ? n / 2 : 1;
  shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 1, hn, NULL, 0, &half);
  if (half != SHMEM_TEAM_INVALID) {
    for (int round = 0; round < 3; ++round) {
      mine = (long)rnd(4 + round, me, 0);
      shmem_long_fcollect(half, all, &mine, 1);
      for (int k = 0; k < hn; ++k)
        CHECK(all[k] == (long)rnd(4 + round, k, 0), "round %d: first-half fcollect %d", round, k);
    }
    shmem_team_destroy(half);
  }
  shmem_barrier_all();
  shmem_finalize();
  if (me == 0) printf("stage_parity: OK on %d PEs\n", n);
  return 0;
}
