/* SPDX-License-Identifier: MIT
 * Collectives on teams (world, shared, strided teams with odd strides, 2d splits):
 * sync, broadcast, collect, fcollect, alltoall(s), every reduction; plus team queries. */
#include <math.h>
#include <string.h>

#include "check.h"

#define NE 37

struct bufs {
  long *src, *dst;
  double *dsrc, *ddst, *check;
};

/* Runs on the members of `team`; the buffers were allocated by every PE beforehand
   (symmetric allocation is a world collective) with room for the whole world. */
static void run_team(shmem_team_t team, int tag, struct bufs* bf) {
  int tn = shmem_team_n_pes(team), tme = shmem_team_my_pe(team);
  int wme = shmem_my_pe();
  CHECK(tn >= 1 && tme >= 0 && tme < tn, "team queries %d/%d", tme, tn);
  CHECK(shmem_team_translate_pe(team, tme, SHMEM_TEAM_WORLD) == wme, "translate to world");
  CHECK(shmem_team_sync(team) == 0, "team_sync");

  long *src = bf->src, *dst = bf->dst;
  double *dsrc = bf->dsrc, *ddst = bf->ddst;

  /* broadcast from every root */
  for (int root = 0; root < tn; ++root) {
    for (int i = 0; i < NE; ++i) src[i] = (long)rnd(tag, root * 1000 + tme, i);
    for (int i = 0; i < NE; ++i) dst[i] = -1;
    CHECK(shmem_long_broadcast(team, dst, src, NE, root) == 0, "broadcast");
    for (int i = 0; i < NE; ++i) CHECK(dst[i] == (long)rnd(tag, root * 1000 + root, i), "bcast root %d i %d", root, i);
  }
  /* fcollect and collect (member k contributes k+1 elements) */
  for (int i = 0; i < NE; ++i) src[i] = (long)rnd(tag + 1, tme, i);
  CHECK(shmem_long_fcollect(team, dst, src, NE) == 0, "fcollect");
  for (int k = 0; k < tn; ++k)
    for (int i = 0; i < NE; ++i) CHECK(dst[k * NE + i] == (long)rnd(tag + 1, k, i), "fcollect %d %d", k, i);
  CHECK(shmem_long_collect(team, dst, src, (size_t)(tme % 3 + 1)) == 0, "collect");
  size_t off = 0;
  for (int k = 0; k < tn; ++k)
    for (int i = 0; i < k % 3 + 1; ++i, ++off) CHECK(dst[off] == (long)rnd(tag + 1, k, i), "collect %d %d", k, i);
  /* alltoall: block j of my src goes to member j */
  for (int j = 0; j < tn; ++j)
    for (int i = 0; i < NE; ++i) src[j * NE + i] = (long)rnd(tag + 2, tme * 64 + j, i);
  CHECK(shmem_long_alltoall(team, dst, src, NE) == 0, "alltoall");
  for (int j = 0; j < tn; ++j)
    for (int i = 0; i < NE; ++i) CHECK(dst[j * NE + i] == (long)rnd(tag + 2, j * 64 + tme, i), "alltoall %d %d", j, i);
  /* alltoalls with strides 2 (dest) and 3 (source), 4 elements per PE */
  memset(dst, 0, NE * tn * tn * sizeof(long));
  for (int i = 0; i < NE * tn; ++i) src[i] = (long)rnd(tag + 3, tme, i);
  shmem_team_sync(team);
  CHECK(shmem_long_alltoalls(team, dst, src, 2, 3, 4) == 0, "alltoalls");
  for (int j = 0; j < tn; ++j)
    for (int k = 0; k < 4; ++k)
      CHECK(dst[(j * 4 + k) * 2] == (long)rnd(tag + 3, j, (tme * 4 + k) * 3), "alltoalls %d %d", j, k);

  /* reductions: exact for integers; doubles must agree bit-for-bit on every member */
  for (int i = 0; i < NE; ++i) src[i] = (long)(rnd(tag + 4, tme, i) % 100000) - 50000;
  long sum[NE], mx[NE], mn[NE], x_or[NE];
  for (int i = 0; i < NE; ++i) {
    sum[i] = 0, mx[i] = -1000000, mn[i] = 1000000, x_or[i] = 0;
    for (int k = 0; k < tn; ++k) {
      long v = (long)(rnd(tag + 4, k, i) % 100000) - 50000;
      sum[i] += v, mx[i] = v > mx[i] ? v : mx[i], mn[i] = v < mn[i] ? v : mn[i], x_or[i] ^= v;
    }
  }
  shmem_long_sum_reduce(team, dst, src, NE);
  for (int i = 0; i < NE; ++i) CHECK(dst[i] == sum[i], "sum %d", i);
  shmem_long_max_reduce(team, dst, src, NE);
  for (int i = 0; i < NE; ++i) CHECK(dst[i] == mx[i], "max %d", i);
  shmem_long_min_reduce(team, dst, src, NE);
  for (int i = 0; i < NE; ++i) CHECK(dst[i] == mn[i], "min %d", i);
  shmem_int64_xor_reduce(team, (int64_t*)dst, (int64_t*)src, NE);
  for (int i = 0; i < NE; ++i) CHECK(dst[i] == x_or[i], "xor %d", i);
  /* in place (dest == source) */
  shmem_long_sum_reduce(team, src, src, NE);
  for (int i = 0; i < NE; ++i) CHECK(src[i] == sum[i], "in-place sum %d", i);
  for (int i = 0; i < NE; ++i) dsrc[i] = (double)(rnd(tag + 5, tme, i) % 1000) / 7.0;
  shmem_double_prod_reduce(team, ddst, dsrc, NE);
  for (int i = 0; i < NE; ++i) {
    double p = 1.0;
    for (int k = 0; k < tn; ++k) p *= (double)(rnd(tag + 5, k, i) % 1000) / 7.0;
    CHECK(fabs(ddst[i] - p) <= 1e-12 * fabs(p), "prod %d %g vs %g", i, ddst[i], p);
  }
  /* identical on all members: broadcast member 0's result and compare bits */
  shmem_double_broadcast(team, bf->check, ddst, NE, 0);
  CHECK(memcmp(bf->check, ddst, NE * sizeof(double)) == 0, "reduction bit-identical across members");
}

