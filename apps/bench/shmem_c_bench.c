/* SPDX-License-Identifier: MIT
 * One OpenSHMEM benchmark source compiled against any implementation (only 1.4 routines):
 * put/get latency and bandwidth between PE 0 and the last PE, put latency to a global
 * variable, atomic fetch-add latency, and over all PEs the latency of barrier, fcollect,
 * broadcast, sum reduction (int64) and alltoall (the 1.4 active-set forms, which every
 * implementation has). PE 0 prints one JSON object per measurement; a collective's time is
 * the slowest PE's. Usage: shmem_c_bench [max_bytes] [scale] [coll_max_bytes] [ops]
 *   coll_max_bytes: 0 (default) times the collectives at 8 B, 1, 16, 32 and 64 KiB per PE; N > 0
 *     at every power of two from 8 B (one 64-bit element, the smallest the 1.4 routines move)
 *     to N (OSU's sizes);
 *   ops: comma-separated subset of p2p,fcollect,broadcast,sum,alltoall,barrier (default all). */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char g_buf[1 << 16]; /* a global: symmetric by the spec */
static long g_counter;
static long g_ping; /* the ping-pong's flag */

#define MAX2(a, b) ((a) > (b) ? (a) : (b))
#define PSYNC_LEN \
  MAX2(MAX2(SHMEM_BCAST_SYNC_SIZE, SHMEM_COLLECT_SYNC_SIZE), MAX2(SHMEM_REDUCE_SYNC_SIZE, SHMEM_ALLTOALL_SYNC_SIZE))
/* Two of each: consecutive calls alternate, so a call never reuses the pSync of one that a
 * slower PE may still be in (the spec's rule for back-to-back collectives). */
static long g_psync[2][PSYNC_LEN];
static long g_wrk[2][MAX2(SHMEM_REDUCE_MIN_WRKDATA_SIZE, 2)];
static long* g_sum_wrk[2]; /* symmetric, sized for the largest sum (nreduce / 2 + 1 longs) */
static double g_elapsed, g_slowest;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Each put/get row runs for at least this long: a row of 4000 small puts takes ~0.1 ms, where
 * one preemption on a crowded node moves its figure by half. Past the row's iterations the clock
 * is read every 256th (a read costs about as much as a 8-byte put and quiet). */
static const double kMinRowUs = 10e3;

static int iters_for(size_t bytes, double scale) {
  int it = bytes <= 4096 ? 20000 : bytes <= 65536 ? 4000 : bytes <= (1 << 20) ? 400 : 100;
  it = (int)(it * scale);
  return it < 10 ? 10 : it;
}

static void report(const char* op, size_t bytes, int iters, double us_total) {
  double us = us_total / iters;
  double gbps = bytes ? (double)bytes / (us * 1e3) : 0.0;
  printf("{\"op\": \"%s\", \"bytes\": %zu, \"iters\": %d, \"us\": %.4f, \"GBps\": %.4f}\n", op, bytes, iters, us, gbps);
  fflush(stdout);
}

/* Latency of `it` calls of a collective, the slowest PE's, after a warm-up of `it / 10` calls
 * and at least 100 ms (PE 0's clock; every PE runs as many calls as PE 0 decides): PEs that sat
 * idle in a barrier through the put/get rows may have been packed onto one core by the
 * scheduler, and spreading them again takes longer than a few hundred calls. */
typedef void (*coll_fn)(void* dst, const void* src, size_t nelems, int i, int n);
static long g_more, g_more_seen;
static long g_warm_psync[SHMEM_BCAST_SYNC_SIZE];
static void time_collective(const char* op, coll_fn fn, void* dst, const void* src, size_t nelems, size_t bytes, int it,
                            int n) {
  double warm_start = now_us();
  int i = 0;
  for (;;) {
    for (int k = 0; k < it / 10 + 2; ++k, ++i) fn(dst, src, nelems, i, n);
    if (shmem_my_pe() == 0) g_more = now_us() - warm_start < 100e3;
    shmem_barrier_all();
    shmem_broadcast64(&g_more_seen, &g_more, 1, 0, 0, 0, n, g_warm_psync); /* 1.4: Open MPI has no teams */
    shmem_barrier_all();
    if (!(shmem_my_pe() == 0 ? g_more : g_more_seen)) break;
  }
  shmem_barrier_all();
  double t = now_us();
  for (int i = 0; i < it; ++i) fn(dst, src, nelems, i, n);
  g_elapsed = now_us() - t;
  shmem_barrier_all();
  shmem_double_max_to_all(&g_slowest, &g_elapsed, 1, 0, 0, n, (double*)g_wrk[0], g_psync[0]);
  if (shmem_my_pe() == 0) report(op, bytes, it, g_slowest);
  shmem_barrier_all();
}

