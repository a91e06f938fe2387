// SPDX-License-Identifier: MIT
#include "src/checksum.h"

namespace mori::umbp {
namespace {
#if defined(__x86_64__) && defined(__GNUC__)
// Probed before main (or at dlopen), as core's copy.cc does; __builtin_cpu_supports also checks
// that the OS saves the AVX registers.
const bool g_avx2 = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0;
}();
#else
constexpr bool g_avx2 = false;  // not x86-64: xxHash picks the vector code the build targets
#endif
}  // namespace

uint64_t value_checksum(const void* data, size_t size) {
  return g_avx2 ? detail::value_checksum_avx2(data, size) : XXH3_64bits(data, size);
}

ValueHasher::ValueHasher() { XXH3_64bits_reset(&state_); }

void ValueHasher::update(const void* data, size_t size) {
  if (g_avx2)
    detail::value_hasher_update_avx2(&state_, data, size);
  else
    XXH3_64bits_update(&state_, data, size);
}

uint64_t ValueHasher::digest() const { return XXH3_64bits_digest(&state_); }

}  // namespace mori::umbp