/* Parts bigger than an inbox slot (1 KiB) on the world team, whose channel stages up to 64 KiB /
   job size a member: broadcast, fcollect and a sum of 5600-byte parts, an alltoall of 1 KiB blocks
   (8 KiB a member at 8 PEs), three rounds each so that both staging parities are reused. */
#define NW 700
#define NA 128
/* 56-bit values: a sum over up to 256 PEs stays inside a long (signed overflow is undefined). */
static long wv(int tag, int pe, int i) { return (long)(rnd(tag, pe, (uint64_t)i) >> 8); }
static void run_wide(int tag) {
  int n = shmem_n_pes(), me = shmem_my_pe();
  long *src = shmem_malloc(NW * sizeof(long)), *dst = shmem_malloc((size_t)NW * n * sizeof(long));
  long *asrc = shmem_malloc((size_t)NA * n * sizeof(long)), *adst = shmem_malloc((size_t)NA * n * sizeof(long));
  for (int round = 0; round < 3; ++round) {
    int t = tag + 10 * round, root = round % n;
    for (int i = 0; i < NW; ++i) src[i] = wv(t, me, i);
    for (int i = 0; i < NW; ++i) dst[i] = -1;
    CHECK(shmem_long_broadcast(SHMEM_TEAM_WORLD, dst, src, NW, root) == 0, "wide broadcast");
    for (int i = 0; i < NW; ++i) CHECK(dst[i] == wv(t, root, i), "wide broadcast %d", i);
    CHECK(shmem_long_fcollect(SHMEM_TEAM_WORLD, dst, src, NW) == 0, "wide fcollect");
    for (int k = 0; k < n; ++k)
      for (int i = 0; i < NW; ++i) CHECK(dst[k * NW + i] == wv(t, k, i), "wide fcollect %d %d", k, i);
    CHECK(shmem_long_sum_reduce(SHMEM_TEAM_WORLD, dst, src, NW) == 0, "wide sum");
    for (int i = 0; i < NW; ++i) {
      long s = 0;
      for (int k = 0; k < n; ++k) s += wv(t, k, i);
      CHECK(dst[i] == s, "wide sum %d", i);
    }
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < NA; ++i) asrc[j * NA + i] = (long)rnd(t + 1, me * 64 + j, i);
    CHECK(shmem_long_alltoall(SHMEM_TEAM_WORLD, adst, asrc, NA) == 0, "wide alltoall");
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < NA; ++i)
        CHECK(adst[j * NA + i] == (long)rnd(t + 1, j * 64 + me, i), "wide alltoall %d %d", j, i);
  }
  shmem_free(adst);
  shmem_free(asrc);
  shmem_free(dst);
  shmem_free(src);
}

