// SPDX-License-Identifier: MIT
// XXH3 with AVX2 (this file alone is compiled with -mavx2; see umbp/CMakeLists.txt). It includes
// nothing but xxHash and the integer types, so no inline function of a shared header is emitted
// here with AVX2 instructions for the rest of the library to pick up.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__)
static_assert(XXH_VECTOR == XXH_AVX2, "checksum_avx2.cc must be compiled with -mavx2");
#endif

namespace mori::umbp::detail {

// Elsewhere than x86-64 these are never called (checksum.cc): the build's own vector code.
uint64_t xxh3_avx2(const void* data, size_t size) { return XXH3_64bits(data, size); }

void xxh3_update_avx2(XXH3_state_t* state, const void* data, size_t size) { XXH3_64bits_update(state, data, size); }

}  // namespace mori::umbp::detail
