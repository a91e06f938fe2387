// SPDX-License-Identifier: MIT
// The peer side of the distributed pool: what a worker's UMBPPeer service does to the pages it
// owns (its local store's DRAM arena and SSD tier). The control plane (gRPC, Python) calls these;
// bytes move between processes only through MORI-IO, straight into and out of the arena.
//
//   write  allocate(key, size) reserves an invisible block in the arena (write-once: a key the
//          peer has is ALREADY_EXISTS; NO_SPACE when nothing evictable makes room) and returns
//          its offset; the writer writes the bytes there with MORI-IO and commits (the value
//          becomes visible, its checksum is taken, it is queued for the SSD copy, an ADD event
//          is logged) or aborts. A slot neither committed nor aborted within kPendingTtl is
//          aborted by the reaper (a writer that died).
//   read   resolve(key) pins a DRAM value under a read lease (UMBP_DRAM_READ_LEASE_MS) so that
//          no eviction frees it while a reader copies it out; the lease ends when released or
//          when it expires (a reader that died). A key only on the SSD is staged:
//          prepare_ssd_read() reads it (checksum verified) into the staging buffer, leased for
//          UMBP_SSD_READ_LEASE_MS: one slot, or as many adjacent slots as a larger value needs (a
//          value larger than the whole buffer is SizeTooLarge: raise ssd_staging_buffer_size). Every answer carries the
//          value's XXH3 checksum: the reader verifies what it read, so a lease that expired mid-read costs a retry,
//          never a wrong value.
//   index  every ADD/REMOVE of an owned key per tier goes to the event log (peer_events.h), and
//          snapshot() lists the owned keys for a full sync.
//
//   HBM    with distributed.hbm set, a second page pool over one device allocation on
//          hbm.device: the same DramTier code (ExternalArena), its events tagged HBM, its values
//          hashed through a host copy (the bytes arrive in device memory by CUDA IPC or io/'s
//          staged tcp; no host pass of ours sees them). Slots are asked per tier; resolve()
//          looks in HBM first; evict() frees a key from either. With an SSD tier, HBM values
//          get their SSD copy from a copy pipeline of their own that stages them through host
//          memory (and stay pinned in HBM until it is done, as DRAM values do).
//
// Thread-safe. Lock order: PeerPages::mu_ -> the tiers' locks -> the event log's.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "mori/core/thread_team.h"
#include "src/copy_pipeline.h"
#include "src/dram_tier.h"
#include "src/host_mem_allocator.h"
#include "src/peer_events.h"
#include "src/ssd_tier.h"

namespace mori::umbp {

// The values of umbp_peer.proto's AllocateSlotOutcome.
enum class SlotOutcome : int { Allocated = 1, AlreadyExists = 2, Failed = 3, NoSpace = 4 };
// How a staged SSD read ended (the master's SSD read metrics use the same names).
enum class StageOutcome : int { Ok = 0, NotFound = 1, NoSlot = 2, SizeTooLarge = 3, Error = 4 };

struct SlotGrant {
  SlotOutcome outcome = SlotOutcome::Failed;
  uint64_t slot_id = 0;
  uint64_t offset = 0;  // in the arena
};

struct ResolvedValue {
  bool found = false;
  TierType tier = TierType::Unknown;  // DRAM: pinned at `offset`; SSD: stage it first
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t checksum = 0;
  uint64_t lease_id = 0;  // DRAM only
};

struct StagedValue {
  StageOutcome outcome = StageOutcome::Error;
  uint64_t offset = 0;  // in the staging buffer
  uint64_t size = 0;
  uint64_t checksum = 0;
  uint64_t lease_id = 0;
};

struct OwnedKey {
  std::string key;
  TierType tier;
  uint64_t size;
  uint64_t offset = 0;    // DRAM: in the arena
  uint64_t checksum = 0;  // DRAM: the value's XXH3 (0: not known)
};

// The XXH3 of `size` bytes of device memory on `device`, hashed through a host copy in pieces (the
// same value value_checksum() gives for the bytes). Throws mori::Error(kDevice) on a CUDA error,
// kUnavailable in a build without CUDA.
uint64_t device_checksum(const void* data, size_t size, int device);

class PeerPages {
 public:
  // `ssd` and `pipeline` may be null (no SSD tier). The staging buffer (`staging_bytes` in
  // `staging_slots` equal slots) is mapped only when there is an SSD tier.
  // `hbm` with total_bytes() > 0 allocates the HBM arena on hbm.device, or throws naming the setting
  // (no CUDA in this build, no such device, out of device memory) with nothing half built.
  PeerPages(DramTier& dram, SsdTier* ssd, CopyPipeline* pipeline, bool copy_sync, size_t staging_bytes,
            int staging_slots, int dram_lease_ms, int ssd_lease_ms, const HbmConfig& hbm = HbmConfig{},
            const DramConfig& watermarks = DramConfig{}, const EvictionConfig& eviction = EvictionConfig{},
            const CopyPipelineConfig& copy = CopyPipelineConfig{});
  ~PeerPages();
  PeerPages(const PeerPages&) = delete;
  PeerPages& operator=(const PeerPages&) = delete;