/* Parts far bigger than any staging: broadcasts from every root back to back, with nothing
   between them but the check (a member's notice that its dest is free must not count in the
   previous broadcast), and a sum of 2.4 MB parts, which fetches unmapped members' parts in
   several windows, also in place. */
#define NB (300 * 1000)
static void run_big(int tag) {
  int n = shmem_n_pes(), me = shmem_my_pe();
  long *src = shmem_malloc(NB * sizeof(long)), *dst = shmem_malloc(NB * sizeof(long));
  for (int root = 0; root < n; ++root) {
    int t = tag + root;
    for (int i = 0; i < NB; ++i) src[i] = wv(t, me, i);
    CHECK(shmem_long_broadcast(SHMEM_TEAM_WORLD, dst, src, NB, root) == 0, "big broadcast");
    for (int i = 0; i < NB; ++i) CHECK(dst[i] == wv(t, root, i), "big broadcast from %d [%d]", root, i);
  }
  for (int i = 0; i < NB; ++i) src[i] = wv(tag, me, i);
  CHECK(shmem_long_sum_reduce(SHMEM_TEAM_WORLD, dst, src, NB) == 0, "big sum");
  for (int i = 0; i < NB; ++i) {
    long s = 0;
    for (int k = 0; k < n; ++k) s += wv(tag, k, i);
    CHECK(dst[i] == s, "big sum %d", i);
  }
  /* In place (dest == source): off shared memory the split reduction writes each member's
     slice of the result over its source while the others still read their own slices. */
  for (int i = 0; i < NB; ++i) src[i] = wv(tag + 1, me, i);
  CHECK(shmem_long_sum_reduce(SHMEM_TEAM_WORLD, src, src, NB) == 0, "big sum in place");
  for (int i = 0; i < NB; ++i) {
    long s = 0;
    for (int k = 0; k < n; ++k) s += wv(tag + 1, k, i);
    CHECK(src[i] == s, "big sum in place %d", i);
  }
  shmem_free(dst);
  shmem_free(src);
}

