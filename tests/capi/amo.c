/* SPDX-License-Identifier: MIT
 * AMOs on the heap and on globals: every operation, 32- and 64-bit types, float
 * fetch/set/swap, non-blocking fetching forms, contexts, deprecated names, generics. */
#include "check.h"

long g_counter;      /* every PE adds into PE 0's */
unsigned int g_bits; /* OR of one bit per PE */
int g_guard[3];      /* a 32-bit AMO must write 4 bytes, never 8 */
double g_d;

int main(int argc, char** argv) {
  seed_from_args(argc, argv);
  shmem_init();
  int me = shmem_my_pe(), n = shmem_n_pes();
  int right = (me + 1) % n;

  /* fetch_add on a global: each PE adds a known random amount; PE 0 checks the sum */
  long mine = (long)(rnd(1, me, 0) % 1000);
  long old = shmem_long_atomic_fetch_add(&g_counter, mine, 0);
  CHECK(old >= 0, "fetch_add old %ld", old);
  shmem_long_atomic_add(&g_counter, 1, 0);
  shmem_long_atomic_inc(&g_counter, 0);
  (void)shmem_long_atomic_fetch_inc(&g_counter, 0);
  shmem_barrier_all();
  if (me == 0) {
    long expect = 0;
    for (int p = 0; p < n; ++p) expect += (long)(rnd(1, p, 0) % 1000) + 3;
    CHECK(g_counter == expect, "sum %ld expected %ld", g_counter, expect);
    CHECK(shmem_long_atomic_fetch(&g_counter, 0) == expect, "atomic_fetch");
  }
  /* bitwise on unsigned and fixed-width */
  shmem_uint_atomic_or(&g_bits, 1u << me, 0);
  shmem_barrier_all();
  if (me == 0) CHECK(g_bits == (1u << n) - 1, "or bits %x", g_bits);
  shmem_barrier_all();
  unsigned int before = shmem_uint_atomic_fetch_and(&g_bits, ~(1u << me), 0);
  CHECK(before & (1u << me), "fetch_and saw my bit");
  shmem_barrier_all();
  if (me == 0) CHECK(g_bits == 0, "and cleared %x", g_bits);
  uint64_t* x = shmem_calloc(n, sizeof(uint64_t));
  uint64_t v = rnd(2, me, 0);
  shmem_uint64_atomic_xor(&x[me], v, right);
  shmem_uint64_atomic_fetch_xor(&x[me], v ^ 0xffull, right); /* leaves 0xff */
  shmem_barrier_all();
  int left = (me + n - 1) % n;
  CHECK(x[left] == 0xffull, "xor %llx", (unsigned long long)x[left]);

  /* 32-bit compare_swap / swap touch exactly 4 bytes */
  g_guard[0] = g_guard[2] = 0x5a5a5a5a;
  g_guard[1] = 0;
  shmem_barrier_all();
  int prev = shmem_int_atomic_compare_swap(&g_guard[1], 0, me + 1, right);
  CHECK(prev == 0, "cswap prev %d", prev);
  prev = shmem_int_atomic_compare_swap(&g_guard[1], 0, 99, right);
  CHECK(prev == me + 1, "failed cswap returns current %d", prev);
  shmem_barrier_all();
  CHECK(g_guard[0] == 0x5a5a5a5a && g_guard[2] == 0x5a5a5a5a, "neighbours of a 32-bit word untouched");
  CHECK(g_guard[1] == left + 1, "cswap result %d", g_guard[1]);
  int sw = shmem_int_atomic_swap(&g_guard[1], -5, me);
  CHECK(sw == left + 1 && g_guard[1] == -5, "swap on self");

  /* float extended AMOs */
  shmem_double_atomic_set(&g_d, 2.5 * me, right);
  shmem_barrier_all();
  CHECK(g_d == 2.5 * left, "double set %f", g_d);
  double dswap = shmem_double_atomic_swap(&g_d, -1.0, me);
  CHECK(dswap == 2.5 * left && shmem_double_atomic_fetch(&g_d, me) == -1.0, "double swap/fetch");

  /* non-blocking fetching AMOs, through a context */
  shmem_ctx_t ctx;
  CHECK(shmem_ctx_create(0, &ctx) == 0, "ctx");
  long* h = shmem_calloc(4, sizeof(long));
  shmem_barrier_all();
  long f1 = -1, f2 = -1;
  shmem_ctx_long_atomic_fetch_add_nbi(ctx, &f1, &h[0], 10, right);
  shmem_ctx_long_atomic_fetch_inc_nbi(ctx, &f2, &h[1], right);
  shmem_ctx_quiet(ctx);
  CHECK(f1 == 0 && f2 == 0, "nbi fetch %ld %ld", f1, f2);
  long f3;
  shmem_long_atomic_compare_swap_nbi(&f3, &h[0], 10, 77, right);
  shmem_quiet();
  CHECK(f3 == 10, "cswap_nbi %ld", f3);
  shmem_ctx_destroy(ctx);
  shmem_barrier_all();
  CHECK(h[0] == 77 && h[1] == 1, "after nbi: %ld %ld", h[0], h[1]);

  /* deprecated names */
  shmem_barrier_all();
  h[2] = 0;
  shmem_barrier_all();
  CHECK(shmem_long_finc(&h[2], 0) >= 0, "finc");
  shmem_long_add(&h[2], 2, 0);
  shmem_barrier_all();
  if (me == 0) CHECK(h[2] == 3L * n, "deprecated finc+add %ld", h[2]);
  shmem_barrier_all();
  if (me == 0) CHECK(shmem_long_cswap(&h[2], 3L * n, 0, 0) == 3L * n && h[2] == 0, "cswap deprecated");
  CHECK(shmem_int_fadd(&g_guard[1], 1, me) == -5 && shmem_int_fetch(&g_guard[1], me) == -4, "fadd/fetch");

  /* C11 generics */
  shmem_barrier_all();
  shmem_atomic_add(&h[3], 5L, right);
  shmem_barrier_all();
  CHECK(shmem_atomic_fetch(&h[3], me) == 5, "generic add/fetch");
  CHECK(shmem_atomic_compare_swap(&h[3], 5L, 6L, me) == 5 && h[3] == 6, "generic cswap");

  shmem_free(h);
  shmem_free(x);
  shmem_finalize();
  if (me == 0) printf("amo: OK on %d PEs\n", n);
  return 0;
}
