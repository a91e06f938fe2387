// SPDX-License-Identifier: MIT
// The data-plane client every deployment mode implements (MORI's IUMBPClient): a key -> bytes
// store that copies values from and to caller memory. Thread-safe; no method holds the GIL
// (bindings release it), and none waits without a deadline.
//
// Semantics (as MORI's tests pin them, plus ours):
//   - a put of a key that exists keeps the original value and returns true (write-once);
//   - get fails (false, nothing written) on a miss, or when `size` is not the stored size;
//   - a value whose checksum does not match is a miss and counts in stats().corrupt_reads;
//   - bad arguments (null pointer, size 0, mismatched batch lengths, key over kMaxKeyBytes)
//     throw mori::Error(kInvalidArgument) naming the argument, before anything is written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mori/umbp/config.h"

namespace mori::umbp {

// The SSD tier keeps a key and its record header in one 4 KiB block (ssd_record.h).
constexpr size_t kMaxKeyBytes = 4032;

struct ExternalKvMatch {
  std::string node_id;
  std::string peer_address;
  std::vector<std::pair<TierType, std::vector<std::string>>> hashes_by_tier;
};

struct ExternalKvHitCount {
  std::string hash;
  uint64_t hit_count_total = 0;
};

// Counters a client (or the server behind it) keeps; every field only grows except the gauges.
struct ClientStats {
  uint64_t puts = 0, put_bytes = 0, gets = 0, get_bytes = 0;
  uint64_t dram_hits = 0, ssd_hits = 0, misses = 0;
  uint64_t corrupt_reads = 0;  // checksum mismatches, served as misses
  uint64_t dram_evictions = 0, ssd_evictions = 0;
  uint64_t put_refusals = 0;  // puts no tier could take
  uint64_t ssd_copies = 0, ssd_copy_failures = 0;
  uint64_t dram_used_bytes = 0, dram_capacity_bytes = 0, dram_keys = 0;  // gauges
  uint64_t dram_pinned_bytes = 0;  // gauge: of dram_used_bytes, what no eviction can free now
  uint64_t ssd_used_bytes = 0, ssd_capacity_bytes = 0, ssd_keys = 0;  // gauges
};

class Client {
 public:
  virtual ~Client() = default;

  virtual bool put(const std::string& key, const void* src, size_t size) = 0;
  virtual bool get(const std::string& key, void* dst, size_t size) = 0;
  virtual bool exists(const std::string& key) = 0;

  // `depths` empty, or one per key: the key's radix-tree depth (deeper goes first on eviction;
  // -1 = plain LRU).
  virtual std::vector<bool> batch_put(const std::vector<std::string>& keys, const std::vector<uintptr_t>& srcs,
                                      const std::vector<size_t>& sizes, const std::vector<int>& depths) = 0;
  virtual std::vector<bool> batch_get(const std::vector<std::string>& keys, const std::vector<uintptr_t>& dsts,
                                      const std::vector<size_t>& sizes) = 0;
  virtual std::vector<bool> batch_exists(const std::vector<std::string>& keys) = 0;
  // Length of the prefix of `keys` that exists (stops at the first miss).
  virtual size_t batch_exists_consecutive(const std::vector<std::string>& keys) = 0;

  virtual bool clear() = 0;
  virtual bool flush() = 0;  // everything put so far is on the SSD tier (when enabled)
  virtual DeploymentMode deployment_mode() const = 0;
  bool is_distributed() const { return deployment_mode() == DeploymentMode::Distributed; }

  // Memory the client may reach without a staging copy (the per-host server maps it).
  virtual bool register_memory(void* ptr, size_t size) = 0;
  virtual void deregister_memory(void* ptr) = 0;

  // External-KV index (distributed mode; the local client keeps none and answers empty).
  virtual bool report_external_kv_blocks(const std::vector<std::string>& hashes, TierType tier) = 0;
  virtual bool revoke_external_kv_blocks(const std::vector<std::string>& hashes, TierType tier) = 0;
  virtual bool revoke_all_external_kv_blocks_at_tier(TierType tier) = 0;
  virtual std::vector<ExternalKvMatch> match_external_kv(const std::vector<std::string>& hashes, bool count_as_hit) = 0;
  virtual std::vector<ExternalKvHitCount> get_external_kv_hit_counts(const std::vector<std::string>& hashes) = 0;

  virtual ClientStats stats() const = 0;
};

// The client `config` asks for: standalone_process set -> a client of the per-host server;
// distributed set -> refused until part 2; else the in-process local store. Validates first.
std::unique_ptr<Client> create_client(const Config& config);

}  // namespace mori::umbp
