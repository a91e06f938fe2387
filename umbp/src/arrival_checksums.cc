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
  std::unique_lock<std::mutex> lock(c.mu);
  if (c.spoiled) return;
  auto next = std::lower_bound(c.ahead.begin(), c.ahead.end(), at, [](const Range& r, uint64_t a) { return r.at < a; });
  const bool overlaps = at < c.claimed || (next != c.ahead.end() && next->at < at + n) ||
                        (next != c.ahead.begin() && (next - 1)->at + (next - 1)->n > at);
  if (overlaps) {  // a byte told of twice
    c.spoiled = true;
    return;
  }
  if (at != c.claimed || c.hashed != c.claimed) {
    // Past the prefix, or the prefix's thread is hashing: noted, for whoever holds the prefix.
    c.ahead.insert(next, Range{at, n});
    return;
  }
  // This thread holds the prefix: it hashes its bytes, then the parts noted ahead that now
  // follow them (in memory already), each outside the lock.
  const char* base = p - at;
  if (at == 0) XXH3_64bits_reset(&c.state);
  for (uint64_t from = at, len = n;;) {
    c.claimed = from + len;
    lock.unlock();
    chunk_update(&c.state, base + from, static_cast<size_t>(len));
    lock.lock();
    c.hashed = c.claimed;
    if (c.spoiled || c.ahead.empty() || c.ahead.front().at != c.hashed) return;
    from = c.ahead.front().at;
    len = c.ahead.front().n;
    c.ahead.erase(c.ahead.begin());
  }
}

std::optional<uint64_t> ArrivalChecksums::checksum(size_t i) const {
  if (!observed_ || i >= values_.size()) return std::nullopt;
  const Value& v = values_[i];
  if (v.size == 0) return std::nullopt;
  const size_t count = checksum_chunks(v.size);
  std::vector<uint64_t> digests(count);
  for (size_t j = 0; j < count; ++j) {
    Chunk& c = chunks_[v.first + j];
    const uint64_t len = std::min<uint64_t>(kChecksumChunk, v.size - j * kChecksumChunk);
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.spoiled || c.hashed != len || !c.ahead.empty()) return std::nullopt;  // a byte twice, or some never
    digests[j] = XXH3_64bits_digest(&c.state);
  }
  return count == 1 ? digests[0] : combine_chunk_checksums(digests.data(), count, v.size);
}

}  // namespace mori::umbp
