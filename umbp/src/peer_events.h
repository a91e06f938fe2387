// SPDX-License-Identifier: MIT
// A peer's owned-key event log (distributed mode): every change to the keys a peer owns, per
// tier, in the order it happened: ADD when a value becomes visible in a tier, REMOVE when it
// leaves it (evicted, removed, cleared, dropped as corrupt). The heartbeat drains it into
// KvEvent bundles for the master, whose block index is only this stream's projection.
//
// Each event carries a monotonic sequence number. A full sync (the master saw a gap) takes
// mark() as its baseline, drops what is queued up to it and ships the tiers' snapshots: an event
// is appended after its tier changed and under the tier's lock, so whatever was queued before
// the mark is in the snapshot, and what comes after is shipped as deltas (ADD and REMOVE are
// idempotent on the master, so an event the snapshot already shows costs nothing).
//
// The log's mutex is a leaf: tiers append while holding their own locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <deque>
#include <iterator>
#include <mutex>
#include <string>
#include <vector>

#include "mori/umbp/config.h"
#include "src/tier_events.h"

namespace mori::umbp {

class PeerEventLog final : public TierEvents {
 public:
  void append(KvChange::Kind kind, const std::string& key, TierType tier, uint64_t size, uint64_t offset = 0,
              uint64_t checksum = 0) override;
  // Up to `max` queued events, oldest first (0: all).
  std::vector<KvChange> drain(size_t max);
  // The sequence of the last event appended; drops everything queued up to it (a full sync
  // snapshot is taken right after).
  uint64_t mark_and_drop();
  size_t pending() const;
  uint64_t last_seq() const;
  // Events dropped because the queue was full (the master is unreachable for long): the next
  // heartbeat must be a full sync.
  uint64_t overflowed() const;

  // Past this many queued events the oldest are dropped and overflowed() counts them: a peer
  // cut off from its master must not grow without bound.
  static constexpr size_t kMaxQueued = size_t{1} << 20;

 private:
  mutable std::mutex mu_;
  std::deque<KvChange> queue_;
  uint64_t seq_ = 0;
  uint64_t overflowed_ = 0;
};

}  // namespace mori::umbp
