// SPDX-License-Identifier: MIT
// The DRAM tier: one arena of dram.capacity_bytes (HostMemAllocator: huge pages, NUMA node,
// prefault as configured), carved by core's HeapAllocator, and an index key -> block. With
// dram.use_shared_memory the arena is a memory file (AnonymousShm) rather than private memory;
// MORI's dram.shm_name is not used (a memory file has no name in /dev/shm to collide on).
//
// Eviction: a put that takes use over the high watermark evicts down to the low one (and further
// while its value still does not fit). The victim is chosen among the `candidate_window` least
// recently used evictable blocks: the deepest radix-tree depth first (depth -1 counts as 0, so
// blocks without depth are plain LRU), the oldest among equals. A block is evictable when no
// reader holds it and, if the tier must keep values until the SSD has them, once it is copied.
//
// Locking: one mutex guards the index, the LRU list and the allocator, and is held only for
// lookups and bookkeeping, never for copying bytes. A reader pins its blocks under the lock,
// copies without it, and unpins; a writer reserves invisible blocks under the lock, copies into
// them without it, and publishes them. A block that is dropped (clear, corruption) while pinned
// is unlinked at once and its memory returned when the last pin goes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "mori/core/heap_allocator.h"
#include "mori/core/thread_team.h"
#include "mori/umbp/config.h"
#include "src/host_mem_allocator.h"
#include "src/tier_events.h"

namespace mori::umbp {

struct DramStats {
  uint64_t used_bytes = 0, capacity_bytes = 0, keys = 0;
  uint64_t pinned_bytes = 0;  // of used_bytes, what no eviction can free now (read, written, awaiting the SSD)
  uint64_t evictions = 0, corrupt_reads = 0;
};

class DramTier {
 public:
  // One value in the arena. Opaque outside the tier except through the accessors below.
  struct Block;

  enum class PutOutcome : uint8_t {
    kStored,  // copied in and visible
    kExists,  // the key was there already (its value is kept)
    kNoRoom,  // larger than the tier, or nothing evictable makes room
  };

  // `verify_checksums`: DRAM hits are checked against the checksum taken at put.
  // `checksum_always`: the checksum is taken at put even when hits are not verified (a peer
  // hands it to remote readers, who verify what they read).
  DramTier(const DramConfig& dram, const EvictionConfig& eviction, bool verify_checksums, bool checksum_always = false);
  // The same pages over memory owned elsewhere (a distributed peer's HBM arena, peer_pages.h):
  // index, allocator, watermarks, eviction and events as above, the events tagged `tier`, the
  // checksums taken by `checksum` (device memory is hashed through a host copy). Only the peer
  // hooks reach such a tier: put() and get() copy host memory and refuse it.
  struct ExternalArena {
    char* base = nullptr;
    size_t capacity = 0;
    TierType tier = TierType::HBM;
    std::function<uint64_t(const char*, size_t)> checksum;
    std::function<void(void* host, const char* src, size_t n)> copy_to_host;  // for the SSD copy
    std::function<void(char* p, size_t n)> invalidate;                        // see invalidate()
  };
  DramTier(const ExternalArena& arena, const DramConfig& watermarks, const EvictionConfig& eviction);
  ~DramTier();
  DramTier(const DramTier&) = delete;
  DramTier& operator=(const DramTier&) = delete;

  // Stores the values whose key is not present: one lock to reserve, copies without it, one lock
  // to publish. `depths` may be null (all -1). With `copy_hold`, every stored block is also
  // returned in `held` (same index; nullptr for the others) and stays pinned, so unevictable,
  // until release_held(): the copy pipeline reads it from there.
  void put(const std::string* keys, const uintptr_t* srcs, const size_t* sizes, const int* depths, size_t n,
           bool copy_hold, PutOutcome* outcomes, Block** held);
  // Copies each present value whose stored size equals sizes[i] into dsts[i]; hits[i] says which.
  // A checksum mismatch (when verifying) drops the key and is a miss. Hits move to the MRU end
  // when `promote`. Returns the number of hits.
  size_t get(const std::string* keys, const uintptr_t* dsts, const size_t* sizes, size_t n, bool promote, bool* hits);

