/* SPDX-License-Identifier: MIT
 * Shared helpers of the C test programs: failing checks name the file, line and PE
 * and end the job with shmem_global_exit, so the launcher reports a non-zero status.
 */
#ifndef MORI_TEST_CHECK_H
#define MORI_TEST_CHECK_H

#include <shmem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                                                 \
  do {                                                                                                   \
    if (!(cond)) {                                                                                       \
      fprintf(stderr, "CHECK FAILED on PE %d at %s:%d: %s: ", shmem_my_pe(), __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                                                      \
      fprintf(stderr, "\n");                                                                             \
      fflush(stderr);                                                                                    \
      shmem_global_exit(3);                                                                              \
    }                                                                                                    \
  } while (0)

/* Deterministic per-run random numbers: the seed comes from the test (argv[1]) so every
 * PE can recompute what any other PE wrote. splitmix64. */
static uint64_t test_seed = 1;
static inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
/* The value PE `pe` stores at element `i` of buffer `tag`. */
static inline uint64_t rnd(int tag, int pe, uint64_t i) {
  return mix64(test_seed ^ mix64(((uint64_t)tag << 48) ^ ((uint64_t)pe << 32) ^ i));
}
static inline void seed_from_args(int argc, char** argv) {
  if (argc > 1) test_seed = strtoull(argv[1], NULL, 0);
}

#endif
