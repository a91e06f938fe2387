/* SPDX-License-Identifier: MIT
 * Allocations whose size wraps near SIZE_MAX (issue 13, item 1): every one returns NULL on
 * every PE, the job goes on, a live block keeps its contents and later blocks do not overlap it.
 * `heap_limits <seed>`. */
#include <string.h>

#include "../capi/check.h"

#define LIVE 4096

int main(int argc, char** argv) {
  seed_from_args(argc, argv);
  shmem_init();
  int me = shmem_my_pe(), n = shmem_n_pes();
  uint64_t* live = shmem_malloc(LIVE * sizeof(uint64_t));
  CHECK(live != NULL, "a small allocation");
  for (uint64_t i = 0; i < LIVE; ++i) live[i] = rnd(1, me, i);

  CHECK(shmem_malloc(SIZE_MAX) == NULL, "shmem_malloc(SIZE_MAX)");
  CHECK(shmem_malloc(SIZE_MAX - 100) == NULL, "shmem_malloc(SIZE_MAX - 100)");
  CHECK(shmem_malloc_with_hints(SIZE_MAX - 63, 0) == NULL, "shmem_malloc_with_hints(SIZE_MAX - 63)");
  CHECK(shmem_calloc(SIZE_MAX / 2, 4) == NULL, "shmem_calloc whose count * size overflows");
  CHECK(shmem_calloc(3, SIZE_MAX / 2) == NULL, "shmem_calloc whose count * size overflows");
  CHECK(shmem_calloc(1, SIZE_MAX - 1) == NULL, "shmem_calloc(1, SIZE_MAX - 1)");
  CHECK(shmem_align(64, SIZE_MAX - 10) == NULL, "shmem_align(64, SIZE_MAX - 10)");
  CHECK(shmem_align(4096, SIZE_MAX) == NULL, "shmem_align(4096, SIZE_MAX)");
  CHECK(shmem_realloc(live, SIZE_MAX) == NULL, "shmem_realloc(p, SIZE_MAX)");
  CHECK(shmem_realloc(live, SIZE_MAX - 64) == NULL, "shmem_realloc(p, SIZE_MAX - 64)");

  /* The failed realloc left the block whole, and new blocks land beside it, not over it. */
  uint64_t* next = shmem_malloc(LIVE * sizeof(uint64_t));
  CHECK(next != NULL, "an allocation after the failures");
  CHECK(next + LIVE <= live || next >= live + LIVE, "new block %p overlaps the live block %p", (void*)next,
        (void*)live);
  for (uint64_t i = 0; i < LIVE; ++i) next[i] = ~rnd(1, me, i);
  for (uint64_t i = 0; i < LIVE; ++i)
    CHECK(live[i] == rnd(1, me, i), "live block changed at element %llu", (unsigned long long)i);
  /* And the heap is still symmetric: a put into the right neighbour's block lands there
   * (after the barrier: the neighbour has finished writing its own copy). */
  shmem_barrier_all();
  shmem_uint64_put(next, live, LIVE, (me + 1) % n);
  shmem_barrier_all();
  for (uint64_t i = 0; i < LIVE; ++i)
    CHECK(next[i] == rnd(1, (me + n - 1) % n, i), "put after the failures, element %llu", (unsigned long long)i);
  shmem_free(next);
  shmem_free(live);
  if (me == 0) printf("heap_limits: OK on %d PEs\n", n);
  shmem_finalize();
  return 0;
}
