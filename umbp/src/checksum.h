// SPDX-License-Identifier: MIT
// The checksum stored with every value (XXH3-64 from xxHash: ~20 GB/s on one core, so
// verifying an SSD read costs a small fraction of the read). xxHash is used header-only
// (XXH_INLINE_ALL): the hash inlines into the tiers and libmori needs no libxxhash at run time.
#pragma once

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstddef>
#include <cstdint>

namespace mori::umbp {

inline uint64_t value_checksum(const void* data, size_t size) { return XXH3_64bits(data, size); }

}  // namespace mori::umbp
