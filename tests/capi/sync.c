/* SPDX-License-Identifier: MIT
 * Point-to-point synchronization (wait_until, all/any/some, vector forms, test*),
 * signals (put_signal, signal_wait_until), fence ordering and locks. */
#include <string.h>

#include "check.h"

#define M 8
long flags[M];
long g_lock;   /* the lock word: symmetric, starts at 0 */
long g_shared; /* protected by g_lock: read-modify-write through RMA */
int g_order[2];

int main(int argc, char** argv) {
  seed_from_args(argc, argv);
  shmem_init();
  int me = shmem_my_pe(), n = shmem_n_pes();
  int right = (me + 1) % n, left = (me + n - 1) % n;

  /* ping around a ring: PE 0 starts, each waits for its left neighbour */
  long* token = shmem_calloc(1, sizeof(long));
  if (me == 0) shmem_long_p(token, 1, right);
  shmem_long_wait_until(token, SHMEM_CMP_GE, 1);
  if (me != 0)
    shmem_long_p(token, *token + 1, right);
  else
    CHECK(shmem_long_test(token, SHMEM_CMP_EQ, n > 1 ? n : 1), "token came back %ld", *token);
  shmem_barrier_all();

  /* wait_until_all / any / some with a status mask, and the vector forms */
  for (int i = 0; i < M; ++i) flags[i] = 0;
  shmem_barrier_all();
  for (int i = 0; i < M; ++i) shmem_long_p(&flags[i], (i % 2) ? 7 : 3, right);
  shmem_fence();
  shmem_barrier_all();
  int status[M] = {0};
  shmem_long_wait_until_all(flags, M, status, SHMEM_CMP_GT, 0);
  size_t any = shmem_long_wait_until_any(flags, M, NULL, SHMEM_CMP_EQ, 7);
  CHECK(any < M && any % 2 == 1, "any %zu", any);
  size_t idx[M];
  size_t some = shmem_long_wait_until_some(flags, M, idx, NULL, SHMEM_CMP_EQ, 3);
  CHECK(some == M / 2, "some %zu", some);
  for (size_t k = 0; k < some; ++k) CHECK(idx[k] % 2 == 0, "some idx %zu", idx[k]);
  status[1] = status[3] = status[5] = status[7] = 1; /* ignore the 7s */
  CHECK(shmem_long_test_all(flags, M, status, SHMEM_CMP_EQ, 3) == 1, "test_all masked");
  CHECK(shmem_long_test_any(flags, M, status, SHMEM_CMP_EQ, 7) == SIZE_MAX, "test_any none");
  long want[M];
  for (int i = 0; i < M; ++i) want[i] = (i % 2) ? 7 : 3;
  shmem_long_wait_until_all_vector(flags, M, NULL, SHMEM_CMP_EQ, want);
  CHECK(shmem_long_test_some_vector(flags, M, idx, NULL, SHMEM_CMP_NE, want) == 0, "test_some_vector");
  for (int k = 0; k < M; ++k) CHECK(shmem_test(&flags[k], SHMEM_CMP_EQ, want[k]), "generic test %d", k);
  shmem_barrier_all();

  /* put_signal: payload then signal; the receiver sees the payload once the signal arrives */
  uint64_t* sig = shmem_calloc(1, sizeof(uint64_t));
  int* payload = shmem_malloc(256 * sizeof(int));
  int data[256];
  for (int i = 0; i < 256; ++i) data[i] = (int)rnd(5, me, i);
  shmem_int_put_signal(payload, data, 256, sig, 1, SHMEM_SIGNAL_ADD, right);
  uint64_t got = shmem_signal_wait_until(sig, SHMEM_CMP_EQ, 1);
  CHECK(got == 1, "signal %llu", (unsigned long long)got);
  for (int i = 0; i < 256; ++i) CHECK(payload[i] == (int)rnd(5, left, i), "signal payload %d", i);
  shmem_barrier_all();
  shmem_putmem_signal_nbi(payload, data, 8, sig, 42, SHMEM_SIGNAL_SET, right);
  shmem_quiet();
  shmem_signal_wait_until(sig, SHMEM_CMP_EQ, 42);
  CHECK(shmem_signal_fetch(sig) == 42, "signal set");

  /* locks: every PE increments a global counter on PE 0 under the lock, 20 times */
  shmem_barrier_all();
  for (int k = 0; k < 20; ++k) {
    shmem_set_lock(&g_lock);
    long v = shmem_long_g(&g_shared, 0);
    shmem_long_p(&g_shared, v + 1, 0);
    shmem_clear_lock(&g_lock);
  }
  int acquired = 0;
  while (!acquired) acquired = shmem_test_lock(&g_lock) == 0;
  shmem_long_atomic_add(&g_shared, 1000, 0);
  shmem_clear_lock(&g_lock);
  shmem_barrier_all();
  if (me == 0) CHECK(g_shared == 1020L * n, "locked counter %ld expected %ld", g_shared, 1020L * n);
  CHECK(g_lock == 0 || me != 0, "lock released: %lx", g_lock);

  shmem_free(payload);
  shmem_free(sig);
  shmem_free(token);
  shmem_finalize();
  if (me == 0) printf("sync: OK on %d PEs\n", n);
  return 0;
}
