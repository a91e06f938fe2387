/* SPDX-License-Identifier: MIT
 * SHMEM_THREAD_MULTIPLE: several threads per PE issue RMA and AMOs concurrently. */
#include <pthread.h>

#include "check.h"

#define THREADS 4
#define ITERS 2000
long g_total;
long g_slots[THREADS * 64];

static void* work(void* arg) {
  int t = (int)(intptr_t)arg, me = shmem_my_pe(), n = shmem_n_pes();
  for (int i = 0; i < ITERS; ++i) {
    shmem_long_atomic_add(&g_total, 1, (me + i) % n);
    shmem_long_p(&g_slots[t * 64 + me], (long)rnd(t, me, i), (me + 1) % n);
  }
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
  shmem_finalize();
  if (me == 0) printf("threads: OK on %d PEs\n", n);
  return 0;
}
