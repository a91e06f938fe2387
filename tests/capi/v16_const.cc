// SPDX-License-Identifier: MIT
// OpenSHMEM 1.6 from C++ (issue 29 item 18): the six _vector wait/test routines take their
// cmp_values as `const T*` (a C++ caller passes a const array: it must compile), and
// shmem_team_get_config(team, 0, NULL) returns 0 and touches nothing.
#include <shmem.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CHECK(cond, what)                                                                                        \
  do {                                                                                                           \
    if (!(cond)) {                                                                                               \
      std::fprintf(stderr, "CHECK FAILED on PE %d at line %d: %s (%s)\n", shmem_my_pe(), __LINE__, #cond, what); \
      shmem_global_exit(3);                                                                                      \
    }                                                                                                            \
  } while (0)

constexpr int kN = 6;

int main(int argc, char** argv) {
  const uint64_t seed = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : 1;
  shmem_init();
  const int me = shmem_my_pe(), n = shmem_n_pes(), right = (me + 1) % n, left = (me + n - 1) % n;

  CHECK(shmem_team_get_config(SHMEM_TEAM_WORLD, 0, nullptr) == 0, "mask 0, config NULL");
  shmem_team_config_t cfg;
  cfg.num_contexts = 77;
  CHECK(shmem_team_get_config(SHMEM_TEAM_WORLD, 0, &cfg) == 0 && cfg.num_contexts == 77, "mask 0 wrote config");
  CHECK(shmem_team_get_config(SHMEM_TEAM_INVALID, 0, nullptr) != 0, "invalid team");
  CHECK(shmem_team_get_config(SHMEM_TEAM_WORLD, SHMEM_TEAM_NUM_CONTEXTS, nullptr) != 0, "mask set, config NULL");

  long* lv = static_cast<long*>(shmem_calloc(kN, sizeof(long)));
  int* iv = static_cast<int*>(shmem_calloc(kN, sizeof(int)));
  // What the left neighbour writes into mine: values drawn from the seed and its PE number.
  long want_l[kN];
  int want_i[kN];
  for (int i = 0; i < kN; ++i) {
    want_l[i] = static_cast<long>((seed * 2654435761u + static_cast<uint64_t>(left) * 97 + i * 31) % 1000003) + 1;
    want_i[i] = static_cast<int>(want_l[i] % 30011) + 1;
  }
  long mine_l[kN];
  int mine_i[kN];
  for (int i = 0; i < kN; ++i) {
    mine_l[i] = static_cast<long>((seed * 2654435761u + static_cast<uint64_t>(me) * 97 + i * 31) % 1000003) + 1;
    mine_i[i] = static_cast<int>(mine_l[i] % 30011) + 1;
  }
  shmem_barrier_all();
  shmem_long_put(lv, mine_l, kN, right);
  shmem_int_put(iv, mine_i, kN, right);
  shmem_quiet();

  const long cmp_l[kN] = {want_l[0], want_l[1], want_l[2], want_l[3], want_l[4], want_l[5]};
  const int cmp_i[kN] = {want_i[0], want_i[1], want_i[2], want_i[3], want_i[4], want_i[5]};
  const int* all = nullptr;
  size_t idx[kN];
  shmem_long_wait_until_all_vector(lv, kN, all, SHMEM_CMP_EQ, cmp_l);
  shmem_int_wait_until_all_vector(iv, kN, all, SHMEM_CMP_EQ, cmp_i);
  CHECK(shmem_long_test_all_vector(lv, kN, all, SHMEM_CMP_EQ, cmp_l) == 1, "long test_all");
  CHECK(shmem_int_test_all_vector(iv, kN, all, SHMEM_CMP_EQ, cmp_i) == 1, "int test_all");
  const size_t any = shmem_long_wait_until_any_vector(lv, kN, all, SHMEM_CMP_EQ, cmp_l);
  CHECK(any < kN && lv[any] == want_l[any], "long wait_until_any");
  CHECK(shmem_int_test_any_vector(iv, kN, all, SHMEM_CMP_EQ, cmp_i) < kN, "int test_any");
  CHECK(shmem_long_wait_until_some_vector(lv, kN, idx, all, SHMEM_CMP_EQ, cmp_l) == kN, "long wait_until_some");
  CHECK(shmem_int_test_some_vector(iv, kN, idx, all, SHMEM_CMP_EQ, cmp_i) == kN, "int test_some");
  // A comparison that holds nowhere: test_* say so (no element, no index).
  const long never[kN] = {-1, -2, -3, -4, -5, -6};
  CHECK(shmem_long_test_all_vector(lv, kN, all, SHMEM_CMP_EQ, never) == 0, "test_all on unequal values");
  CHECK(shmem_long_test_any_vector(lv, kN, all, SHMEM_CMP_EQ, never) == SIZE_MAX, "test_any on unequal values");
  CHECK(shmem_long_test_some_vector(lv, kN, idx, all, SHMEM_CMP_EQ, never) == 0, "test_some on unequal values");
  shmem_barrier_all();
  shmem_free(iv);
  shmem_free(lv);
  if (me == 0) std::printf("v16_const: OK on %d PEs\n", n);
  shmem_finalize();
  return 0;
}