static void do_fcollect(void* dst, const void* src, size_t nelems, int i, int n) {
  shmem_fcollect64(dst, src, nelems, 0, 0, n, g_psync[i & 1]);
}
static void do_broadcast(void* dst, const void* src, size_t nelems, int i, int n) {
  /* A non-root may leave before the others got the data: a barrier closes each round. */
  shmem_broadcast64(dst, src, nelems, 0, 0, 0, n, g_psync[i & 1]);
  shmem_barrier_all();
}
static void do_sum(void* dst, const void* src, size_t nelems, int i, int n) {
  shmem_long_sum_to_all(dst, src, (int)nelems, 0, 0, n, g_sum_wrk[i & 1], g_psync[i & 1]);
}
static void do_alltoall(void* dst, const void* src, size_t nelems, int i, int n) {
  shmem_alltoall64(dst, src, nelems, 0, 0, n, g_psync[i & 1]);
}

/* Whether `op` is in the comma-separated list `ops` (NULL: every op). */
static int wanted(const char* ops, const char* op) {
  if (!ops) return 1;
  size_t len = strlen(op);
  for (const char* p = ops; *p;) {
    const char* end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n == len && strncmp(p, op, len) == 0) return 1;
    p += n + (end ? 1 : 0);
  }
  return 0;
}

