/* SPDX-License-Identifier: MIT
 * OpenSHMEM 1.2-1.4 names that older programs and suites use: start_pes, _my_pe,
 * shmalloc/shfree, active-set collectives with pSync/pWrk, *_to_all reductions,
 * broadcast32/64, (f)collect32/64, alltoall64, shmem_barrier, deprecated AMOs and waits. */
#include "check.h"

long pSync[_SHMEM_BCAST_SYNC_SIZE];
long pSync2[SHMEM_REDUCE_SYNC_SIZE];
long pWrk[SHMEM_REDUCE_MIN_WRKDATA_SIZE + 1024];
int isrc[16], idst[16 * 64];
long lsrc[8], ldst[8 * 64];
long ivar;

int main(int argc, char** argv) {
  seed_from_args(argc, argv);
  for (int i = 0; i < _SHMEM_BCAST_SYNC_SIZE; ++i) pSync[i] = _SHMEM_SYNC_VALUE;
  for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; ++i) pSync2[i] = SHMEM_SYNC_VALUE;
  start_pes(0);
  int me = _my_pe(), n = _num_pes();
  CHECK(me == shmem_my_pe() && n == shmem_n_pes(), "_my_pe/_num_pes");
  int major, minor;
  shmem_info_get_version(&major, &minor);
  CHECK(major == 1 && minor == 5, "version %d.%d", major, minor);
  char name[SHMEM_MAX_NAME_LEN];
  shmem_info_get_name(name);
  CHECK(name[0] != 0, "name");
  shmem_barrier_all();

  /* active set: even PEs (stride 2^1) */
  int start = 0, log = 1, size = (n + 1) / 2;
  int member = (me % 2) == 0;
  for (int i = 0; i < 16; ++i) isrc[i] = (int)rnd(1, me, i);
  if (member) {
    shmem_barrier(start, log, size, pSync);
    shmem_broadcast32(idst, isrc, 16, 0, start, log, size, pSync);
    if (me != 0)
      for (int i = 0; i < 16; ++i) CHECK(idst[i] == (int)rnd(1, 0, i), "broadcast32 %d", i);
    shmem_barrier(start, log, size, pSync);
    shmem_fcollect32(idst, isrc, 16, start, log, size, pSync);
    for (int k = 0; k < size; ++k)
      for (int i = 0; i < 16; ++i) CHECK(idst[k * 16 + i] == (int)rnd(1, 2 * k, i), "fcollect32 %d %d", k, i);
    shmem_barrier(start, log, size, pSync);
    shmem_collect32(idst, isrc, (size_t)(me / 2 + 1), start, log, size, pSync);
    int off = 0;
    for (int k = 0; k < size; ++k)
      for (int i = 0; i <= k; ++i, ++off) CHECK(idst[off] == (int)rnd(1, 2 * k, i), "collect32 %d %d", k, i);
    /* reductions with pWrk/pSync */
    for (int i = 0; i < 8; ++i) lsrc[i] = (long)(rnd(2, me, i) % 1000);
    shmem_barrier(start, log, size, pSync);
    shmem_long_sum_to_all(ldst, lsrc, 8, start, log, size, pWrk, pSync2);
    for (int i = 0; i < 8; ++i) {
      long s = 0;
      for (int k = 0; k < size; ++k) s += (long)(rnd(2, 2 * k, i) % 1000);
      CHECK(ldst[i] == s, "sum_to_all %d", i);
    }
    shmem_barrier(start, log, size, pSync);
    shmem_long_max_to_all(ldst, lsrc, 8, start, log, size, pWrk, pSync2);
    for (int i = 0; i < 8; ++i) {
      long m = 0;
      for (int k = 0; k < size; ++k) m = m > (long)(rnd(2, 2 * k, i) % 1000) ? m : (long)(rnd(2, 2 * k, i) % 1000);
      CHECK(ldst[i] == m, "max_to_all %d", i);
    }
  }
  shmem_barrier_all();
  /* pSync is back to SHMEM_SYNC_VALUE after the calls */
  for (int i = 0; i < _SHMEM_BCAST_SYNC_SIZE; ++i) CHECK(pSync[i] == _SHMEM_SYNC_VALUE, "pSync[%d]=%ld", i, pSync[i]);
  for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; ++i) CHECK(pSync2[i] == SHMEM_SYNC_VALUE, "pSync2[%d]", i);

  /* whole world: int and/or/xor/prod to_all, alltoall64, broadcast64 */
  int iv[4] = {me + 1, 1 << me, me, 2};
  int* ires = shmalloc(4 * sizeof(int));
  int* iin = shmalloc(4 * sizeof(int));
  for (int i = 0; i < 4; ++i) iin[i] = iv[i];
  shmem_int_prod_to_all(ires, iin, 4, 0, 0, n, (int*)pWrk, pSync2);
  long fact = 1;
  for (int k = 1; k <= n; ++k) fact *= k;
  CHECK(ires[0] == (int)fact && ires[3] == 1 << n, "prod_to_all");
  shmem_barrier_all();
  shmem_int_or_to_all(ires, iin + 1, 1, 0, 0, n, (int*)pWrk, pSync2);
  CHECK(ires[0] == (1 << n) - 1, "or_to_all %x", ires[0]);
  shmem_barrier_all();
  for (int j = 0; j < n; ++j) lsrc[j % 8] = 0;
  long *a2a_src = shmalloc(n * sizeof(long)), *a2a_dst = shmalloc(n * sizeof(long));
  for (int j = 0; j < n; ++j) a2a_src[j] = me * 100 + j;
  shmem_alltoall64(a2a_dst, a2a_src, 1, 0, 0, n, pSync);
  for (int j = 0; j < n; ++j) CHECK(a2a_dst[j] == j * 100 + me, "alltoall64 %d", j);
  /* 1 KiB blocks: past an inbox slot, staged in the active sets' wide staging (8 KiB a member at 8 PEs) */
  shmem_barrier_all();
  long *wide_src = shmalloc((size_t)n * 128 * sizeof(long)), *wide_dst = shmalloc((size_t)n * 128 * sizeof(long));
  for (int round = 0; round < 3; ++round) {
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < 128; ++i) wide_src[j * 128 + i] = (long)rnd(40 + round, me * 64 + j, i);
    shmem_barrier_all();
    shmem_alltoall64(wide_dst, wide_src, 128, 0, 0, n, pSync);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < 128; ++i)
        CHECK(wide_dst[j * 128 + i] == (long)rnd(40 + round, j * 64 + me, i), "wide alltoall64 %d %d", j, i);
  }
  shmem_barrier_all();
  shfree(wide_dst);
  shfree(wide_src);
  shmem_barrier_all();
  shmem_broadcast64(a2a_dst, a2a_src, n, n - 1, 0, 0, n, pSync);
  if (me != n - 1)
    for (int j = 0; j < n; ++j) CHECK(a2a_dst[j] == (n - 1) * 100 + j, "broadcast64 %d", j);

  /* Parts past every inbox and staging limit (4.7 KiB), on the world and on the even PEs: the
   * paths that read peers' memory (pulls, split reductions off shared memory). pSync and
   * pSync2 must be back to SHMEM_SYNC_VALUE afterwards. */
  enum { BIG = 600 };
  long *bsrc = shmalloc((size_t)n * BIG * sizeof(long)), *bdst = shmalloc((size_t)n * BIG * sizeof(long));
  for (int set = 0; set < 2; ++set) {
    int blog = set, bsize = set ? (n + 1) / 2 : n, bme = set ? me / 2 : me;
    shmem_barrier_all();
    if (set && me % 2) continue;
    for (int round = 0; round < 2; ++round) {
      int tag = 50 + set * 10 + round * 4, root = (round * 7 + 1) % bsize;
      for (int i = 0; i < bsize * BIG; ++i) bsrc[i] = (long)rnd(tag, me, i), bdst[i] = -7;
      shmem_barrier(0, blog, bsize, pSync);
      shmem_broadcast64(bdst, bsrc, BIG, root, 0, blog, bsize, pSync);
      if (bme != root)
        for (int i = 0; i < BIG; ++i) CHECK(bdst[i] == (long)rnd(tag, root << blog, i), "big broadcast64 %d", i);
      shmem_barrier(0, blog, bsize, pSync);
      shmem_fcollect64(bdst, bsrc, BIG, 0, blog, bsize, pSync);
      for (int k = 0; k < bsize; ++k)
        for (int i = 0; i < BIG; ++i)
          CHECK(bdst[k * BIG + i] == (long)rnd(tag, k << blog, i), "big fcollect64 %d %d", k, i);
      shmem_barrier(0, blog, bsize, pSync);
      shmem_alltoall64(bdst, bsrc, BIG / 4, 0, blog, bsize, pSync);
      for (int k = 0; k < bsize; ++k)
        for (int i = 0; i < BIG / 4; ++i)
          CHECK(bdst[k * (BIG / 4) + i] == (long)rnd(tag, k << blog, bme * (BIG / 4) + i), "big alltoall64 %d %d", k,
                i);
      for (int i = 0; i < BIG; ++i) bsrc[i] = (long)(rnd(tag + 1, me, i) % 100000);
      shmem_long_sum_to_all(bdst, bsrc, BIG, 0, blog, bsize, pWrk, pSync2);
      for (int i = 0; i < BIG; ++i) {
        long s = 0;
        for (int k = 0; k < bsize; ++k) s += (long)(rnd(tag + 1, k << blog, i) % 100000);
        CHECK(bdst[i] == s, "big sum_to_all %d", i);
      }
      shmem_barrier(0, blog, bsize, pSync);
      shmem_long_max_to_all(bsrc, bsrc, BIG, 0, blog, bsize, pWrk, pSync2); /* in place */
      for (int i = 0; i < BIG; ++i) {
        long m = 0;
        for (int k = 0; k < bsize; ++k)
          m = m > (long)(rnd(tag + 1, k << blog, i) % 100000) ? m : (long)(rnd(tag + 1, k << blog, i) % 100000);
        CHECK(bsrc[i] == m, "big in-place max_to_all %d", i);
      }
    }
    shmem_barrier(0, blog, bsize, pSync);
    for (int i = 0; i < _SHMEM_BCAST_SYNC_SIZE; ++i)
      CHECK(pSync[i] == _SHMEM_SYNC_VALUE, "pSync[%d]=%ld after big", i, pSync[i]);
    for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; ++i)
      CHECK(pSync2[i] == SHMEM_SYNC_VALUE, "pSync2[%d]=%ld after big", i, pSync2[i]);
  }
  shmem_barrier_all();
  shfree(bdst);
  shfree(bsrc);

  /* deprecated AMOs and waits */
  shmem_barrier_all();
  long* cnt = shmalloc(sizeof(long));
  *cnt = 0;
  shmem_barrier_all();
  shmem_long_inc(cnt, 0);
  shmem_barrier_all();
  if (me == 0) CHECK(*cnt == n, "long_inc %ld", *cnt);
  if (me == 0) shmem_long_p(&ivar, 5, n - 1);
  if (me == n - 1) {
    shmem_long_wait(&ivar, 0);
    shmem_wait_until(&ivar, SHMEM_CMP_EQ, 5);
    CHECK(ivar == 5, "wait");
  }
  shmem_barrier_all();
  long* big = shrealloc(cnt, 1 << 16);
  CHECK(big != NULL, "shrealloc");
  void* al = shmemalign(4096, 100);
  CHECK(al != NULL && ((uintptr_t)al % 4096) == 0, "shmemalign");
  shfree(al);
  shfree(big);
  shfree(a2a_dst);
  shfree(a2a_src);
  shfree(iin);
  shfree(ires);
  shmem_finalize();
  if (me == 0) printf("legacy: OK on %d PEs\n", n);
  return 0;
}
