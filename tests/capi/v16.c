/* SPDX-License-Identifier: MIT
 * The OpenSHMEM 1.6 routines MORI has: shmem_team_ptr, shmem_(ctx_)signal_add/set,
 * shmem_ibput/ibget (typed, sized, context, generic), shmem_sum_inscan/exscan on a split
 * team, session hints around a batch of puts, and shmem_(ctx_)pe_quiet (data put with _nbi
 * and completed by pe_quiet is there when the flag that follows it arrives), repeated
 * init/finalize with shmem_query_initialized. `v16 badstride`
 * passes dst = 0, `v16 badquiet` a target PE out of range. */
#include <string.h>

#include "check.h"

#define NB 5 /* blocks */
#define BS 3 /* elements per block */
long g_x;
long g_dest[NB * 4];
uint32_t g_dest32[NB * 4];

int main(int argc, char** argv) {
  const char* mode = argc > 2 ? argv[2] : "";
  seed_from_args(argc, argv);
  shmem_init();
  int me = shmem_my_pe(), n = shmem_n_pes(), right = (me + 1) % n, left = (me + n - 1) % n;
  int major = 0, minor = 0;
  shmem_info_get_version(&major, &minor);
  CHECK(major == SHMEM_MAJOR_VERSION && minor == SHMEM_MINOR_VERSION, "version %d.%d", major, minor);

  /* team_ptr: team-relative PE numbers; NULL for non-members and invalid teams */
  CHECK(shmem_team_ptr(SHMEM_TEAM_WORLD, &g_x, me) == &g_x, "team_ptr to self");
  CHECK(shmem_team_ptr(SHMEM_TEAM_WORLD, &g_x, right) == shmem_ptr(&g_x, right), "team_ptr(world) != shmem_ptr");
  CHECK(shmem_team_ptr(SHMEM_TEAM_INVALID, &g_x, 0) == NULL, "team_ptr on SHMEM_TEAM_INVALID");
  CHECK(shmem_team_ptr(SHMEM_TEAM_WORLD, &g_x, n) == NULL, "team_ptr past the team");
  shmem_team_t odd; /* PEs 1, 3, 5, ... */
  int nodd = n / 2;
  if (nodd > 0) {
    shmem_team_split_strided(SHMEM_TEAM_WORLD, 1, 2, nodd, NULL, 0, &odd);
  } else {
    odd = SHMEM_TEAM_INVALID;
  }
  if (odd != SHMEM_TEAM_INVALID) {
    for (int k = 0; k < nodd; ++k)
      CHECK(shmem_team_ptr(odd, &g_x, k) == shmem_ptr(&g_x, 1 + 2 * k), "team_ptr(odd, %d)", k);
  }

  /* signals without data, with and without a context */
  shmem_ctx_t ctx;
  CHECK(shmem_ctx_create(0, &ctx) == 0, "ctx_create");
  uint64_t* sig = shmem_calloc(3, sizeof(uint64_t));
  uint64_t a = rnd(1, me, 0) >> 3, b = rnd(2, me, 0), c = rnd(3, me, 0);
  shmem_signal_add(&sig[0], a, right);
  shmem_ctx_signal_add(ctx, &sig[0], a, right);
  shmem_signal_set(&sig[1], b, right);
  shmem_ctx_signal_set(ctx, &sig[2], c, right);
  shmem_ctx_quiet(ctx);
  shmem_barrier_all();
  CHECK(shmem_signal_fetch(&sig[0]) == 2 * (rnd(1, left, 0) >> 3), "signal_add");
  CHECK(sig[1] == rnd(2, left, 0) && sig[2] == rnd(3, left, 0), "signal_set");

  /* interleaved blocks: NB blocks of BS, source blocks 4 apart, dest blocks 4 apart (longs),
   * then 32-bit blocks source 3 apart (contiguous) into dest 4 apart; gets read them back */
  long src[NB * 4];
  uint32_t src32[NB * 3];
  for (int i = 0; i < NB * 4; ++i) src[i] = (long)(rnd(4, me, i) >> 1);
  for (int i = 0; i < NB * 3; ++i) src32[i] = (uint32_t)rnd(5, me, i);
  for (int i = 0; i < NB * 4; ++i) g_dest[i] = -1, g_dest32[i] = 0xdeadbeef;
  shmem_barrier_all();
  shmem_long_ibput(g_dest, src, 4, 4, BS, NB, right);
  shmem_ctx_ibput32(ctx, g_dest32, src32, 4, 3, BS, NB, right);
  shmem_ctx_quiet(ctx);
  shmem_barrier_all();
  for (int k = 0; k < NB; ++k)
    for (int j = 0; j < 4; ++j) {
      long want = j < BS ? (long)(rnd(4, left, (uint64_t)(4 * k + j)) >> 1) : -1;
      CHECK(g_dest[4 * k + j] == want, "ibput block %d element %d: %ld", k, j, g_dest[4 * k + j]);
      uint32_t w32 = j < BS ? (uint32_t)rnd(5, left, (uint64_t)(3 * k + j)) : 0xdeadbeef;
      CHECK(g_dest32[4 * k + j] == w32, "ibput32 block %d element %d", k, j);
    }
  long back[NB * 2];                             /* the first 2 of each block, packed */
  shmem_ibget(back, g_dest, 2, 4, 2, NB, right); /* generic */
  for (int k = 0; k < NB; ++k)
    for (int j = 0; j < 2; ++j)
      CHECK(back[2 * k + j] == (long)(rnd(4, me, (uint64_t)(4 * k + j)) >> 1), "ibget block %d element %d", k, j);

  /* prefix sums over the odd team (team order), in place for exscan */
  long *in = shmem_malloc(4 * sizeof(long)), *out = shmem_malloc(4 * sizeof(long)); /* collective: every PE */
  if (odd != SHMEM_TEAM_INVALID) {
    int tme = shmem_team_my_pe(odd);
    for (int j = 0; j < 4; ++j) in[j] = (long)(rnd(6, me, j) % 1000000);
    shmem_long_sum_inscan(odd, out, in, 4);
    for (int j = 0; j < 4; ++j) {
      long want = 0;
      for (int k = 0; k <= tme; ++k) want += (long)(rnd(6, 1 + 2 * k, j) % 1000000);
      CHECK(out[j] == want, "inscan element %d: %ld vs %ld", j, out[j], want);
    }
    shmem_sum_exscan(odd, in, in, 4);
    for (int j = 0; j < 4; ++j) {
      long want = 0;
      for (int k = 0; k < tme; ++k) want += (long)(rnd(6, 1 + 2 * k, j) % 1000000);
      CHECK(in[j] == want, "exscan element %d: %ld vs %ld", j, in[j], want);
    }
  }
  shmem_free(out);
  shmem_free(in);

  /* a session around a batch of puts: hints only, the data arrives as always */
  shmem_ctx_session_config_t cfg = {.total_ops = 8};
  shmem_ctx_session_start(ctx, SHMEM_CTX_SESSION_BATCH, &cfg, SHMEM_CTX_SESSION_TOTAL_OPS);
  for (int i = 0; i < 8; ++i) shmem_ctx_long_p(ctx, &g_dest[i], (long)rnd(7, me, i), right);
  shmem_ctx_session_stop(ctx);
  shmem_ctx_quiet(ctx);
  shmem_barrier_all();
  for (int i = 0; i < 8; ++i) CHECK(g_dest[i] == (long)rnd(7, left, i), "session put %d", i);

  /* pe_quiet: nbi puts to the right neighbour, completed by pe_quiet on it alone, then a flag */
  static long pq_data[64], pq_flag;
  shmem_barrier_all();
  for (int round = 1; round <= 20; ++round) {
    for (int i = 0; i < 64; ++i) {
      long v = (long)rnd(8, me, (uint64_t)(round * 64 + i));
      shmem_long_put_nbi(&pq_data[i], &v, 1, right);
    }
    int target = right, none = -1;
    if (round % 2)
      shmem_pe_quiet(&target, 1);
    else
      shmem_ctx_pe_quiet(ctx, &target, 1);
    shmem_pe_quiet(&none, 0); /* npes 0: the list is not read */
    shmem_pe_quiet(NULL, 0);
    shmem_long_atomic_set(&pq_flag, round, right);
    shmem_long_wait_until(&pq_flag, SHMEM_CMP_EQ, round);
    for (int i = 0; i < 64; ++i)
      CHECK(pq_data[i] == (long)rnd(8, left, (uint64_t)(round * 64 + i)), "pe_quiet round %d element %d", round, i);
    shmem_barrier_all(); /* the left neighbour may overwrite pq_data now */
  }

  if (!strcmp(mode, "badstride")) shmem_long_ibput(g_dest, src, 0, 1, 1, 2, right);
  if (!strcmp(mode, "badquiet")) {
    int pes[2] = {right, n + 2};
    shmem_pe_quiet(pes, 2);
  }

  shmem_ctx_destroy(ctx);
  if (odd != SHMEM_TEAM_INVALID) shmem_team_destroy(odd);
  shmem_free(sig);

  /* multiple initialization: each init is matched by a finalize; only the last one ends it */
  int initialized = -1, provided = -1;
  shmem_query_initialized(&initialized);
  CHECK(initialized == 1, "query_initialized after init: %d", initialized);
  shmem_init();
  CHECK(shmem_init_thread(SHMEM_THREAD_MULTIPLE, &provided) == 0, "second init_thread");
  CHECK(provided == SHMEM_THREAD_SINGLE, "a repeated init keeps the first thread level, got %d", provided);
  shmem_finalize();
  shmem_finalize();
  shmem_query_initialized(&initialized);
  CHECK(initialized == 1, "still initialized with one init unmatched: %d", initialized);
  long v = (long)rnd(9, me, 0);
  shmem_long_p(&g_x, v, right); /* and it still works */
  shmem_barrier_all();
  CHECK(g_x == (long)rnd(9, left, 0), "put after a matched init/finalize pair");
  shmem_finalize();
  shmem_query_initialized(&initialized);
  CHECK(initialized == 0, "query_initialized after the last finalize: %d", initialized);
  if (me == 0) printf("v16: OK on %d PEs\n", n);
  return 0;
}