  // `tiers` (empty: all DRAM): TierType values; HBM takes the slot in the HBM arena (Failed without one).
  std::vector<SlotGrant> allocate(const std::vector<std::string>& keys, const std::vector<uint64_t>& sizes,
                                  const std::vector<int>& tiers = {});
  // False for a slot that is unknown (reaped, aborted) or whose key does not match.
  std::vector<bool> commit(const std::vector<uint64_t>& slot_ids, const std::vector<std::string>& keys);
  // Idempotent: true for an unknown slot too.
  std::vector<bool> abort(const std::vector<uint64_t>& slot_ids);
  std::vector<ResolvedValue> resolve(const std::vector<std::string>& keys);
  StagedValue prepare_ssd_read(const std::string& key, uint64_t max_size);
  // This worker's own reads and writes of its HBM pages (no MORI-IO: a CUDA copy between the
  // caller's memory, host or device, and the arena; cudaMemcpyDefault tells which).
  // hbm_get: hits[i] when the key is in HBM with exactly sizes[i] bytes, copied into dsts[i].
  std::vector<bool> hbm_get(const std::vector<std::string>& keys, const std::vector<uintptr_t>& dsts,
                            const std::vector<uint64_t>& sizes);
  // hbm_put: per key a SlotOutcome: Allocated (stored now), AlreadyExists, NoSpace or Failed (no
  // HBM arena, a failed copy): the caller puts those elsewhere.
  std::vector<int> hbm_put(const std::vector<std::string>& keys, const std::vector<uintptr_t>& srcs,
                           const std::vector<uint64_t>& sizes);
  // The store's flush(): returns once the HBM values' SSD copies in flight are done (no-op
  // without HBM pages or an SSD tier).
  void drain_hbm_copies();
  // The store's clear(): drops every HBM value (their REMOVE events too), after the SSD copies
  // in flight, so that none lands on the SSD once it is cleared.
  void clear_hbm();
  // The store's clear(): ends every read lease (DRAM, HBM and staging) at once.
  void end_leases();
  // Ends a read lease (DRAM or staging); false when it is unknown (expired, or released).
  bool release(uint64_t lease_id);
  // Master-driven eviction from DRAM: the bytes freed per key (0: leased, pinned, or absent).
  std::vector<uint64_t> evict(const std::vector<std::string>& keys);
  // A cluster-wide clear's EvictKey (`clear` set): each key gone from every tier (DRAM, HBM,
  // SSD) whatever holds it, the read leases on it ended, after the SSD copies in flight (none
  // may bring a value back). The bytes freed per key (0: absent).
  std::vector<uint64_t> remove(const std::vector<std::string>& keys);
  // A reader's check of values it read from peers: whether [ptrs[i], ptrs[i] + sizes[i]) hashes
  // to checksums[i]. One pass over each value; a batch of kParallelHashMin bytes or more is
  // hashed by the hash team (one task per checksum chunk), as commit() hashes the DRAM values it
  // publishes.
  std::vector<bool> verify(const std::vector<uintptr_t>& ptrs, const std::vector<uint64_t>& sizes,
                           const std::vector<uint64_t>& checksums);

  // Baseline sequence and every owned key, for a full sync (peer_events.h says why it is exact).
  std::pair<uint64_t, std::vector<OwnedKey>> snapshot();
  PeerEventLog& events() { return events_; }