int main(int argc, char** argv) {
  size_t max_bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (4u << 20);
  double scale = argc > 2 ? atof(argv[2]) : 1.0;
  size_t coll_bytes = argc > 3 ? strtoull(argv[3], NULL, 0) : 0;
  const char* ops = argc > 4 && argv[4][0] ? argv[4] : NULL;
  shmem_init();
  int me = shmem_my_pe(), n = shmem_n_pes(), peer = n - 1;
  char* heap = shmem_malloc(max_bytes);
  char* local = malloc(max_bytes);
  memset(local, me + 1, max_bytes);
  memset(heap, 0, max_bytes);
  shmem_barrier_all();

  for (size_t bytes = 8; wanted(ops, "p2p") && bytes <= max_bytes; bytes *= 8) {
    int it = iters_for(bytes, scale), warm = it / 10 + 1;
    if (me == 0) {
      for (int i = 0; i < warm; ++i) {
        shmem_putmem(heap, local, bytes, peer);
        shmem_quiet();
      }
      double t = now_us();
      int done = 0;
      for (; done < it || done % 256 || now_us() - t < kMinRowUs; ++done) {
        shmem_putmem(heap, local, bytes, peer);
        shmem_quiet();
      }
      report("put_lat", bytes, done, now_us() - t);
      for (int i = 0; i < warm; ++i) shmem_getmem(local, heap, bytes, peer);
      t = now_us();
      for (done = 0; done < it || done % 256 || now_us() - t < kMinRowUs; ++done)
        shmem_getmem(local, heap, bytes, peer);
      report("get_lat", bytes, done, now_us() - t);
      /* bandwidth: a window of non-blocking puts, then quiet */
      int window = 64, rounds = it / window + 1, r = 0;
      for (int w = 0; w < window; ++w) shmem_putmem_nbi(heap, local, bytes, peer);
      shmem_quiet();
      t = now_us();
      for (; r < rounds || now_us() - t < kMinRowUs; ++r) {
        for (int w = 0; w < window; ++w) shmem_putmem_nbi(heap, local, bytes, peer);
        shmem_quiet();
      }
      report("put_bw", bytes, r * window, now_us() - t);
    }
    shmem_barrier_all();
  }
  if (me == 0 && wanted(ops, "p2p")) {
    int it = iters_for(8, scale);
    for (size_t bytes = 8; bytes <= 4096; bytes *= 8) {
      double t = now_us();
      for (int i = 0; i < it; ++i) {
        shmem_putmem(g_buf, local, bytes, peer);
        shmem_quiet();
      }
      report("put_lat_global", bytes, it, now_us() - t);
    }
    long* ctr = (long*)heap;
    for (int i = 0; i < it / 10; ++i) (void)shmem_long_atomic_fetch_add(ctr, 1, peer);
    double t = now_us();
    for (int i = 0; i < it; ++i) (void)shmem_long_atomic_fetch_add(ctr, 1, peer);
    report("fadd_lat", 8, it, now_us() - t);
    t = now_us();
    for (int i = 0; i < it; ++i) (void)shmem_long_atomic_fetch_add(&g_counter, 1, peer);
    report("fadd_lat_global", 8, it, now_us() - t);
  }
  /* Ping-pong (perftest's put_lat): PE 0 puts i into the peer's flag, the peer waits for it
   * and puts it back; half a round trip each, with no quiet (the wait sees the put land). */
  shmem_barrier_all();
  if (wanted(ops, "p2p") && (me == 0 || me == peer)) {
    int it = iters_for(8, scale), warm = it / 10 + 1;
    double t = 0;
    for (long i = 1; i <= warm + it; ++i) {
      if (i == warm + 1) t = now_us();
      if (me == 0) {
        shmem_long_p(&g_ping, i, peer);
        shmem_long_wait_until(&g_ping, SHMEM_CMP_EQ, i);
      } else {
        shmem_long_wait_until(&g_ping, SHMEM_CMP_EQ, i);
        shmem_long_p(&g_ping, i, 0);
      }
    }
    if (me == 0 && peer != 0) report("pingpong_lat", 8, 2 * it, now_us() - t);
  }
  shmem_barrier_all();
  for (int k = 0; k < 2; ++k)
    for (int j = 0; j < PSYNC_LEN; ++j) g_psync[k][j] = SHMEM_SYNC_VALUE;
  for (int j = 0; j < SHMEM_BCAST_SYNC_SIZE; ++j) g_warm_psync[j] = SHMEM_SYNC_VALUE;
  shmem_barrier_all();
  /* Collectives: element counts per PE of 8 bytes each (8 B, 1 KiB, 16 KiB, 32 KiB, 64 KiB, or
   * every power of two up to coll_bytes). */
  size_t counts[32], ncounts = 0;
  if (coll_bytes) {
    for (size_t e = 1; e * 8 <= coll_bytes && ncounts < 32; e *= 2) counts[ncounts++] = e;
  } else {
    const size_t fixed[] = {1, 128, 2048, 4096, 8192};
    for (size_t c = 0; c < sizeof(fixed) / sizeof(fixed[0]); ++c) counts[ncounts++] = fixed[c];
  }
  size_t coll_max = counts[ncounts - 1];
  long *csrc = shmem_malloc(coll_max * 8 * n), *cdst = shmem_malloc(coll_max * 8 * n);
  for (size_t j = 0; j < coll_max * n; ++j) csrc[j] = me + (long)j;
  for (int k = 0; k < 2; ++k)
    g_sum_wrk[k] = shmem_malloc(MAX2(SHMEM_REDUCE_MIN_WRKDATA_SIZE, coll_max / 2 + 1) * sizeof(long));
  for (size_t c = 0; c < ncounts; ++c) {
    size_t nelems = counts[c];
    size_t bytes = nelems * 8;
    /* About 0.1 s of calls at the largest sizes: a 1 MiB fcollect over 4 PEs moves 4 MiB a PE. */
    int it = (int)((nelems <= 128 ? 2000 : bytes <= 65536 ? 200 : (int)(200 * 65536 / bytes) + 20) * scale) + 10;
    if (wanted(ops, "fcollect")) time_collective("fcollect", do_fcollect, cdst, csrc, nelems, bytes, it, n);
    if (wanted(ops, "broadcast")) time_collective("broadcast+barrier", do_broadcast, cdst, csrc, nelems, bytes, it, n);
    if (wanted(ops, "sum")) time_collective("sum_to_all_int64", do_sum, cdst, csrc, nelems, bytes, it, n);
    if (wanted(ops, "alltoall")) time_collective("alltoall", do_alltoall, cdst, csrc, nelems, bytes, it, n);
  }
  for (int k = 0; k < 2; ++k) shmem_free(g_sum_wrk[k]);
  shmem_free(cdst);
  shmem_free(csrc);
  shmem_barrier_all();
  if (wanted(ops, "barrier")) {
    int bit = (int)(2000 * scale) + 10;
    for (int i = 0; i < bit / 10; ++i) shmem_barrier_all();
    double t = now_us();
    for (int i = 0; i < bit; ++i) shmem_barrier_all();
    double el = now_us() - t;
    if (me == 0) report("barrier", 0, bit, el);
  }
  shmem_free(heap);
  free(local);
  shmem_finalize();
  return 0;
}
