/* SPDX-License-Identifier: MIT
 * Small collectives have no barriers: a PE may run up to two collectives ahead of a slow one,
 * and each PE fills its dest right before the call. Hundreds of rounds of broadcast (every
 * root), fcollect, alltoall, int64/double sums and an inclusive scan, on the world, on a
 * strided team and on an active set, with sizes on both sides of the message limit (1 KiB),
 * while one PE per round (chosen from the seed) sleeps before calling; broadcasts of odd byte
 * counts too, and over an active set of all PEs but the first. Every value is checked
 * exactly against what the senders stored. Usage: runahead SEED [ROUNDS] */
#define _POSIX_C_SOURCE 200809L
#include <string.h>
#include <time.h>

#include "check.h"

#define MAXE 320 /* int64 elements per part: 2.5 KiB, past the 1 KiB message limit */

static long psync[SHMEM_BCAST_SYNC_SIZE];
static long psync_sub[SHMEM_BCAST_SYNC_SIZE]; /* the subset's */
static long long pwrk[SHMEM_REDUCE_MIN_WRKDATA_SIZE + MAXE];
static long long psrc[MAXE], pdst[MAXE];

/* The elements of round `r`'s part: small most of the time, sometimes past the limit. */
static size_t part_elems(int r) {
  uint64_t x = rnd(900, 0, (uint64_t)r);
  return x % 5 == 0 ? (size_t)(x >> 8) % MAXE + 1 : (size_t)(x >> 8) % 16 + 1;
}

static void maybe_lag(int r, int me, int n) {
  if ((int)(rnd(901, 0, (uint64_t)r) % (uint64_t)n) == me && rnd(902, 0, (uint64_t)r) % 3 == 0) {
    struct timespec lag = {0, 200 * 1000};
    nanosleep(&lag, NULL);
  }
}

static void run(shmem_team_t team, int rounds, int64_t* src, int64_t* dst, double* dsrc, double* ddst, int tag) {
  int n = shmem_team_n_pes(team), me = shmem_team_my_pe(team);
  for (int r = 0; r < rounds; ++r) {
    size_t ne = part_elems(r + tag);
    int op = (int)(rnd(903, tag, (uint64_t)r) % 5);
    maybe_lag(r + tag, me, n);
    for (size_t i = 0; i < (size_t)n * ne; ++i) dst[i] = -7, ddst[i] = -7.0;
    if (op == 0 && r % 2) {
      /* An odd byte count (on either side of the message limit): exactly those bytes arrive,
       * none past them. */
      int root = (int)(rnd(904, tag, (uint64_t)r) % (uint64_t)n);
      size_t nb = ne * 8 - 1 - (size_t)(r % 4) * 2;
      for (size_t i = 0; i < ne; ++i) src[i] = (int64_t)rnd(tag, r * 64 + me, i);
      CHECK(shmem_broadcastmem(team, dst, src, nb, root) == 0, "broadcastmem");
      const unsigned char* got = (const unsigned char*)dst;
      int64_t from_root[MAXE];
      for (size_t i = 0; i < ne; ++i) from_root[i] = (int64_t)rnd(tag, r * 64 + root, i);
      CHECK(memcmp(got, from_root, nb) == 0, "round %d broadcastmem of %zu bytes from %d", r, nb, root);
      int64_t fill = -7;
      CHECK(memcmp(got + nb, (const unsigned char*)&fill + nb % 8, 8 - nb % 8) == 0,
            "round %d broadcastmem of %zu bytes from %d wrote past its end", r, nb, root);
    } else if (op == 0) {
      int root = (int)(rnd(904, tag, (uint64_t)r) % (uint64_t)n);
      for (size_t i = 0; i < ne; ++i) src[i] = (int64_t)rnd(tag, r * 64 + me, i);
      CHECK(shmem_int64_broadcast(team, dst, src, ne, root) == 0, "broadcast");
      for (size_t i = 0; i < ne; ++i)
        CHECK(dst[i] == (int64_t)rnd(tag, r * 64 + root, i), "round %d broadcast from %d: element %zu", r, root, i);
    } else if (op == 1) {
      for (size_t i = 0; i < ne; ++i) src[i] = (int64_t)rnd(tag, r * 64 + me, i);
      CHECK(shmem_int64_fcollect(team, dst, src, ne) == 0, "fcollect");
      for (int k = 0; k < n; ++k)
        for (size_t i = 0; i < ne; ++i)
          CHECK(dst[k * ne + i] == (int64_t)rnd(tag, r * 64 + k, i), "round %d fcollect: part %d element %zu", r, k, i);
    } else if (op == 2) {
      for (int k = 0; k < n; ++k)
        for (size_t i = 0; i < ne; ++i) src[k * ne + i] = (int64_t)rnd(tag + 1, (r * 64 + me) * 64 + k, i);
      CHECK(shmem_int64_alltoall(team, dst, src, ne) == 0, "alltoall");
      for (int k = 0; k < n; ++k)
        for (size_t i = 0; i < ne; ++i)
          CHECK(dst[k * ne + i] == (int64_t)rnd(tag + 1, (r * 64 + k) * 64 + me, i), "round %d alltoall: from %d, %zu",
                r, k, i);
    } else if (op == 3) {
      for (size_t i = 0; i < ne; ++i)
        src[i] = (int64_t)(rnd(tag, r * 64 + me, i) >> 8), dsrc[i] = (double)(src[i] % 1000) / 8;
      CHECK(shmem_int64_sum_reduce(team, dst, src, ne) == 0, "sum_reduce");
      CHECK(shmem_double_sum_reduce(team, ddst, dsrc, ne) == 0, "double sum_reduce");
      for (size_t i = 0; i < ne; ++i) {
        int64_t want = 0;
        double dwant = 0;
        for (int k = 0; k < n; ++k) {
          int64_t v = (int64_t)(rnd(tag, r * 64 + k, i) >> 8);
          want += v;
          dwant += (double)(v % 1000) / 8; /* eighths: exact in a double, in any order */
        }
        CHECK(dst[i] == want && ddst[i] == dwant, "round %d sum: element %zu", r, i);
      }
    } else {
      for (size_t i = 0; i < ne; ++i) src[i] = (int64_t)(rnd(tag, r * 64 + me, i) >> 8);
      CHECK(shmem_int64_sum_inscan(team, dst, src, ne) == 0, "sum_inscan");
      for (size_t i = 0; i < ne; ++i) {
        int64_t want = 0;
        for (int k = 0; k <= me; ++k) want += (int64_t)(rnd(tag, r * 64 + k, i) >> 8);
        CHECK(dst[i] == want, "round %d inscan: element %zu", r, i);
      }
    }
  }
}