int main(int argc, char** argv) {
  seed_from_args(argc, argv);
  shmem_init();
  int me = shmem_my_pe(), n = shmem_n_pes();

  CHECK(shmem_team_n_pes(SHMEM_TEAM_WORLD) == n && shmem_team_my_pe(SHMEM_TEAM_WORLD) == me, "world");
  /* the shared team is this host's PEs: all of them unless `mori run --nnodes` spread the job */
  const char* local = getenv("MORI_LOCAL_WORLD_SIZE");
  int n_shared = local && getenv("MORI_NNODES") && atoi(getenv("MORI_NNODES")) > 1 ? atoi(local) : n;
  CHECK(shmem_team_n_pes(SHMEM_TEAM_SHARED) == n_shared && shmem_team_my_pe(SHMEM_TEAM_SHARED) >= 0, "shared team");
  CHECK(shmem_team_my_pe(SHMEM_TEAM_INVALID) == -1, "invalid team");
  shmem_team_config_t cfg = {.num_contexts = 2};
  struct bufs bf = {shmem_malloc(NE * n * sizeof(long)), shmem_calloc(NE * n * n, sizeof(long)),
                    shmem_malloc(NE * sizeof(double)), shmem_malloc(NE * sizeof(double)),
                    shmem_malloc(NE * sizeof(double))};
  run_team(SHMEM_TEAM_WORLD, 100, &bf);
  run_wide(150);
  run_big(170);

  /* odd stride: PEs n-1, n-3, ... (negative stride), and every 3rd PE */
  shmem_team_t rev = SHMEM_TEAM_INVALID, third = SHMEM_TEAM_INVALID;
  int rsize = (n + 1) / 2;
  CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, n - 1, -2, rsize, &cfg, SHMEM_TEAM_NUM_CONTEXTS, &rev) == 0,
        "split rev");
  CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, 0, 3, (n + 2) / 3, NULL, 0, &third) == 0, "split 3");
  int in_rev = ((n - 1 - me) % 2) == 0;
  CHECK((rev != SHMEM_TEAM_INVALID) == in_rev, "membership rev");
  CHECK((third != SHMEM_TEAM_INVALID) == (me % 3 == 0), "membership third");
  if (rev != SHMEM_TEAM_INVALID) {
    CHECK(shmem_team_my_pe(rev) == (n - 1 - me) / 2, "rev index");
    shmem_team_config_t got;
    CHECK(shmem_team_get_config(rev, SHMEM_TEAM_NUM_CONTEXTS, &got) == 0 && got.num_contexts == 2, "config");
  }
  if (rev != SHMEM_TEAM_INVALID) run_team(rev, 200, &bf);
  shmem_barrier_all();
  if (third != SHMEM_TEAM_INVALID) run_team(third, 300, &bf);
  shmem_barrier_all();

  /* 2d split of the world: rows of 2 */
  shmem_team_t xt, yt;
  CHECK(shmem_team_split_2d(SHMEM_TEAM_WORLD, 2, NULL, 0, &xt, NULL, 0, &yt) == 0, "split_2d");
  CHECK(shmem_team_my_pe(xt) == me % 2 && shmem_team_my_pe(yt) == me / 2, "2d indices");
  CHECK(shmem_team_n_pes(xt) == ((me / 2) * 2 + 2 <= n ? 2 : 1), "x size");
  CHECK(shmem_team_translate_pe(xt, 0, yt) == ((me % 2 == 0) ? me / 2 : -1), "translate x->y");
  run_team(xt, 400, &bf);
  run_team(yt, 500, &bf);
  shmem_barrier_all();

  /* a reduction over each subteam, with heap buffers allocated by all */
  long *a = shmem_malloc(4 * sizeof(long)), *b = shmem_malloc(4 * sizeof(long));
  for (int i = 0; i < 4; ++i) a[i] = me * 10 + i;
  if (rev != SHMEM_TEAM_INVALID) {
    shmem_long_sum_reduce(rev, b, a, 4);
    long s = 0;
    for (int p = n - 1; p >= 0; p -= 2) s += p * 10;
    for (int i = 0; i < 4; ++i) CHECK(b[i] == s + (long)i * rsize, "rev sum %d", i);
  }
  shmem_barrier_all();
  if (third != SHMEM_TEAM_INVALID) {
    shmem_long_max_reduce(third, b, a, 4);
    int last = ((n - 1) / 3) * 3;
    for (int i = 0; i < 4; ++i) CHECK(b[i] == last * 10 + i, "third max %d", i);
  }
  shmem_barrier_all();
  shmem_long_fcollect(yt, b, a, 1);
  for (int k = 0; k < shmem_team_n_pes(yt); ++k) CHECK(b[k] == (me % 2 + 2 * k) * 10, "y fcollect %d", k);
  shmem_barrier_all();

  /* destroy and re-create many times: slots are reused */
  for (int rep = 0; rep < 80; ++rep) {
    shmem_team_t t;
    CHECK(shmem_team_split_strided(SHMEM_TEAM_WORLD, rep % n, 1, 1, NULL, 0, &t) == 0, "rep split");
    CHECK((t != SHMEM_TEAM_INVALID) == (me == rep % n), "rep membership");
    if (t != SHMEM_TEAM_INVALID) shmem_team_destroy(t);
  }
  shmem_team_destroy(xt);
  shmem_team_destroy(yt);
  if (rev != SHMEM_TEAM_INVALID) shmem_team_destroy(rev);
  if (third != SHMEM_TEAM_INVALID) shmem_team_destroy(third);
  shmem_free(b);
  shmem_free(a);
  shmem_free(bf.check);
  shmem_free(bf.ddst);
  shmem_free(bf.dsrc);
  shmem_free(bf.dst);
  shmem_free(bf.src);
  shmem_finalize();
  if (me == 0) printf("coll: OK on %d PEs\n", n);
  return 0;
}
