// SPDX-License-Identifier: MIT
// The checksum stored with every value, built on XXH3-64 from xxHash:
//
//   a value of at most kChecksumChunk bytes:  XXH3-64(value)
//   a larger one:                             XXH3-64(d_0 .. d_n-1, size), d_j = XXH3-64(chunk j)
//
// (chunks of kChecksumChunk bytes, the last one shorter; the digests and the value's size as
// 64-bit little-endian words). The chunks of a large value are hashed side by side
// (PeerPages::verify, the DRAM tier's put): one core hashes 2 MiB at 18-30 GB/s, memory-bound, a
// fifth of a 2 MiB read from another host on a 16-core host.
//
// xxHash is used header-only (XXH_INLINE_ALL): libmori needs no libxxhash at run time. XXH3 is
// taken with AVX2 where the CPU has it (checksum_avx2.cc; the build's baseline is SSE2, about half
// the speed). Every vector width gives the same 64 bits (xxHash guarantees it, and
// test_ssd_tier.py checks known answers), so segments stay readable on any x86-64 machine.
#pragma once

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mori::umbp {

inline constexpr size_t kChecksumChunk = size_t{256} << 10;

uint64_t value_checksum(const void* data, size_t size);

// XXH3-64 of one chunk (or of a whole value of at most kChecksumChunk bytes).
uint64_t chunk_checksum(const void* data, size_t size);
// XXH3_64bits_update with the vector code chunk_checksum uses: a chunk hashed in pieces.
void chunk_update(XXH3_state_t* state, const void* data, size_t size);
// A value's checksum from its chunks' digests, in order (value_size > kChecksumChunk).
uint64_t combine_chunk_checksums(const uint64_t* digests, size_t count, uint64_t value_size);
// How many chunks value_checksum hashes a value of `size` bytes in (1 up to kChecksumChunk).
inline size_t checksum_chunks(size_t size) {
  return size <= kChecksumChunk ? 1 : (size + kChecksumChunk - 1) / kChecksumChunk;
}

// value_checksum of a value taken in pieces, in order and of any sizes: the same 64 bits as of
// the whole. An SSD read split into pieces hashes each one as it lands while the later ones are
// still in flight; a DRAM put hashes each piece right after copying it.
class ValueHasher {
 public:
  ValueHasher();
  void update(const void* data, size_t size);
  uint64_t digest() const;

 private:
  XXH3_state_t state_;  // of the current chunk
  size_t in_chunk_ = 0;
  uint64_t total_ = 0;
  std::vector<uint64_t> digests_;  // of the chunks completed
};

namespace detail {
// checksum_avx2.cc: compiled with -mavx2, called only where the CPU has AVX2.
uint64_t xxh3_avx2(const void* data, size_t size);
void xxh3_update_avx2(XXH3_state_t* state, const void* data, size_t size);
}  // namespace detail

}  // namespace mori::umbp