  bool contains(const std::string& key) const;
  // out[i] = contains(keys[i]), under one lock.
  void contains(const std::string* keys, size_t n, bool* out) const;
  // Length of the prefix of keys present, under one lock.
  size_t count_present_prefix(const std::string* keys, size_t n) const;
  size_t count_present_prefix(const std::string_view* keys, size_t n) const;

  // The copy pipeline's view of a held block (valid until release_copied()).
  static const std::string& key_of(const Block* b);
  static const void* data_of(const Block* b);
  // An external arena (device memory) is not readable by the host: the copy pipeline stages its
  // values through copy_to_host() (a memcpy for the host arena).
  bool external() const { return static_cast<bool>(external_checksum_); }
  void copy_to_host(const Block* b, void* dst) const;
  static size_t size_of(const Block* b);
  // Unpins blocks put with copy_hold (they become evictable).
  void release_held(Block* const* blocks, size_t n);

  bool remove(const std::string& key);
  void clear();

  // Every ADD and REMOVE of a published value is appended to `log` from now on (null: none):
  // the distributed peer's event log, or the per-host server's shared SSD index.
  void set_event_log(TierEvents* log);

  // ---- distributed mode: the peer's view of the arena (peer_pages.h) ----
  const char* base() const { return base_; }
  // An invisible block of `size` bytes for `key`, pinned by its writer until commit_slot() or
  // abort_slot(); kExists and kNoRoom as put() says (then null).
  Block* reserve_slot(const std::string& key, size_t size, PutOutcome* outcome);
  // Publishes a reserved block (its bytes were written into the arena). With `copy_hold` the
  // writer's pin is handed to the caller (the copy pipeline) and the block returned, else
  // unpinned and null returned. *published is false when a clear() dropped it meanwhile.
  // `checksum`: the value's, taken by the caller (null: hashed here when the tier takes them).
  Block* commit_slot(Block* b, bool copy_hold, bool* published, const uint64_t* checksum = nullptr);
  // Whether commit_slot() takes a checksum of what it publishes.
  bool takes_checksums() const { return verify_checksums_ || checksum_always_; }
  void abort_slot(Block* b);
  // Pins the published value of `key` (null on a miss): no eviction or clear frees it until unpin_blocks().
  Block* pin(const std::string& key);
  void unpin_blocks(Block* const* blocks, size_t n);
  static size_t offset_of(const Block* b);
  // The value's checksum (taken at put; computed now if it was not: call it on a pinned block).
  static uint64_t checksum_of(const Block* b);
  // Evicts `key` unless a reader or the copy pipeline holds it: the bytes freed (0: kept, or absent).
  size_t evict_key(const std::string& key);
  // Every published value: where it lies in the arena and its checksum (0: not taken).
  struct Published {
    std::string key;
    uint64_t size;
    uint64_t offset;
    uint64_t checksum;
  };
  std::vector<Published> snapshot() const;
  DramStats stats() const;
  size_t capacity() const { return capacity_; }

 private:
  struct KeyHash {
    size_t operator()(std::string_view s) const;  // XXH3: a third of std::hash's time on 70-byte keys
  };
  template <typename Key>
  size_t present_prefix(const Key* keys, size_t n) const;

