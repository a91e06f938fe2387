/* SPDX-License-Identifier: MIT
 * One OpenSHMEM benchmark source compiled against any implementation (only 1.4 routines):
 * put/get latency and bandwidth between PE 0 and the last PE, put latency to a global
 * variable, atomic fetch-add latency and barrier latency over all PEs. PE 0 prints one
 * JSON object per measurement. Usage: shmem_c_bench [max_bytes] [scale] */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char g_buf[1 << 16];  /* a global: symmetric by the spec */
static long g_counter;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int iters_for(size_t bytes, double scale) {
  int it = bytes <= 4096 ? 20000 : bytes <= 65536 ? 4000 : bytes <= (1 << 20) ? 400 : 100;
  it = (int)(it * scale);
  return it < 10 ? 10 : it;
}

static void report(const char *op, size_t bytes, int iters, double us_total) {
  double us = us_total / iters;
  double gbps = bytes ? (double)bytes / (us * 1e3) : 0.0;
  printf("{\"op\": \"%s\", \"bytes\": %zu, \"iters\": %d, \"us\": %.4f, \"GBps\": %.4f}\n", op, bytes, iters, us, gbps);
  fflush(stdout);
}

int main(int argc, char **argv) {
  size_t max_bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (4u << 20);
  double scale = argc > 2 ? atof(argv[2]) : 1.0;
  shmem_init();
  int me = shmem_my_pe(), n = shmem_n_pes(), peer = n - 1;
  char *heap = shmem_malloc(max_bytes);
  char *local = malloc(max_bytes);
  memset(local, me + 1, max_bytes);
  memset(heap, 0, max_bytes);
  shmem_barrier_all();

  for (size_t bytes = 8; bytes <= max_bytes; bytes *= 8) {
    int it = iters_for(bytes, scale), warm = it / 10 + 1;
    if (me == 0) {
      for (int i = 0; i < warm; ++i) { shmem_putmem(heap, local, bytes, peer); shmem_quiet(); }
      double t = now_us();
      for (int i = 0; i < it; ++i) { shmem_putmem(heap, local, bytes, peer); shmem_quiet(); }
      report("put_lat", bytes, it, now_us() - t);
      for (int i = 0; i < warm; ++i) shmem_getmem(local, heap, bytes, peer);
      t = now_us();
      for (int i = 0; i < it; ++i) shmem_getmem(local, heap, bytes, peer);
      report("get_lat", bytes, it, now_us() - t);
      /* bandwidth: a window of non-blocking puts, then quiet */
      int window = 64, rounds = it / window + 1;
      t = now_us();
      for (int r = 0; r < rounds; ++r) {
        for (int w = 0; w < window; ++w) shmem_putmem_nbi(heap, local, bytes, peer);
        shmem_quiet();
      }
      report("put_bw", bytes, rounds * window, now_us() - t);
    }
    shmem_barrier_all();
  }
  if (me == 0) {
    int it = iters_for(8, scale);
    for (size_t bytes = 8; bytes <= 4096; bytes *= 8) {
      double t = now_us();
      for (int i = 0; i < it; ++i) { shmem_putmem(g_buf, local, bytes, peer); shmem_quiet(); }
      report("put_lat_global", bytes, it, now_us() - t);
    }
    long *ctr = (long *)heap;
    for (int i = 0; i < it / 10; ++i) (void)shmem_long_atomic_fetch_add(ctr, 1, peer);
    double t = now_us();
    for (int i = 0; i < it; ++i) (void)shmem_long_atomic_fetch_add(ctr, 1, peer);
    report("fadd_lat", 8, it, now_us() - t);
    t = now_us();
    for (int i = 0; i < it; ++i) (void)shmem_long_atomic_fetch_add(&g_counter, 1, peer);
    report("fadd_lat_global", 8, it, now_us() - t);
  }
  shmem_barrier_all();
  int bit = (int)(2000 * scale) + 10;
  for (int i = 0; i < bit / 10; ++i) shmem_barrier_all();
  double t = now_us();
  for (int i = 0; i < bit; ++i) shmem_barrier_all();
  double el = now_us() - t;
  if (me == 0) report("barrier", 0, bit, el);
  shmem_free(heap);
  free(local);
  shmem_finalize();
  return 0;
}
