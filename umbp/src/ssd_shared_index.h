// SPDX-License-Identifier: MIT
// The per-host server's SSD places in shared memory, so that its ranks read SSD-only values
// straight from the segment files instead of asking the server: a get of a value on the SSD
// then costs the rank its read, not the request's and the reply's wake-ups on the socket.
//
// The server writes (it listens to its DRAM and SSD tiers: tier_events.h); ranks map the same
// memory file (core's SharedSegment, handed over with SCM_RIGHTS) and only read. A key's slot
// says whether the server holds it in DRAM and where its SSD record is. A rank reads a value
// itself only when the slot says "on the SSD, not in DRAM" (a DRAM hit through the server is
// faster than the device), and verifies the bytes against the slot's checksum: a slot read while
// the server rewrote it, a record a reclaim moved, a corrupt block, all end in a checksum
// mismatch and the rank asks the server instead. A missing slot only costs that round trip.
//
// Layout: a header, then buckets of kBucketSlots 64-byte slots; a key (by its 128-bit XXH3)
// lives in one of two buckets. Each slot is a seqlock: the writer makes its sequence odd,
// writes, makes it even; a reader retries while it is odd or changed under it. A full pair of
// buckets gives up a slot of the first (round robin): that key is then asked of the server.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "mori/core/shared_segment.h"
#include "src/tier_events.h"

namespace mori::umbp {

class SsdSharedIndex final : public TierEvents {
 public:
  static constexpr size_t kBucketSlots = 8;
  static constexpr const char* kLabel = "mori-umbp-ssd-index";

  // The server's: room for about `keys` keys (slots for twice as many, clamped to [4 Ki, 2 Mi]).
  static std::unique_ptr<SsdSharedIndex> create(size_t keys);
  // A rank's: maps the server's memory file (a descriptor received from it; not consumed).
  // Throws kRemote when it is not a sealed index of this version.
  static std::unique_ptr<SsdSharedIndex> attach(int fd);

  // The server's descriptor of the memory file, to hand to a rank.
  int fd() const { return segment_.fd(); }
  size_t slots() const { return buckets_ * kBucketSlots; }

  // ---- the server: what its tiers say (under their locks) ----
  void append(KvChange::Kind kind, const std::string& key, TierType tier, uint64_t size, uint64_t offset = 0,
              uint64_t checksum = 0) override;
  void ssd_placed(const std::string& key, const SsdPlace& place) override;
  void ssd_segment_dropped(uint64_t segment) override;

  // ---- a rank ----
  // Where `key`'s SSD record is, when the server holds it on the SSD and not in DRAM.
  bool find_ssd_only(std::string_view key, SsdPlace* place) const;
  // Counts the segment files the server deleted: a rank closes its descriptors when it moves.
  uint64_t dropped_segments() const;

 private:
  struct Header;
  struct Slot;
  struct Hash {
    uint64_t lo, hi;
  };
  static constexpr uint64_t kInDram = 1, kOnSsd = 2;

  explicit SsdSharedIndex(SharedSegment segment);
  Header* header() const;
  Slot* bucket(uint64_t h) const;
  static Hash hash(std::string_view key);
  // Writer, under mu_: the key's slot, taking a free one (or another key's) when `create`.
  Slot* find_slot(const Hash& h, bool create);
  // Writer, under mu_: sets the slot's fields as one change readers see whole or not at all.
  static void write_slot(Slot* s, const Hash& h, uint64_t flags, const SsdPlace& place);

  SharedSegment segment_;
  uint64_t buckets_ = 0;  // a power of two
  std::mutex mu_;         // writers: the DRAM and SSD tiers, each under its own lock
  uint64_t victim_ = 0;   // under mu_: the round robin of full buckets
};

}  // namespace mori::umbp
