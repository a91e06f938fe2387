/* SPDX-License-Identifier: MIT
 * Fairness of the multiple-element waits (OpenSHMEM 1.5 9.11): repeated _any calls over
 * elements that stay satisfied must hand out every satisfied, unmasked index in turn (an
 * implementation that always returns the lowest one starves the rest), and _some reports
 * them all. The right neighbour writes random values; a random mask excludes some. */
#include <string.h>

#include "check.h"

#define N 24
long lflags[N];
int iflags[N];

static void expect_round_robin(const char* what, size_t (*next)(void*), void* arg, const int* satisfied) {
  /* Two rounds: within each, every satisfied index comes exactly once. */
  int want = 0;
  for (int i = 0; i < N; ++i) want += satisfied[i];
  for (int round = 0; round < 2; ++round) {
    int seen[N] = {0};
    for (int k = 0; k < want; ++k) {
      size_t i = next(arg);
      CHECK(i < N && satisfied[i], "%s: call %d of round %d returned %zu", what, k, round, i);
      CHECK(!seen[i], "%s: index %zu handed out twice in round %d before the others (call %d of %d)", what, i, round, k,
            want);
      seen[i] = 1;
    }
  }
}

struct Args {
  const int* status;
  long value;
  const long* values;
};
static size_t l_test_any(void* a) {
  struct Args* x = a;
  return shmem_long_test_any(lflags, N, x->status, SHMEM_CMP_EQ, x->value);
}
static size_t l_wait_any(void* a) {
  struct Args* x = a;
  return shmem_long_wait_until_any(lflags, N, x->status, SHMEM_CMP_EQ, x->value);
}
static size_t l_test_any_vec(void* a) {
  struct Args* x = a;
  return shmem_long_test_any_vector(lflags, N, x->status, SHMEM_CMP_EQ, (long*)x->values);
}
static size_t l_wait_any_vec(void* a) {
  struct Args* x = a;
  return shmem_long_wait_until_any_vector(lflags, N, x->status, SHMEM_CMP_EQ, (long*)x->values);
}
static size_t i_generic_any(void* a) {
  struct Args* x = a;
  return shmem_test_any(iflags, N, x->status, SHMEM_CMP_NE, (int)x->value);
}

int main(int argc, char** argv) {
  seed_from_args(argc, argv);
  shmem_init();
  int me = shmem_my_pe(), n = shmem_n_pes(), right = (me + 1) % n, left = (me + n - 1) % n;

  /* The left neighbour's data: element i holds 1 + rnd % 3, so about a third equal 2. */
  long mine[N];
  int imine[N];
  for (int i = 0; i < N; ++i) {
    mine[i] = 1 + (long)(rnd(1, me, i) % 3);
    imine[i] = (int)(rnd(2, me, i) % 4);
  }
  shmem_long_put(lflags, mine, N, right);
  shmem_int_put(iflags, imine, N, right);
  shmem_barrier_all();

  int status[N], satisfied[N], isat[N];
  long values[N];
  int any_sat = 0;
  for (int i = 0; i < N; ++i) {
    long theirs = 1 + (long)(rnd(1, left, i) % 3);
    status[i] = (int)(rnd(3, me, i) % 5 == 0); /* mask about a fifth */
    satisfied[i] = !status[i] && theirs == 2;
    any_sat |= satisfied[i];
    values[i] = (rnd(4, me, i) & 1) ? theirs : theirs + 1; /* vector form: about half match */
  }
  if (!any_sat) { /* keep the check meaningful: unmask one element that is 2 */
    for (int i = 0; i < N; ++i)
      if (1 + (long)(rnd(1, left, i) % 3) == 2) {
        status[i] = 0;
        satisfied[i] = 1;
        break;
      }
  }
  /* After the unmasking above: an element it unmasked is handed out by the int waits too. */
  for (int i = 0; i < N; ++i) isat[i] = !status[i] && (int)(rnd(2, left, i) % 4) != 0;
  struct Args args = {status, 2, values};
  int any = 0;
  for (int i = 0; i < N; ++i) any |= satisfied[i];
  if (any) {
    expect_round_robin("shmem_long_test_any", l_test_any, &args, satisfied);
    expect_round_robin("shmem_long_wait_until_any", l_wait_any, &args, satisfied);
  }
  int vsat[N], vany = 0;
  for (int i = 0; i < N; ++i) {
    long theirs = 1 + (long)(rnd(1, left, i) % 3);
    vsat[i] = !status[i] && values[i] == theirs;
    vany |= vsat[i];
  }
  if (vany) {
    expect_round_robin("shmem_long_test_any_vector", l_test_any_vec, &args, vsat);
    expect_round_robin("shmem_long_wait_until_any_vector", l_wait_any_vec, &args, vsat);
  }
  int iany = 0;
  for (int i = 0; i < N; ++i) iany |= isat[i];
  struct Args iargs = {status, 0, NULL};
  if (iany) expect_round_robin("shmem_test_any (generic, int)", i_generic_any, &iargs, isat);

  /* _some reports every satisfied, unmasked index, each once, in index order. */
  size_t idx[N];
  size_t got = shmem_long_test_some(lflags, N, idx, status, SHMEM_CMP_EQ, 2);
  size_t k = 0;
  for (int i = 0; i < N; ++i)
    if (satisfied[i]) {
      CHECK(k < got && idx[k] == (size_t)i, "test_some: entry %zu is %zu, expected %d", k, k < got ? idx[k] : 0, i);
      ++k;
    }
  CHECK(k == got, "test_some returned %zu indices, %zu satisfied", got, k);
  got = shmem_long_wait_until_some_vector(lflags, N, idx, status, SHMEM_CMP_EQ, values);
  k = 0;
  for (int i = 0; i < N; ++i)
    if (vsat[i]) {
      CHECK(k < got && idx[k] == (size_t)i, "wait_until_some_vector: entry %zu", k);
      ++k;
    }
  CHECK(k == got || (!vany && got == 0), "wait_until_some_vector returned %zu, %zu satisfied", got, k);

  /* A server that takes whichever request is ready and clears it: every request is served. */
  long* req = shmem_calloc((size_t)n, sizeof(long));
  shmem_barrier_all();
  shmem_long_atomic_set(&req[me], 1 + (long)(rnd(6, me, 0) % 1000), 0);
  if (me == 0) {
    int served[64] = {0};
    for (int r = 0; r < n; ++r) {
      size_t i = shmem_long_wait_until_any(req, (size_t)n, NULL, SHMEM_CMP_NE, 0);
      CHECK(i < (size_t)n && !served[i], "request %zu served twice", i);
      CHECK(req[i] == 1 + (long)(rnd(6, (int)i, 0) % 1000), "request %zu value %ld", i, req[i]);
      served[i] = 1;
      req[i] = 0;
    }
  }
  shmem_barrier_all();
  shmem_free(req);
  shmem_finalize();
  if (me == 0) printf("fair: OK on %d PEs\n", n);
  return 0;
}
