/* SPDX-License-Identifier: MIT
 * Mean time of shmem_barrier_all over the PEs (the slowest PE's), after a warm-up, and a
 * check that every PE passed each barrier only after all had arrived. Usage: barrier_time [iters] */
#define _POSIX_C_SOURCE 199309L
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long g_arrivals;
static double g_elapsed, g_slowest;
static double g_work[SHMEM_REDUCE_MIN_WRKDATA_SIZE];
static long g_psync[SHMEM_REDUCE_SYNC_SIZE];

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int main(int argc, char** argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 300;
  for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; ++i) g_psync[i] = SHMEM_SYNC_VALUE;
  shmem_init();
  int me = shmem_my_pe(), n = shmem_n_pes();
  for (int i = 0; i < 20; ++i) shmem_barrier_all();
  double t = now_us();
  for (int i = 0; i < iters; ++i) {
    /* Every PE counts itself in on PE 0 before the barrier: after it, PE 0 must have them all. */
    shmem_long_atomic_add(&g_arrivals, 1, 0);
    shmem_barrier_all();
    if (me == 0 && shmem_long_atomic_fetch(&g_arrivals, 0) != (long)n * (i + 1)) {
      printf("barrier %d passed with %ld arrivals of %ld\n", i, g_arrivals, (long)n * (i + 1));
      shmem_global_exit(1);
    }
    shmem_barrier_all();
  }
  g_elapsed = now_us() - t;
  shmem_double_max_to_all(&g_slowest, &g_elapsed, 1, 0, 0, n, g_work, g_psync);
  if (me == 0) printf("barrier_us %.1f\n", g_slowest / (2.0 * iters));
  shmem_finalize();
  return 0;
}
