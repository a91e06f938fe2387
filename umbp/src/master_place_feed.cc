// SPDX-License-Identifier: MIT
#include "src/master_place_feed.h"

#include <algorithm>
#include <random>

#include "mori/core/status.h"

namespace mori::umbp {

PlaceFeed::PlaceFeed(int32_t dram_tier, size_t capacity) : dram_(dram_tier) {
  MORI_CHECK_ARG(capacity >= 1, "PlaceFeed: capacity must be >= 1, got %zu", capacity);
  ring_.resize(capacity);
  std::random_device rd;
  // Never 0: a request's 0 means "no feed yet". A new id per process: a worker that reaches
  // another master process starts over.
  feed_id_ = (((uint64_t{rd()} << 32) | rd()) >> 1) | 1;
}

size_t PlaceFeed::record(const std::string& node_id, const std::vector<std::string>& keys,
                         const std::vector<bool>& added, const std::vector<int32_t>& tiers,
                         const std::vector<uint64_t>& offsets, const std::vector<uint64_t>& sizes,
                         const std::vector<uint64_t>& checksums) {
  const size_t n = keys.size();
  MORI_CHECK_ARG(
      added.size() == n && tiers.size() == n && offsets.size() == n && sizes.size() == n && checksums.size() == n,
      "PlaceFeed.record: columns of %zu keys, %zu added, %zu tiers, %zu offsets, %zu sizes, %zu checksums", n,
      added.size(), tiers.size(), offsets.size(), sizes.size(), checksums.size());
  std::vector<FedPlace> fed;
  for (size_t i = 0; i < n; ++i) {
    if (tiers[i] != dram_ || (added[i] && checksums[i] == 0)) continue;
    if (added[i])
      fed.push_back(FedPlace{node_id, keys[i], true, offsets[i], sizes[i], checksums[i]});
    else
      fed.push_back(FedPlace{node_id, keys[i], false, 0, 0, 0});
  }
  if (fed.empty()) return 0;
  std::lock_guard<std::mutex> lk(mu_);
  const size_t cap = ring_.size();
  for (auto& place : fed) ring_[next_++ % cap] = std::move(place);
  return fed.size();
}

FeedSlice PlaceFeed::since(uint64_t feed_id, uint64_t seq, uint32_t max_entries) const {
  const uint64_t limit = max_entries == 0 ? kMaxEntriesPerReply : std::min(max_entries, kMaxEntriesPerReply);
  FeedSlice out;
  out.feed_id = feed_id_;
  std::lock_guard<std::mutex> lk(mu_);
  const uint64_t cap = ring_.size();
  const uint64_t oldest = next_ > cap ? next_ - cap : 1;
  const bool fresh = feed_id != feed_id_ || seq == 0;
  out.gap = !fresh && seq < oldest;
  const uint64_t start = fresh || out.gap ? oldest : std::min(seq, next_);
  const uint64_t stop = std::min(next_, start + limit);
  out.entries.reserve(stop - start);
  for (uint64_t s = start; s < stop; ++s) out.entries.push_back(ring_[s % cap]);
  out.next_seq = stop;
  out.more = stop < next_;
  return out;
}

}  // namespace mori::umbp
