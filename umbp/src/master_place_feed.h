// SPDX-License-Identifier: MIT
// The master's place feed: a bounded log of where owners' DRAM values lie and which left
// (umbp/distributed/master_place_feed.py says what it is for). One log per master process, in
// libmori: the heartbeat handler (Python) appends an owner's events, and workers' PlaceFeed polls
// are answered from it by the grpc++ server's native path without the interpreter lock
// (master_grpc_routes.h), or by the Python handler where that path is not built.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace mori::umbp {

struct FedPlace {
  std::string node_id;
  std::string key;
  bool added = false;
  uint64_t offset = 0;  // added entries: in the owner's DRAM arena
  uint64_t size = 0;
  uint64_t checksum = 0;
};

struct FeedSlice {
  uint64_t feed_id = 0;
  uint64_t next_seq = 0;  // ask from here next
  bool gap = false;       // entries from the asked number on were dropped (or another feed's)
  bool more = false;      // entries wait after next_seq
  std::vector<FedPlace> entries;
};

class PlaceFeed {
 public:
  // Entries held: at ~100 bytes each, a few MiB; a worker polling every 20 ms keeps up with
  // 3 M events a second before it misses any.
  static constexpr size_t kDefaultCapacity = size_t{1} << 16;
  // The most entries one reply carries (a worker that is behind asks again at once).
  static constexpr uint32_t kMaxEntriesPerReply = 4096;

  // dram_tier: the tier number of DRAM (only its events are fed). Throws kInvalidArgument for a
  // capacity of 0.
  explicit PlaceFeed(int32_t dram_tier, size_t capacity = kDefaultCapacity);

  uint64_t feed_id() const { return feed_id_; }
  size_t capacity() const { return ring_.size(); }

  // Appends an owner's DRAM events, columns of equal length: an ADD with its checksum (a place a
  // reader can check), every REMOVE; other tiers' events and ADDs without a checksum are
  // skipped. Returns how many were appended. Throws kInvalidArgument for columns that differ.
  size_t record(const std::string& node_id, const std::vector<std::string>& keys, const std::vector<bool>& added,
                const std::vector<int32_t>& tiers, const std::vector<uint64_t>& offsets,
                const std::vector<uint64_t>& sizes, const std::vector<uint64_t>& checksums);

  // Entries from number `seq` on (0, or another feed's id: from the oldest held), at most
  // `max_entries` (0 or more than kMaxEntriesPerReply: that cap). Entries are numbered from 1.
  FeedSlice since(uint64_t feed_id, uint64_t seq, uint32_t max_entries) const;

 private:
  int32_t dram_;
  uint64_t feed_id_;
  mutable std::mutex mu_;
  std::vector<FedPlace> ring_;
  uint64_t next_ = 1;  // the number the next entry gets
};

}  // namespace mori::umbp
