// SPDX-License-Identifier: MIT
// The checksum stored with every value: XXH3-64 from xxHash. xxHash is used header-only
// (XXH_INLINE_ALL): libmori needs no libxxhash at run time. The value checksum is taken with
// AVX2 where the CPU has it (checksum_avx2.cc; the build's baseline is SSE2, which hashes at
// about half the speed): an SSD hit verifies every byte it read, so the hash is on the get's
// path. Every vector width gives the same 64 bits (xxHash guarantees it, and
// test_ssd_tier.py checks a known answer), so segments stay readable on any x86-64 machine.
#pragma once

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstddef>
#include <cstdint>

namespace mori::umbp {

uint64_t value_checksum(const void* data, size_t size);

// value_checksum of a value taken in pieces, in order: the same 64 bits as of the whole. An SSD
// read split into pieces hashes each one as it lands while the later ones are still in flight.
class ValueHasher {
 public:
  ValueHasher();
  void update(const void* data, size_t size);
  uint64_t digest() const;

 private:
  XXH3_state_t state_;
};

namespace detail {
// checksum_avx2.cc: compiled with -mavx2, called only where the CPU has AVX2.
uint64_t value_checksum_avx2(const void* data, size_t size);
void value_hasher_update_avx2(XXH3_state_t* state, const void* data, size_t size);
}  // namespace detail

}  // namespace mori::umbp
