// SPDX-License-Identifier: MIT
// What a tier says about its keys as they change, under its own lock, to whoever listens: the
// distributed peer's event log (peer_events.h, shipped to the master) or the per-host server's
// shared SSD index (ssd_shared_index.h, read by the ranks). One listener per tier.
#pragma once

#include <cstdint>
#include <string>

#include "mori/umbp/config.h"

namespace mori::umbp {

struct KvChange {
  enum class Kind : int { Add = 0, Remove = 1 };  // the values of KvEvent.Kind in umbp.proto
  Kind kind = Kind::Add;
  std::string key;
  TierType tier = TierType::Unknown;
  uint64_t size = 0;  // Add only
  uint64_t seq = 0;
  // A DRAM Add's place in the owner's arena and its XXH3 (0: not known): the master hands
  // them out with its routes, so a first read needs no resolve at the owner.
  uint64_t offset = 0;
  uint64_t checksum = 0;
};

// Where an SSD value's bytes are: segment file, offset of the value in it, size, XXH3.
struct SsdPlace {
  uint64_t segment = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t checksum = 0;
};

class TierEvents {
 public:
  virtual ~TierEvents() = default;
  // ADD when a value becomes visible in a tier, REMOVE when it leaves it (evicted, removed,
  // cleared, dropped as corrupt). Called with the tier's lock held: a listener's lock is a leaf.
  virtual void append(KvChange::Kind kind, const std::string& key, TierType tier, uint64_t size, uint64_t offset = 0,
                      uint64_t checksum = 0) = 0;
  // The SSD tier indexed a record of `key`: a new value, or one a reclaim moved to a new segment.
  virtual void ssd_placed(const std::string& key, const SsdPlace& place) {}
  // The SSD tier deleted a segment file (reclaimed or cleared).
  virtual void ssd_segment_dropped(uint64_t segment) {}
};

}  // namespace mori::umbp
