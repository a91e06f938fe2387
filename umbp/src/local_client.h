// SPDX-License-Identifier: MIT
// The in-process store (MORI's StandaloneClient, DeploymentMode::Local): a DRAM tier in front of
// an SSD tier (when ssd.enabled), joined by the DRAM -> SSD copy pipeline.
//
//   put  write-once: a key present in either tier keeps its value (true). New values go into
//        DRAM, then to the SSD through the copy pipeline (asynchronously unless
//        copy_pipeline.async_enabled is false). A value DRAM cannot take (larger than the tier,
//        or nothing evictable) is written to the SSD directly; without an SSD tier the put is
//        refused (false, counted in stats().put_refusals).
//   get  a DRAM hit is one copy out of the arena; otherwise the SSD read lands (checksum
//        verified) in the caller's buffer, and with eviction.auto_promote_on_read the value is
//        admitted into DRAM for the next reader.
//   Roles (MLA with TP > 1, several ranks over one storage_dir): SharedSSDLeader also writes
//        every put through to the SSD before returning, so followers in other processes can
//        read it at once; SharedSSDFollower only reads the SSD tier (its puts return false, as
//        in MORI) and re-scans the directory when it does not know a key.
//
// Thread-safe; no call holds a tier's lock while bytes are copied (dram_tier.h says how).
//
// Distributed mode (config.distributed set): this store holds the pages its worker OWNS in the
// pool; peer_pages() is what the worker's UMBPPeer service does to them (peer_pages.h). Every
// DRAM value then carries its checksum (remote readers verify it).
#pragma once

#include <atomic>
#include <memory>

#include "mori/umbp/client.h"
#include "src/copy_pipeline.h"
#include "src/dram_tier.h"
#include "src/peer_pages.h"
#include "src/ssd_tier.h"

namespace mori::umbp {

class LocalClient final : public Client {
 public:
  explicit LocalClient(const Config& config);
  ~LocalClient() override;

  bool put(const std::string& key, const void* src, size_t size) override;
  bool get(const std::string& key, void* dst, size_t size) override;
  bool exists(const std::string& key) override;
  std::vector<bool> batch_put(const std::vector<std::string>& keys, const std::vector<uintptr_t>& srcs,
                              const std::vector<size_t>& sizes, const std::vector<int>& depths) override;
  std::vector<bool> batch_get(const std::vector<std::string>& keys, const std::vector<uintptr_t>& dsts,
                              const std::vector<size_t>& sizes) override;
  std::vector<bool> batch_exists(const std::vector<std::string>& keys) override;
  size_t batch_exists_consecutive(const std::vector<std::string>& keys) override;
  // The same over views of the keys: the binding's path for a list of str (no copy of any key
  // unless the SSD tier has to be asked about it).
  size_t batch_exists_consecutive(const std::string_view* keys, size_t n);

  bool clear() override;
  bool flush() override;
  DeploymentMode deployment_mode() const override { return DeploymentMode::Local; }

  bool register_memory(void* ptr, size_t size) override { return true; }  // nothing to map in-process
  void deregister_memory(void* ptr) override {}

  bool report_external_kv_blocks(const std::vector<std::string>&, TierType) override { return false; }
  bool revoke_external_kv_blocks(const std::vector<std::string>&, TierType) override { return false; }
  bool revoke_all_external_kv_blocks_at_tier(TierType) override { return false; }
  std::vector<ExternalKvMatch> match_external_kv(const std::vector<std::string>&, bool) override { return {}; }
  std::vector<ExternalKvHitCount> get_external_kv_hit_counts(const std::vector<std::string>&) override { return {}; }

  ClientStats stats() const override;

  // ---- the per-host server's shared SSD index (ssd_shared_index.h) ----
  // Both tiers tell `events` of every change from now on (the SSD tier of what it holds already).
  void set_tier_events(TierEvents* events);
  // Values a rank read from the SSD itself: counted as SSD hits, as if the store had served them.
  void count_direct_reads(uint64_t values, uint64_t bytes);
  // Promote on read for a value a rank read from the SSD itself: `src` (the rank's memory, which
  // it may already be changing) is copied once, and admitted into DRAM only when the copy still
  // matches `checksum` and the SSD still holds the key.
  bool admit_read(const std::string& key, const void* src, size_t size, uint64_t checksum);

  // The peer hooks over this store's tiers (distributed mode; made on first use).
  PeerPages& peer_pages();
  bool owns_pool_pages() const { return config_.distributed.has_value(); }

 private:
  // From `i` (the DRAM tier's prefix) on: the keys either tier has, up to the first neither has.
  size_t consecutive_from(const std::string* keys, size_t n, size_t i);
  // put/batch_put after the argument checks; `depths` may be null.
  std::vector<bool> store(const std::string* keys, const uintptr_t* srcs, const size_t* sizes, const int* depths,
                          size_t n);
  // get/batch_get after the argument checks.
  std::vector<bool> load(const std::string* keys, const uintptr_t* dsts, const size_t* sizes, size_t n);
  // Promote on read: values just read from the SSD into DRAM; returns how many were admitted.
  size_t promote(const std::string* keys, const uintptr_t* srcs, const size_t* sizes, size_t n);
  // Whether the SSD tier holds `key`; a follower re-scans the directory on its first miss of a
  // call (*rescanned tracks that).
  bool on_ssd(const std::string& key, bool* rescanned);
  // The peer hooks if they were made (null otherwise): clear() and flush() reach the HBM pages.
  PeerPages* peer_pages_if_made();

  const Config config_;
  const Role role_;
  const bool promote_;
  std::unique_ptr<SsdTier> ssd_;  // null when ssd.enabled is false
  std::unique_ptr<DramTier> dram_;
  std::unique_ptr<CopyPipeline> pipeline_;  // stops before the tiers go
  std::mutex peer_mu_;
  std::unique_ptr<PeerPages> peer_;  // declared last: goes first (its leases pin DRAM blocks)

  std::atomic<uint64_t> puts_{0}, put_bytes_{0}, gets_{0}, get_bytes_{0};
  std::atomic<uint64_t> dram_hits_{0}, ssd_hits_{0}, misses_{0}, put_refusals_{0};
};

}  // namespace mori::umbp