  uintptr_t arena_ptr() const { return reinterpret_cast<uintptr_t>(dram_.base()); }
  size_t arena_size() const { return dram_.capacity(); }
  uintptr_t staging_ptr() const { return reinterpret_cast<uintptr_t>(staging_.ptr); }
  size_t staging_size() const { return staging_.ptr ? staging_.requested_size : 0; }
  // The HBM arena (0, 0, -1 without one).
  uintptr_t hbm_ptr() const { return reinterpret_cast<uintptr_t>(hbm_mem_.ptr); }
  size_t hbm_size() const { return hbm_ ? hbm_->capacity() : 0; }
  int hbm_device() const { return hbm_ ? hbm_mem_.device : -1; }
  DramStats hbm_stats() const { return hbm_ ? hbm_->stats() : DramStats{}; }
  size_t staging_slot_size() const { return slot_bytes_; }
  uint64_t pending_ttl_ms() const { return kPendingTtl.count(); }
  size_t leases() const;  // live read leases (DRAM and staging)
  size_t pending_slots() const;

  // A slot not committed or aborted within this is aborted: its writer is gone.
  static constexpr std::chrono::milliseconds kPendingTtl{30000};
  // Values hashed in one call (commit, verify) are spread over a team (MORI_COPY_THREADS threads,
  // else the host's cores up to 8; one checksum chunk per task) when they hold this many bytes in
  // all: one core hashes 18-30 GB/s, and a read of a few MiB waited for its check after the read.
  static constexpr size_t kParallelHashMin = size_t{1} << 20;

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    DramTier* tier;
    DramTier::Block* block;
    std::string key;
    Clock::time_point deadline;
  };
  struct Lease {
    DramTier* tier;
    DramTier::Block* block;  // null: a run of staging slots
    int staging_slot;        // the first of them
    int staging_count;
    Clock::time_point deadline;
  };

  void reaper();
  void end_lease(Lease& l);  // under mu_
  // Calls fn(i) for i in [0, n): on the hash team when `bytes` reach kParallelHashMin and no
  // other call holds it, else on the caller's thread.
  void for_each_value(size_t n, uint64_t bytes, const std::function<void(int)>& fn);
  // value_checksum() of each [ptrs[i], ptrs[i] + sizes[i]), the chunks of all of them side by
  // side (for_each_value).
  std::vector<uint64_t> value_checksums(const std::vector<const char*>& ptrs, const std::vector<uint64_t>& sizes);

  DramTier& dram_;
  // The HBM arena (device memory, freed in the destructor) and its page pool: made before the
  // rest so that a failure leaves nothing to undo.
  struct DeviceMemory {  // one cudaMalloc, freed on its device when it goes
    char* ptr = nullptr;
    int device = -1;
    DeviceMemory() = default;
    DeviceMemory(const DeviceMemory&) = delete;
    DeviceMemory& operator=(const DeviceMemory&) = delete;
    ~DeviceMemory();
  };
  DeviceMemory hbm_mem_;
  std::unique_ptr<DramTier> hbm_;               // after hbm_mem_: goes first
  std::unique_ptr<CopyPipeline> hbm_pipeline_;  // HBM -> SSD (with an SSD tier); goes before hbm_
  DramTier* tier_of(int tier);                  // HBM: hbm_ (null without one); anything else: &dram_
  SsdTier* ssd_;
  CopyPipeline* pipeline_;
  const bool copy_sync_;
  const std::chrono::milliseconds dram_lease_, ssd_lease_;
  PeerEventLog events_;

  HostMemAllocator host_;
  HostBufferHandle staging_;
  size_t slot_bytes_ = 0;

  mutable std::mutex mu_;
  std::condition_variable reaper_cv_;
  bool stopping_ = false;
  uint64_t next_id_ = 1;  // slot and lease ids, one counter: never 0
  std::unordered_map<uint64_t, Pending> pending_;
  std::unordered_map<uint64_t, Lease> leases_;
  std::vector<bool> slot_busy_;
  std::mutex team_mu_;                // one call at a time hashes on the team
  std::unique_ptr<ThreadTeam> team_;  // made by the first call that needs it
  std::thread reaper_thread_;         // last: started once the rest is built
};

}  // namespace mori::umbp
