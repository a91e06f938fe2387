// SPDX-License-Identifier: MIT
#include "src/arrival_checksums.h"

#include <algorithm>

namespace mori::umbp {

ArrivalChecksums::ArrivalChecksums(const std::vector<uintptr_t>& ptrs, const std::vector<uint64_t>& sizes) {
  size_t chunks = 0;
  values_.reserve(ptrs.size());
  for (size_t i = 0; i < ptrs.size(); ++i) {
    values_.push_back({ptrs[i], sizes[i], chunks});
    chunks += checksum_chunks(sizes[i]);
  }
  by_addr_.resize(values_.size());
  for (size_t i = 0; i < by_addr_.size(); ++i) by_addr_[i] = static_cast<uint32_t>(i);
  std::sort(by_addr_.begin(), by_addr_.end(), [&](uint32_t a, uint32_t b) { return values_[a].ptr < values_[b].ptr; });
  for (size_t j = 1; j < by_addr_.size(); ++j) {
    const Value& a = values_[by_addr_[j - 1]];
    if (a.ptr + a.size > values_[by_addr_[j]].ptr) observed_ = false;  // two values share bytes
  }
  if (observed_) chunks_.reset(new Chunk[chunks]);
}

void ArrivalChecksums::landed(const char* p, size_t n) {
  if (!observed_) return;
  // A span may run over several values (a backend that merged adjacent ones) and through bytes
  // of none: each value's part goes to its chunks, the rest is not ours.
  auto at = reinterpret_cast<uintptr_t>(p);
  const uintptr_t end = at + n;
  auto it = std::upper_bound(by_addr_.begin(), by_addr_.end(), at,
                             [&](uintptr_t a, uint32_t v) { return a < values_[v].ptr; });
  if (it != by_addr_.begin()) --it;
  for (; it != by_addr_.end() && at < end; ++it) {
    const Value& v = values_[*it];
    if (v.ptr >= end) break;
    if (v.ptr + v.size <= at) continue;
    at = std::max(at, v.ptr);
    const uintptr_t stop = std::min(end, v.ptr + v.size);
    while (at < stop) {
      const uint64_t off = at - v.ptr, within = off % kChecksumChunk;
      const size_t take = static_cast<size_t>(std::min<uint64_t>(stop - at, kChecksumChunk - within));
      feed(chunks_[v.first + off / kChecksumChunk], within, reinterpret_cast<const char*>(at), take);
      at += take;
    }
  }
}

void ArrivalChecksums::feed(Chunk& c, uint64_t at, const char* p, size_t n) {
  if (c.busy.exchange(true, std::memory_order_acquire)) {
    // Another thread hashes this chunk now: the backend cut it between lanes. Neither part
    // can be trusted to come in order.
    c.spoiled.store(true, std::memory_order_relaxed);
    return;
  }
  if (!c.spoiled.load(std::memory_order_relaxed)) {
    if (at != c.fed) {
      c.spoiled.store(true, std::memory_order_relaxed);
    } else {
      if (at == 0) XXH3_64bits_reset(&c.state);
      chunk_update(&c.state, p, n);
      c.fed += n;
    }
  }
  c.busy.store(false, std::memory_order_release);
}

std::optional<uint64_t> ArrivalChecksums::checksum(size_t i) const {
  if (!observed_ || i >= values_.size()) return std::nullopt;
  const Value& v = values_[i];
  if (v.size == 0) return std::nullopt;
  const size_t count = checksum_chunks(v.size);
  std::vector<uint64_t> digests(count);
  for (size_t j = 0; j < count; ++j) {
    const Chunk& c = chunks_[v.first + j];
    const uint64_t len = std::min<uint64_t>(kChecksumChunk, v.size - j * kChecksumChunk);
    (void)c.busy.load(std::memory_order_acquire);  // pairs with the last feeder's release
    if (c.spoiled.load(std::memory_order_relaxed) || c.fed != len) return std::nullopt;
    digests[j] = XXH3_64bits_digest(&c.state);
  }
  return count == 1 ? digests[0] : combine_chunk_checksums(digests.data(), count, v.size);
}

}  // namespace mori::umbp
