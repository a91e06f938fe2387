/* SPDX-License-Identifier: MIT
 * Built with -fsanitize=address: shmem_init makes data+bss symmetric (copying the redzones
 * AddressSanitizer keeps between globals) and RMA on globals works. `asan overflow SEED`
 * then reads one element past a global array: ASan must still catch that (its shadow of
 * the globals survives the remap). */
#include <string.h>

#include "check.h"

#define N 37
long g_left[N];
int g_small[3] = {1, 2, 3};
char g_text[13] = "symmetric";

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (argc > 2) test_seed = strtoull(argv[2], NULL, 0);
  g_small[1] = 42; /* written before init: must survive the remap */
  shmem_init();
  int me = shmem_my_pe(), n = shmem_n_pes(), right = (me + 1) % n, left = (me + n - 1) % n;
  CHECK(g_small[1] == 42 && !strcmp(g_text, "symmetric"), "globals changed by shmem_init");
  long mine[N];
  for (int i = 0; i < N; ++i) mine[i] = (long)(rnd(1, me, i) >> 1);
  shmem_long_put(g_left, mine, N, right);
  shmem_barrier_all();
  for (int i = 0; i < N; ++i) CHECK(g_left[i] == (long)(rnd(1, left, i) >> 1), "g_left[%d]", i);
  long* heap = shmem_malloc(N * sizeof(long));
  shmem_long_get(heap, g_left, N, left);
  int left2 = (left + n - 1) % n;
  for (int i = 0; i < N; ++i) CHECK(heap[i] == (long)(rnd(1, left2, i) >> 1), "get of g_left[%d]", i);
  shmem_barrier_all();
  if (!strcmp(mode, "overflow")) {
    volatile int* p = g_small;
    int k = 3 + (int)(argc > 3); /* one past the end, not foldable by the compiler */
    printf("read past the end: %d\n", p[k]);
  }
  shmem_free(heap);
  shmem_finalize();
  if (me == 0) printf("asan: OK on %d PEs\n", n);
  return 0;
}
