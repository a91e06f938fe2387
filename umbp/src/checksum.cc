// SPDX-License-Identifier: MIT
#include "src/checksum.h"

#include <algorithm>

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

void put_le64(unsigned char* p, uint64_t v) {
  for (int b = 0; b < 8; ++b) p[b] = static_cast<unsigned char>(v >> (8 * b));
}

}  // namespace

uint64_t chunk_checksum(const void* data, size_t size) {
  return g_avx2 ? detail::xxh3_avx2(data, size) : XXH3_64bits(data, size);
}

void chunk_update(XXH3_state_t* state, const void* data, size_t size) {
  if (g_avx2)
    detail::xxh3_update_avx2(state, data, size);
  else
    XXH3_64bits_update(state, data, size);
}

uint64_t combine_chunk_checksums(const uint64_t* digests, size_t count, uint64_t value_size) {
  std::vector<unsigned char> words((count + 1) * 8);
  for (size_t j = 0; j < count; ++j) put_le64(words.data() + 8 * j, digests[j]);
  put_le64(words.data() + 8 * count, value_size);
  return chunk_checksum(words.data(), words.size());
}

uint64_t value_checksum(const void* data, size_t size) {
  if (size <= kChecksumChunk) return chunk_checksum(data, size);
  const char* p = static_cast<const char*>(data);
  std::vector<uint64_t> digests(checksum_chunks(size));
  for (size_t j = 0; j < digests.size(); ++j) {
    const size_t off = j * kChecksumChunk;
    digests[j] = chunk_checksum(p + off, std::min(kChecksumChunk, size - off));
  }
  return combine_chunk_checksums(digests.data(), digests.size(), size);
}

ValueHasher::ValueHasher() { XXH3_64bits_reset(&state_); }

void ValueHasher::update(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const size_t take = std::min(size, kChecksumChunk - in_chunk_);
    chunk_update(&state_, p, take);
    p += take;
    size -= take;
    in_chunk_ += take;
    total_ += take;
    if (in_chunk_ == kChecksumChunk) {
      digests_.push_back(XXH3_64bits_digest(&state_));
      XXH3_64bits_reset(&state_);
      in_chunk_ = 0;
    }
  }
}

uint64_t ValueHasher::digest() const {
  if (total_ <= kChecksumChunk)  // one chunk: the value's XXH3 (a whole chunk was pushed already)
    return digests_.empty() ? XXH3_64bits_digest(&state_) : digests_.front();
  std::vector<uint64_t> all = digests_;
  if (in_chunk_ > 0) all.push_back(XXH3_64bits_digest(&state_));
  return combine_chunk_checksums(all.data(), all.size(), total_);
}

}  // namespace mori::umbp
