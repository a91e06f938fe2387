// SPDX-License-Identifier: MIT
#include "src/ssd_shared_index.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cinttypes>

#include "mori/core/status.h"
#include "src/checksum.h"  // xxHash, header-only

namespace mori::umbp {

namespace {
constexpr uint64_t kMagic = 0x58444e4944535355;  // "USSDINDX" read as little-endian bytes
constexpr uint64_t kVersion = 1;
constexpr size_t kMinSlots = size_t{1} << 12, kMaxSlots = size_t{1} << 21;
// A reader that meets a slot being written this many times in a row gives up (asks the server).
constexpr int kReadTries = 64;
}  // namespace

struct SsdSharedIndex::Header {
  uint64_t magic;
  uint64_t version;
  uint64_t buckets;
  std::atomic<uint64_t> dropped_segments;
  uint64_t pad[4];
};

struct SsdSharedIndex::Slot {
  std::atomic<uint64_t> seq;    // odd while the writer changes the slot
  std::atomic<uint64_t> flags;  // kInDram | kOnSsd; 0: free
  std::atomic<uint64_t> lo, hi;
  std::atomic<uint64_t> segment, offset, size, checksum;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the slots are shared between processes");

std::unique_ptr<SsdSharedIndex> SsdSharedIndex::create(size_t keys) {
  static_assert(sizeof(Header) == 64 && sizeof(Slot) == 64, "a slot is one cache line");
  const size_t slots = std::bit_ceil(std::clamp(keys * 2, kMinSlots, kMaxSlots));
  const size_t buckets = slots / kBucketSlots;
  SharedSegment seg = SharedSegment::create(kLabel, sizeof(Header) + slots * sizeof(Slot));
  // A fresh memory file reads as zeros: every slot free, every sequence even.
  auto* h = static_cast<Header*>(seg.data());
  h->magic = kMagic;
  h->version = kVersion;
  h->buckets = buckets;
  return std::unique_ptr<SsdSharedIndex>(new SsdSharedIndex(std::move(seg)));
}

std::unique_ptr<SsdSharedIndex> SsdSharedIndex::attach(int fd) {
  SharedSegment seg =
      SharedSegment::open_sealed("/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd), kLabel);
  if (seg.size() < sizeof(Header)) raise(Status::kRemote, "the shared SSD index is %zu bytes: too small", seg.size());
  const auto* h = static_cast<const Header*>(seg.data());
  if (h->magic != kMagic || h->version != kVersion)
    raise(Status::kRemote, "the shared SSD index is not of version %" PRIu64 " (a server of another build?)", kVersion);
  const uint64_t buckets = h->buckets;
  if (buckets == 0 || !std::has_single_bit(buckets) ||
      (seg.size() - sizeof(Header)) / sizeof(Slot) / kBucketSlots < buckets)
    raise(Status::kRemote, "the shared SSD index's header says %" PRIu64 " buckets in %zu bytes", buckets, seg.size());
  return std::unique_ptr<SsdSharedIndex>(new SsdSharedIndex(std::move(seg)));
}

SsdSharedIndex::SsdSharedIndex(SharedSegment segment) : segment_(std::move(segment)), buckets_(header()->buckets) {}

SsdSharedIndex::Header* SsdSharedIndex::header() const { return static_cast<Header*>(segment_.data()); }

SsdSharedIndex::Slot* SsdSharedIndex::bucket(uint64_t h) const {
  auto* first = reinterpret_cast<Slot*>(static_cast<char*>(segment_.data()) + sizeof(Header));
  return first + (h & (buckets_ - 1)) * kBucketSlots;
}

SsdSharedIndex::Hash SsdSharedIndex::hash(std::string_view key) {
  const XXH128_hash_t h = XXH3_128bits(key.data(), key.size());
  return Hash{h.low64, h.high64};
}

SsdSharedIndex::Slot* SsdSharedIndex::find_slot(const Hash& h, bool create) {
  Slot* const pair[2] = {bucket(h.lo), bucket(h.hi)};
  Slot* free_slot = nullptr;
  for (Slot* b : pair)
    for (size_t i = 0; i < kBucketSlots; ++i) {
      Slot* s = b + i;
      const uint64_t flags = s->flags.load(std::memory_order_relaxed);
      if (flags == 0) {
        if (!free_slot) free_slot = s;
      } else if (s->lo.load(std::memory_order_relaxed) == h.lo && s->hi.load(std::memory_order_relaxed) == h.hi) {
        return s;
      }
    }
  if (!create) return nullptr;
  // Both buckets full: another key gives up its slot (it is asked of the server from now on).
  return free_slot ? free_slot : pair[0] + (victim_++ % kBucketSlots);
}

void SsdSharedIndex::write_slot(Slot* s, const Hash& h, uint64_t flags, const SsdPlace& place) {
  const uint64_t seq = s->seq.load(std::memory_order_relaxed);
  s->seq.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  s->flags.store(flags, std::memory_order_relaxed);
  s->lo.store(h.lo, std::memory_order_relaxed);
  s->hi.store(h.hi, std::memory_order_relaxed);
  s->segment.store(place.segment, std::memory_order_relaxed);
  s->offset.store(place.offset, std::memory_order_relaxed);
  s->size.store(place.size, std::memory_order_relaxed);
  s->checksum.store(place.checksum, std::memory_order_relaxed);
  s->seq.store(seq + 2, std::memory_order_release);
}

void SsdSharedIndex::append(KvChange::Kind kind, const std::string& key, TierType tier, uint64_t, uint64_t, uint64_t) {
  if (tier == TierType::SSD && kind == KvChange::Kind::Add) return;  // ssd_placed() says where
  const uint64_t bit = tier == TierType::SSD ? kOnSsd : kInDram;
  const Hash h = hash(key);
  std::lock_guard<std::mutex> lock(mu_);
  if (kind == KvChange::Kind::Add) {
    // Taken even from another key's slot when both buckets are full (that key is asked of the
    // server from now on, or until its SSD record is placed again).
    Slot* s = find_slot(h, /*create=*/true);
    const bool same = s->flags.load(std::memory_order_relaxed) != 0 && s->lo.load(std::memory_order_relaxed) == h.lo &&
                      s->hi.load(std::memory_order_relaxed) == h.hi;
    const uint64_t flags = (same ? s->flags.load(std::memory_order_relaxed) : 0) | bit;
    SsdPlace place;
    if (same)
      place = SsdPlace{s->segment.load(std::memory_order_relaxed), s->offset.load(std::memory_order_relaxed),
                       s->size.load(std::memory_order_relaxed), s->checksum.load(std::memory_order_relaxed)};
    write_slot(s, h, flags, place);
    return;
  }
  Slot* s = find_slot(h, /*create=*/false);
  if (!s) return;
  const uint64_t flags = s->flags.load(std::memory_order_relaxed) & ~bit;
  write_slot(s, flags ? h : Hash{0, 0}, flags,
             flags ? SsdPlace{s->segment.load(std::memory_order_relaxed), s->offset.load(std::memory_order_relaxed),
                              s->size.load(std::memory_order_relaxed), s->checksum.load(std::memory_order_relaxed)}
                   : SsdPlace{});
}

void SsdSharedIndex::ssd_placed(const std::string& key, const SsdPlace& place) {
  const Hash h = hash(key);
  std::lock_guard<std::mutex> lock(mu_);
  Slot* s = find_slot(h, /*create=*/true);
  const bool same = s->flags.load(std::memory_order_relaxed) != 0 && s->lo.load(std::memory_order_relaxed) == h.lo &&
                    s->hi.load(std::memory_order_relaxed) == h.hi;
  const uint64_t dram = same ? s->flags.load(std::memory_order_relaxed) & kInDram : 0;
  write_slot(s, h, dram | kOnSsd, place);
}

void SsdSharedIndex::ssd_segment_dropped(uint64_t) {
  header()->dropped_segments.fetch_add(1, std::memory_order_release);
}

uint64_t SsdSharedIndex::dropped_segments() const { return header()->dropped_segments.load(std::memory_order_acquire); }

bool SsdSharedIndex::find_ssd_only(std::string_view key, SsdPlace* place) const {
  const Hash h = hash(key);
  for (Slot* b : {bucket(h.lo), bucket(h.hi)})
    for (size_t i = 0; i < kBucketSlots; ++i) {
      Slot* s = b + i;
      for (int tries = 0; tries < kReadTries; ++tries) {
        const uint64_t seq = s->seq.load(std::memory_order_acquire);
        if (seq & 1) continue;
        const uint64_t flags = s->flags.load(std::memory_order_relaxed);
        const uint64_t lo = s->lo.load(std::memory_order_relaxed), hi = s->hi.load(std::memory_order_relaxed);
        SsdPlace p{s->segment.load(std::memory_order_relaxed), s->offset.load(std::memory_order_relaxed),
                   s->size.load(std::memory_order_relaxed), s->checksum.load(std::memory_order_relaxed)};
        std::atomic_thread_fence(std::memory_order_acquire);
        if (s->seq.load(std::memory_order_relaxed) != seq) continue;
        if (flags == 0 || lo != h.lo || hi != h.hi) break;  // another key's slot, or a free one
        if (flags != kOnSsd) return false;                  // in DRAM (or not on the SSD): ask the server
        *place = p;
        return true;
      }
    }
  return false;
}

}  // namespace mori::umbp