  struct Copy {
    char* dst;
    const char* src;
    size_t n;
    uint64_t* checksum;  // where the XXH3 of the n source bytes goes (null: none taken)
  };
  // Values this large are copied into the arena with non-temporal stores, alone or in a batch:
  // the arena's lines are cold (it is far larger than the caches), and plain stores would first
  // read each one. Measured with cold destinations: 64 KiB 10 -> 22 GiB/s on the 2-core EPYC
  // VM; 360 KiB x 32 7.5 -> 15.6 GiB/s on one core of the 16-core Xeon host (2026-12-04).
  static constexpr size_t kStreamingValueMin = size_t{64} << 10;
  // A call moving this much is spread over a copy team of 4 or more threads. One Xeon core
  // copies 1 MiB at 15 GiB/s, four at 37 GiB/s (cold destination, non-temporal stores; 2 MiB:
  // 12 -> 38 GiB/s). A team of 2 or 3 starts at kSmallTeamCopyMin: on the 2-vCPU EPYC VM one
  // core already takes the memory's bandwidth (1-2 MiB cold: 15-19 GiB/s alone, 12-17 in two
  // halves; cached copies the same either way; 2026-12-04, a loaded machine).
  static constexpr size_t kParallelCopyMin = size_t{1} << 20;
  static constexpr size_t kSmallTeamCopyMin = size_t{4} << 20;
  // The team's pieces: about an even share per thread, between these bounds.
  static constexpr size_t kCopyPieceMin = size_t{256} << 10;
  static constexpr size_t kCopyPieceMax = size_t{1} << 20;
  // Copies (and hashes, where Copy::checksum asks) a call's values.
  void copy_all(const std::vector<Copy>& copies, bool to_arena);

  bool evictable(const Block* b) const;
  Block* pick_victim() const;
  void evict(Block* b);
  // Reserves `size` bytes, evicting as the watermarks say; nullopt when nothing makes room.
  std::optional<size_t> reserve(size_t size);
  void unlink(Block* b);   // out of the index and the LRU list
  void release(Block* b);  // memory back to the allocator, block deleted
  void lru_push_back(Block* b);
  void lru_remove(Block* b);
  void unpin(Block* b);
  void publish(Block* b);  // under mu_: visible, MRU, ADD event
  void drop(Block* b);     // under mu_: unlinked (REMOVE event if it was visible), freed once unpinned

  const size_t capacity_;
  const size_t high_bytes_, low_bytes_;
  const size_t candidate_window_;
  const bool verify_checksums_;
  const bool checksum_always_;
  const TierType tier_ = TierType::DRAM;  // what the events say
  // Set for an external arena: how its values are hashed (null: host memory, value_checksum).
  std::function<uint64_t(const char*, size_t)> external_checksum_;
  std::function<void(void*, const char*, size_t)> external_copy_;
  std::function<void(char*, size_t)> external_invalidate_;
  // A published value's bytes stop matching its checksum when its block goes back to the heap:
  // a remote reader that remembered the place (UMBPLocationCache: one-sided reads checked by
  // the checksum alone) misses a value that was cleared or evicted instead of reading it there,
  // until the block holds another value (which fails the checksum anyway). Flips the value's
  // first bytes (at most 8): cheaper than any scrub, and always a change.
  void invalidate(Block* b);
  uint64_t hash(const Block* b) const;
  TierEvents* events_ = nullptr;  // under mu_
  HostMemAllocator host_;
  HostBufferHandle arena_;
  char* base_ = nullptr;

  std::mutex team_mu_;                // one call at a time spreads its copies over the team
  std::unique_ptr<ThreadTeam> team_;  // made by the first call that needs it

  mutable std::mutex mu_;
  HeapAllocator heap_;
  std::unordered_map<std::string_view, Block*, KeyHash> index_;  // views into Block::key
  std::vector<Block*> dropped_pinned_;                           // unlinked while pinned, freed by their last unpin
  Block* lru_head_ = nullptr;                                    // least recently used
  Block* lru_tail_ = nullptr;                                    // most recently used
  size_t used_bytes_ = 0;    // bytes of live blocks (rounded as the allocator rounds)
  size_t pinned_bytes_ = 0;  // of which blocks with pins > 0
  uint64_t evictions_ = 0, corrupt_reads_ = 0;
};

}  // namespace mori::umbp
