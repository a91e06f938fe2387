/* SPDX-License-Identifier: MIT
 * shmemx.h: every extension routine has its HAVE_SHMEMX_* feature macro (tests/test_capi.py
 * checks that the header defines one per declared routine) and does what it says. */
#include <shmemx.h>

#include "check.h"

#if !defined(HAVE_SHMEMX_WTIME) || !defined(HAVE_SHMEMX_HEAP_SIZE) || !defined(HAVE_SHMEMX_HEAP_FREE) ||      \
    !defined(HAVE_SHMEMX_SIGNAL_ADD) || !defined(HAVE_SHMEMX_SIGNAL_SET) || !defined(HAVE_SHMEMX_TEAM_PTR) || \
    !defined(HAVE_SHMEMX_SYMMETRIC_DATA_SIZE)
#error "shmemx.h lacks a feature macro"
#endif

long g_word = 5;

int main(int argc, char** argv) {
  seed_from_args(argc, argv);
  shmem_init();
  int me = shmem_my_pe(), n = shmem_n_pes(), right = (me + 1) % n;
  double t0 = shmemx_wtime();
  size_t total = shmemx_heap_size(), before = shmemx_heap_free();
  CHECK(total > 0 && before <= total, "heap %zu free %zu", total, before);
  uint64_t* sig = shmem_calloc(2, sizeof(uint64_t));
  CHECK(shmemx_heap_free() < before, "free space did not shrink after an allocation");
  uint64_t a = rnd(1, me, 0) >> 4, b = rnd(2, me, 0);
  shmemx_signal_add(&sig[0], a, right);
  shmemx_signal_add(&sig[0], a, right);
  shmemx_signal_set(&sig[1], b, right);
  shmem_quiet();
  shmem_barrier_all();
  int left = (me + n - 1) % n;
  CHECK(sig[0] == 2 * (rnd(1, left, 0) >> 4), "signal_add %llu", (unsigned long long)sig[0]);
  CHECK(sig[1] == rnd(2, left, 0), "signal_set %llu", (unsigned long long)sig[1]);
  long* mine = shmemx_team_ptr(SHMEM_TEAM_WORLD, &g_word, me);
  CHECK(mine == &g_word, "team_ptr to self");
  CHECK(shmemx_symmetric_data_size() >= sizeof(g_word), "symmetric data %zu", shmemx_symmetric_data_size());
  CHECK(shmemx_wtime() >= t0, "wtime went backwards");
  shmem_free(sig);
  shmem_finalize();
  if (me == 0) printf("shmemx: OK on %d PEs\n", n);
  return 0;
}
