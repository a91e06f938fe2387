/* SPDX-License-Identifier: MIT
 * SHMEM_THREAD_MULTIPLE: several threads per PE issue RMA and AMOs concurrently, first on the
 * default context, then each on a private context of its own (non-blocking puts, fetching
 * AMOs, gets, each context's quiet). scripts/tsan.sh runs it under ThreadSanitizer too. */
#include <pthread.h>

#include "check.h"

#define THREADS 4
#define ITERS 2000
#define BLOCK 512
long g_total;
long g_slots[THREADS * 64];
long g_fetched;               /* fetch-adds of phase 2, one per thread of the left neighbour */
long g_block[THREADS][BLOCK]; /* phase 2: put by thread t of the left neighbour */
long g_src[THREADS][BLOCK];   /* phase 2: got by thread t of the right neighbour */

static void* work(void* arg) {
  int t = (int)(intptr_t)arg, me = shmem_my_pe(), n = shmem_n_pes();
  for (int i = 0; i < ITERS; ++i) {
    shmem_long_atomic_add(&g_total, 1, (me + i) % n);
    shmem_long_p(&g_slots[t * 64 + me], (long)rnd(t, me, i), (me + 1) % n);
  }
  return NULL;
}

/* Phase 2, on a private context: a block put to the right (non-blocking), a fetch-add there,
 * a block got from the left, and the context's quiet; the old value fetched is in range. */
static void* work_ctx(void* arg) {
  int t = (int)(intptr_t)arg, me = shmem_my_pe(), n = shmem_n_pes();
  int right = (me + 1) % n, left = (me + n - 1) % n;
  shmem_ctx_t ctx;
  if (shmem_ctx_create(SHMEM_CTX_PRIVATE, &ctx) != 0) ctx = SHMEM_CTX_DEFAULT;
  long out[BLOCK], in[BLOCK];
  for (int k = 0; k < BLOCK; ++k) out[k] = (long)rnd(100 + t, me, k);
  shmem_ctx_putmem_nbi(ctx, g_block[t], out, sizeof(out), right);
  long old = shmem_ctx_long_atomic_fetch_add(ctx, &g_fetched, 1, right);
  CHECK(old >= 0 && old < THREADS, "thread %d fetched %ld", t, old);
  shmem_ctx_getmem(ctx, in, g_src[t], sizeof(in), left);
  for (int k = 0; k < BLOCK; ++k) CHECK(in[k] == (long)rnd(200 + t, left, k), "thread %d got [%d] %ld", t, k, in[k]);
  shmem_ctx_quiet(ctx);
  if (ctx != SHMEM_CTX_DEFAULT) shmem_ctx_destroy(ctx);
  return NULL;
}

int main(int argc, char** argv) {
  seed_from_args(argc, argv);
  int provided = -1;
  CHECK(shmem_init_thread(SHMEM_THREAD_MULTIPLE, &provided) == 0, "init_thread");
  CHECK(provided == SHMEM_THREAD_MULTIPLE, "provided %d", provided);
  int q;
  shmem_query_thread(&q);
  CHECK(q == SHMEM_THREAD_MULTIPLE, "query_thread");
  int me = shmem_my_pe(), n = shmem_n_pes();
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; ++t) pthread_create(&th[t], NULL, work, (void*)(intptr_t)t);
  for (int t = 0; t < THREADS; ++t) pthread_join(th[t], NULL);
  shmem_quiet();
  shmem_barrier_all();
  long sum = shmem_long_sum_reduce(SHMEM_TEAM_WORLD, &g_total, &g_total, 1) == 0 ? g_total : -1;
  CHECK(sum == (long)THREADS * ITERS * n, "total %ld expected %ld", sum, (long)THREADS * ITERS * n);
  int left = (me + n - 1) % n;
  for (int t = 0; t < THREADS; ++t)
    CHECK(g_slots[t * 64 + left] == (long)rnd(t, left, ITERS - 1), "last value of thread %d", t);

  for (int t = 0; t < THREADS; ++t)
    for (int k = 0; k < BLOCK; ++k) g_src[t][k] = (long)rnd(200 + t, me, k);
  shmem_barrier_all();
  for (int t = 0; t < THREADS; ++t) pthread_create(&th[t], NULL, work_ctx, (void*)(intptr_t)t);
  for (int t = 0; t < THREADS; ++t) pthread_join(th[t], NULL);
  shmem_barrier_all();
  CHECK(g_fetched == THREADS, "fetch-adds %ld expected %d", g_fetched, THREADS);
  for (int t = 0; t < THREADS; ++t)
    for (int k = 0; k < BLOCK; ++k)
      CHECK(g_block[t][k] == (long)rnd(100 + t, left, k), "block of thread %d [%d]", t, k);
  shmem_finalize();
  if (me == 0) printf("threads: OK on %d PEs\n", n);
  return 0;
}
