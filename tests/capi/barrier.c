/* SPDX-License-Identifier: MIT
 * Barriers under stress: hundreds of rounds that mix shmem_barrier_all, active-set
 * barriers over all PEs and over the even PEs (two pSync arrays each, in turn), team_sync on
 * the team of my parity and fcollects over it, with random delays so that PEs arrive in a
 * different order each round. Before each barrier a PE announces the round to every PE
 * that takes part; after it, every announcement of that round must be there (nobody left
 * early). The fcollect results are checked exactly (nobody overwrote a buffer another PE
 * still read), and every pSync array must hold SHMEM_SYNC_VALUE at the end.
 * Usage: barrier <seed> [rounds] */
#include <string.h>
#include <time.h>

#include "check.h"

#define MAXPE 64
/* Two pSync arrays per active set, used in turn. Different active sets never share one: a
 * PE outside the even set may already be in the next all-PE barrier while the even PEs are
 * still in theirs, and the spec forbids a pSync that another call may still be using. */
static long g_psync[4][SHMEM_BARRIER_SYNC_SIZE];
static long g_seen[MAXPE]; /* g_seen[j]: the last round PE j announced here */

static void jitter(int me, int round) {
  uint64_t r = rnd(1, me, (uint64_t)round);
  if (r % 3) return;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  long ns = (long)(r >> 8) % 40000;
  do clock_gettime(CLOCK_MONOTONIC, &t);
  while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < ns);
}

/* Announce `round` to the PEs first, first+stride, ... (count of them), then wait in `kind`. */
static void announce(int round, int first, int stride, int count) {
  for (int k = 0; k < count; ++k) shmem_long_p(&g_seen[shmem_my_pe()], round, first + k * stride);
}
static void check_seen(int round, int first, int stride, int count, const char* what) {
  for (int k = 0; k < count; ++k) {
    int j = first + k * stride;
    long v = shmem_long_atomic_fetch(&g_seen[j], shmem_my_pe());
    CHECK(v >= round, "%s of round %d: PE %d left it before PE %d arrived (saw round %ld)", what, round, shmem_my_pe(),
          j, v);
  }
}

int main(int argc, char** argv) {
  seed_from_args(argc, argv);
  int rounds = argc > 2 ? atoi(argv[2]) : 400;
  shmem_init();
  int me = shmem_my_pe(), n = shmem_n_pes();
  CHECK(n <= MAXPE, "at most %d PEs", MAXPE);
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < SHMEM_BARRIER_SYNC_SIZE; ++i) g_psync[k][i] = SHMEM_SYNC_VALUE;
  memset(g_seen, 0, sizeof(g_seen));
  int evens = (n + 1) / 2, odds = n / 2;
  shmem_team_t even_team = SHMEM_TEAM_INVALID, odd_team = SHMEM_TEAM_INVALID;
  shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 2, evens, NULL, 0, &even_team);
  if (odds) shmem_team_split_strided(SHMEM_TEAM_WORLD, 1, 2, odds, NULL, 0, &odd_team);
  shmem_team_t mine = me % 2 ? odd_team : even_team;
  int my_first = me % 2, my_count = me % 2 ? odds : evens;
  long *src = shmem_malloc(sizeof(long) * 4), *dst = shmem_malloc(sizeof(long) * 4 * MAXPE);
  int all_uses = 0, even_uses = 0;
  shmem_barrier_all();

  for (int r = 1; r <= rounds; ++r) {
    int kind = (int)(rnd(2, 0, (uint64_t)r) % 5); /* the same on every PE */
    jitter(me, r);
    switch (kind) {
      case 0:
        announce(r, 0, 1, n);
        shmem_barrier_all();
        check_seen(r, 0, 1, n, "shmem_barrier_all");
        break;
      case 1:
        announce(r, 0, 1, n);
        shmem_barrier(0, 0, n, g_psync[all_uses++ & 1]);
        check_seen(r, 0, 1, n, "shmem_barrier over all PEs");
        break;
      case 2:
        announce(r, my_first, 2, my_count);
        shmem_quiet();
        CHECK(shmem_team_sync(mine) == 0, "team_sync");
        check_seen(r, my_first, 2, my_count, "shmem_team_sync of my parity");
        break;
      case 3:
        /* only the even PEs; the odd ones go straight on to the next round */
        if (me % 2 == 0) {
          announce(r, 0, 2, evens);
          shmem_barrier(0, 1, evens, g_psync[2 + (even_uses++ & 1)]);
          check_seen(r, 0, 2, evens, "shmem_barrier over the even PEs");
        }
        break;
      case 4:
        for (int i = 0; i < 4; ++i) src[i] = (long)rnd(3, me, (uint64_t)(r * 4 + i));
        CHECK(shmem_long_fcollect(mine, dst, src, 4) == 0, "fcollect");
        for (int k = 0; k < my_count; ++k)
          for (int i = 0; i < 4; ++i) {
            long want = (long)rnd(3, my_first + 2 * k, (uint64_t)(r * 4 + i));
            CHECK(dst[k * 4 + i] == want, "fcollect of round %d: element %d of PE %d is %ld, want %ld", r, i,
                  my_first + 2 * k, dst[k * 4 + i], want);
          }
        break;
    }
  }
  shmem_barrier_all();
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < SHMEM_BARRIER_SYNC_SIZE; ++i)
      CHECK(g_psync[k][i] == SHMEM_SYNC_VALUE, "pSync[%d][%d] is %ld after the last barrier, not SHMEM_SYNC_VALUE", k,
            i, g_psync[k][i]);
  shmem_free(dst);
  shmem_free(src);
  if (odd_team != SHMEM_TEAM_INVALID) shmem_team_destroy(odd_team);
  if (even_team != SHMEM_TEAM_INVALID) shmem_team_destroy(even_team);
  shmem_barrier_all();
  if (me == 0) printf("barrier: OK on %d PEs (%d rounds)\n", n, rounds);
  shmem_finalize();
  return 0;
}