/* The 1.4 active-set routines over all PEs: the same rounds, on one pSync. */
static void run_active(int rounds, int tag) {
  int n = shmem_n_pes(), me = shmem_my_pe();
  for (int r = 0; r < rounds; ++r) {
    size_t ne = part_elems(r + tag);
    maybe_lag(r + tag, me, n);
    int root = (int)(rnd(904, tag, (uint64_t)r) % (uint64_t)n);
    for (size_t i = 0; i < ne; ++i) psrc[i] = (long long)rnd(tag, r * 64 + me, i), pdst[i] = -7;
    if (r % 4 == 0) {
      shmem_broadcast64(pdst, psrc, ne, root, 0, 0, n, psync);
      if (me != root)
        for (size_t i = 0; i < ne; ++i)
          CHECK(pdst[i] == (long long)rnd(tag, r * 64 + root, i), "round %d broadcast64 from %d: %zu", r, root, i);
    } else if (r % 4 == 2) {
      /* An odd count of 4-byte elements, over the PEs past the first (a subset of the job;
       * all of them on 1 or 2 PEs), on a pSync of its own. */
      int start = n > 2 ? 1 : 0, size = n > 2 ? n - 1 : n;
      size_t n32 = 2 * ne - 1;
      if (me >= start) {
        int sub_root = root % size;
        shmem_broadcast32(pdst, psrc, n32, sub_root, start, 0, size, psync_sub);
        if (me != start + sub_root) {
          int32_t want[2 * MAXE];
          for (size_t i = 0; i < ne; ++i) {
            long long v = (long long)rnd(tag, r * 64 + start + sub_root, i);
            memcpy(&want[2 * i], &v, sizeof(v));
          }
          CHECK(memcmp(pdst, want, n32 * 4) == 0, "round %d broadcast32 of %zu over PEs %d.. from %d", r, n32, start,
                start + sub_root);
          int32_t fill[2];
          long long m7 = -7;
          memcpy(fill, &m7, sizeof(m7));
          CHECK(((int32_t*)pdst)[n32] == fill[1], "round %d broadcast32 wrote past its end", r);
        }
      }
    } else {
      for (size_t i = 0; i < ne; ++i) psrc[i] = (long long)(rnd(tag, r * 64 + me, i) >> 8);
      shmem_longlong_sum_to_all(pdst, psrc, (int)ne, 0, 0, n, pwrk, psync);
      for (size_t i = 0; i < ne; ++i) {
        long long want = 0;
        for (int k = 0; k < n; ++k) want += (long long)(rnd(tag, r * 64 + k, i) >> 8);
        CHECK(pdst[i] == want, "round %d sum_to_all: element %zu", r, i);
      }
    }
  }
}

int main(int argc, char** argv) {
  seed_from_args(argc, argv);
  int rounds = argc > 2 ? atoi(argv[2]) : 300;
  shmem_init();
  int n = shmem_n_pes(), me = shmem_my_pe();
  for (int i = 0; i < SHMEM_BCAST_SYNC_SIZE; ++i) psync[i] = psync_sub[i] = SHMEM_SYNC_VALUE;
  size_t cap = (size_t)n * MAXE;
  int64_t *src = shmem_malloc(cap * sizeof(int64_t)), *dst = shmem_malloc(cap * sizeof(int64_t));
  double *dsrc = shmem_malloc(cap * sizeof(double)), *ddst = shmem_malloc(cap * sizeof(double));
  CHECK(src && dst && dsrc && ddst, "shmem_malloc");
  shmem_barrier_all();

  run(SHMEM_TEAM_WORLD, rounds, src, dst, dsrc, ddst, 1);
  shmem_team_t odd = SHMEM_TEAM_INVALID;
  if (n > 2) shmem_team_split_strided(SHMEM_TEAM_WORLD, 1, 2, n / 2, NULL, 0, &odd);
  if (odd != SHMEM_TEAM_INVALID) run(odd, rounds, src, dst, dsrc, ddst, 20);
  run_active(rounds, 40);
  /* Interleaved: the world and the strided team alternate, one round each. */
  for (int r = 0; r < rounds / 4; ++r) {
    run(SHMEM_TEAM_WORLD, 1, src, dst, dsrc, ddst, 100 + r);
    if (odd != SHMEM_TEAM_INVALID) run(odd, 1, src, dst, dsrc, ddst, 200 + r);
  }
  if (odd != SHMEM_TEAM_INVALID) shmem_team_destroy(odd);
  shmem_barrier_all();
  if (me == 0) printf("runahead: OK on %d PEs\n", n);
  shmem_finalize();
  return 0;
}
