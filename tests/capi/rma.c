/* SPDX-License-Identifier: MIT
 * RMA on the heap and on global/static variables: typed, sized, untyped, strided,
 * single-element, non-blocking, contexts (including team contexts) and C11 generics. */
#include <string.h>

#include "check.h"

#define N 1000
long g_long[N];                /* bss */
static int s_int[17] = {1, 2}; /* data, static */
double g_double = 3.5;
static char g_bytes[4096];

int main(int argc, char** argv) {
  seed_from_args(argc, argv);
  shmem_init();
  int me = shmem_my_pe(), n = shmem_n_pes();
  int right = (me + 1) % n, left = (me + n - 1) % n;

  /* globals: put into the right neighbour, check what the left one wrote */
  long src[N];
  for (int i = 0; i < N; ++i) src[i] = (long)rnd(1, me, i);
  shmem_long_put(g_long, src, N, right);
  int isrc[17];
  for (int i = 0; i < 17; ++i) isrc[i] = (int)rnd(2, me, i);
  shmem_int_put_nbi(s_int, isrc, 17, right);
  shmem_double_p(&g_double, (double)me + 0.25, right);
  shmem_quiet();
  shmem_barrier_all();
  for (int i = 0; i < N; ++i) CHECK(g_long[i] == (long)rnd(1, left, i), "g_long[%d]", i);
  for (int i = 0; i < 17; ++i) CHECK(s_int[i] == (int)rnd(2, left, i), "s_int[%d]", i);
  CHECK(g_double == left + 0.25, "g_double %f", g_double);
  CHECK(shmem_addr_accessible(g_long, right) && shmem_addr_accessible(&s_int[3], left), "globals accessible");

  /* get from a global and from the heap */
  long got[N];
  shmem_long_get(got, g_long, N, right);
  for (int i = 0; i < N; ++i) CHECK(got[i] == (long)rnd(1, me, i), "get g_long[%d]", i);
  CHECK(shmem_int_g(&s_int[5], left) == (int)rnd(2, (left + n - 1) % n, 5), "int_g");

  /* heap: every sized variant */
  uint8_t* heap = shmem_malloc(8 * N * 16);
  CHECK(heap != NULL, "malloc");
  uint8_t local[8 * N * 16];
  for (size_t i = 0; i < sizeof(local); ++i) local[i] = (uint8_t)rnd(3, me, i);
  shmem_put8(heap, local, 100, right);
  shmem_put16(heap + 100, local + 100, 50, right);
  shmem_put32(heap + 200, local + 200, 25, right);
  shmem_put64(heap + 304, local + 304, 12, right);
  shmem_put128(heap + 400, local + 400, 6, right);
  shmem_putmem_nbi(heap + 496, local + 496, 5000, right);
  shmem_quiet();
  shmem_barrier_all();
  for (size_t i = 0; i < 5496; ++i)
    if (!(i >= 300 && i < 304)) CHECK(heap[i] == (uint8_t)rnd(3, left, i), "heap byte %zu", i);
  uint8_t back[5000];
  shmem_getmem_nbi(back, heap + 496, 5000, left);
  shmem_quiet();
  for (size_t i = 0; i < 5000; ++i) CHECK(back[i] == (uint8_t)rnd(3, (left + n - 1) % n, 496 + i), "getmem %zu", i);

  /* sizes around the vector-copy bounds (mori/core/copy.h), at odd offsets, both ways */
  {
    static const size_t sizes[] = {2047, 2048, 2049, 4096 + 33, 65536 + 7, (1u << 20) - 1, 1u << 20, (1u << 20) + 1};
    const size_t most = (1u << 20) + 1;
    uint8_t* big = shmem_malloc(most + 16);
    uint8_t *mine = malloc(most + 16), *back_big = malloc(most + 16);
    CHECK(big && mine && back_big, "malloc of the copy-bound buffers");
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); ++k) {
      const size_t bytes = sizes[k];
      for (size_t i = 0; i < bytes; ++i) mine[3 + i] = (uint8_t)rnd(10 + (int)k, me, i);
      shmem_barrier_all();
      shmem_putmem(big + 5, mine + 3, bytes, right);
      shmem_barrier_all();
      for (size_t i = 0; i < bytes; ++i)
        CHECK(big[5 + i] == (uint8_t)rnd(10 + (int)k, left, i), "put of %zu bytes: byte %zu", bytes, i);
      shmem_getmem(back_big + 1, big + 5, bytes, right);
      for (size_t i = 0; i < bytes; ++i)
        CHECK(back_big[1 + i] == (uint8_t)rnd(10 + (int)k, me, i), "get of %zu bytes: byte %zu", bytes, i);
      /* the same non-blocking, completed by quiet (a large get over UCX's sm outran its flush) */
      memset(back_big, 0, bytes + 1);
      shmem_getmem_nbi(back_big + 1, big + 5, bytes, right);
      shmem_quiet();
      for (size_t i = 0; i < bytes; ++i)
        CHECK(back_big[1 + i] == (uint8_t)rnd(10 + (int)k, me, i), "get_nbi of %zu bytes: byte %zu", bytes, i);
      for (size_t i = 0; i < bytes; ++i) mine[3 + i] = (uint8_t)rnd(20 + (int)k, me, i);
      shmem_barrier_all();
      shmem_putmem_nbi(big + 5, mine + 3, bytes, right);
      shmem_quiet();
      shmem_barrier_all();
      for (size_t i = 0; i < bytes; ++i)
        CHECK(big[5 + i] == (uint8_t)rnd(20 + (int)k, left, i), "put_nbi of %zu bytes: byte %zu", bytes, i);
    }
    shmem_barrier_all();
    shmem_free(big);
    free(mine);
    free(back_big);
  }

  /* strided: every 3rd element of src into every 2nd element of dest */
  int* strided = shmem_calloc(64, sizeof(int));
  int sv[64];
  for (int i = 0; i < 64; ++i) sv[i] = (int)rnd(4, me, i);
  shmem_int_iput(strided, sv, 2, 3, 20, right);
  shmem_barrier_all();
  for (int i = 0; i < 64; ++i) {
    int expect = (i % 2 == 0 && i / 2 < 20) ? (int)rnd(4, left, (i / 2) * 3) : 0;
    CHECK(strided[i] == expect, "iput[%d]=%d expected %d", i, strided[i], expect);
  }
  int ig[10];
  shmem_int_iget(ig, strided, 1, 4, 10, left);
  for (int i = 0; i < 10; ++i) {
    int lleft = (left + n - 1) % n;
    int expect = (4 * i / 2 < 20) ? (int)rnd(4, lleft, (4 * i / 2) * 3) : 0;
    CHECK(ig[i] == expect, "iget[%d]", i);
  }
  shmem_barrier_all();

  /* contexts: default, private, and a team context with team-relative PE numbers */
  shmem_ctx_t ctx;
  CHECK(shmem_ctx_create(SHMEM_CTX_PRIVATE, &ctx) == 0, "ctx_create");
  shmem_ctx_long_p(ctx, &g_long[0], -7 - me, right);
  shmem_ctx_quiet(ctx);
  shmem_ctx_destroy(ctx);
  shmem_team_t odd = SHMEM_TEAM_INVALID;
  shmem_team_split_strided(SHMEM_TEAM_WORLD, 1, 2, n / 2, NULL, 0, &odd);
  if (odd != SHMEM_TEAM_INVALID) {
    shmem_ctx_t tctx;
    CHECK(shmem_team_create_ctx(odd, 0, &tctx) == 0, "team_create_ctx");
    shmem_team_t back_team;
    CHECK(shmem_ctx_get_team(tctx, &back_team) == 0 && back_team == odd, "ctx_get_team");
    int tn = shmem_team_n_pes(odd), tme = shmem_team_my_pe(odd);
    /* team PE (tme+1)%tn is world PE 1 + 2*((tme+1)%tn) */
    shmem_ctx_long_put(tctx, &g_long[1], (long[]){1000 + me}, 1, (tme + 1) % tn);
    shmem_ctx_quiet(tctx);
    shmem_ctx_destroy(tctx);
  }
  shmem_barrier_all();
  CHECK(g_long[0] == -7 - left, "ctx put %ld", g_long[0]);
  if (odd != SHMEM_TEAM_INVALID) {
    int tn = shmem_team_n_pes(odd), tme = shmem_team_my_pe(odd);
    int from = 1 + 2 * ((tme + tn - 1) % tn);
    CHECK(g_long[1] == 1000 + from, "team ctx put %ld expected %d", g_long[1], 1000 + from);
    shmem_team_destroy(odd);
  }

  /* C11 generics */
  shmem_barrier_all();
  long gv = 12345 + me;
  shmem_p(&g_long[2], gv, right);
  shmem_put(&g_long[3], &gv, 1, right);
  float fv = 1.5f * me;
  float* fheap = shmem_malloc(4 * sizeof(float));
  shmem_p(fheap, fv, right);
  shmem_barrier_all();
  CHECK(g_long[2] == 12345 + left && g_long[3] == 12345 + left, "generic p/put");
  CHECK(*fheap == 1.5f * left, "generic float p");
  CHECK(shmem_g(&g_long[2], right) == 12345 + me, "generic g");
  shmem_ctx_t dctx = SHMEM_CTX_DEFAULT;
  CHECK(shmem_g(dctx, &g_long[3], right) == 12345 + me, "generic ctx g");
  shmem_barrier_all();

  /* zero-length RMA with NULL buffers is a no-op */
  shmem_putmem(NULL, NULL, 0, right);
  shmem_getmem(NULL, NULL, 0, right);
  /* shmem_ptr works on globals and the heap for PEs of this host (SHMEM_TEAM_SHARED), and is
     NULL for PEs on other hosts; MORI_NET_TRANSPORT=ucx-all reaches same-host PEs through UCX,
     which maps nothing, so there it is NULL too */
  long* peer = shmem_ptr(g_long, right);
  const char* net = getenv("MORI_NET_TRANSPORT");
  int mapped = net == NULL || strcmp(net, "ucx-all") != 0;
  if (mapped && shmem_team_translate_pe(SHMEM_TEAM_WORLD, right, SHMEM_TEAM_SHARED) >= 0) {
    CHECK(peer != NULL && peer[2] == 12345 + me, "shmem_ptr on a global");
    CHECK(shmem_ptr(g_bytes, right) != NULL, "shmem_ptr on static bss");
  } else {
    CHECK(peer == NULL && shmem_ptr(g_bytes, right) == NULL, "shmem_ptr to another host is NULL");
  }
  int local_var = 0;
  CHECK(shmem_ptr(&local_var, right) == NULL, "shmem_ptr on a stack address is NULL");
  CHECK(shmem_malloc(0) == NULL, "malloc(0) is NULL");

  shmem_free(fheap);
  shmem_free(strided);
  shmem_free(heap);
  shmem_finalize();
  if (me == 0) printf("rma: OK on %d PEs\n", n);
  return 0;
}
