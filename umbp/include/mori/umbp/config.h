// SPDX-License-Identifier: MIT
// MORI-UMBP's configuration: MORI's structs, fields, defaults and enum values, so that
// `mori.umbp.UMBPConfig` reads and writes exactly as in ROCm/mori (SGLang and vLLM set them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mori::umbp {

enum class TierType : int { Unknown = 0, HBM = 1, DRAM = 2, SSD = 3 };
enum class Role : int { Standalone = 0, SharedSSDLeader = 1, SharedSSDFollower = 2 };
enum class DeploymentMode : int { Local = 0, StandaloneProcess = 1, Distributed = 2 };
enum class SsdLayoutMode : int { SegmentedLog = 1 };
enum class IoBackend : int { Posix = 0, IoUring = 1 };
enum class DurabilityMode : int { Strict = 0, Relaxed = 1 };
enum class HostBufferBacking : int { Anonymous = 0, AnonymousHugetlb = 1, AnonymousShm = 2, AnonymousShmHugetlb = 3 };
enum class CacheRemoteAdmission : int { SIZE = 0, NEVER = 1, ALWAYS = 2 };

struct DramConfig {
  size_t capacity_bytes = size_t{4} << 30;
  bool use_shared_memory = false;
  std::string shm_name = "/umbp_dram";
  double high_watermark = 0.9;
  double low_watermark = 0.7;
  bool use_hugepages = false;
  size_t hugepage_size = size_t{2} << 20;
  int numa_node = -1;  // -1: no binding
  bool prefault = true;
};

struct IoConfig {
  IoBackend backend = IoBackend::IoUring;  // falls back to Posix where the kernel refuses io_uring
  size_t queue_depth = 4096;
};

struct DurabilityConfig {
  DurabilityMode mode = DurabilityMode::Strict;
  bool enable_background_gc = true;
};

struct SsdConfig {
  bool enabled = true;
  std::string storage_dir = "/tmp/umbp_ssd";
  size_t capacity_bytes = size_t{32} << 30;
  SsdLayoutMode layout_mode = SsdLayoutMode::SegmentedLog;
  size_t segment_size_bytes = size_t{256} << 20;
  double high_watermark = 0.9;
  double low_watermark = 0.7;
  IoConfig io;
  DurabilityConfig durability;
  // "file" is built; "spdk" and "spdk_proxy" are accepted as names and refused at client creation.
  std::string ssd_backend = "file";
  std::string spdk_bdev_name;
  std::string spdk_reactor_mask = "0x1";
  int spdk_mem_size_mb = 256;
  std::string spdk_nvme_pci_addr;
  std::string spdk_nvme_ctrl_name = "NVMe0";
  int spdk_io_workers = 4;
  std::string spdk_proxy_shm_name = "/umbp_spdk_proxy";
  std::string spdk_proxy_bin;
  uint32_t spdk_proxy_tenant_id = 0;
  size_t spdk_proxy_tenant_quota_bytes = 0;
  uint32_t spdk_proxy_max_channels = 8;
  size_t spdk_proxy_data_per_channel_mb = 32;
  int spdk_proxy_startup_timeout_ms = 30000;
  bool spdk_proxy_auto_start = true;
  int spdk_proxy_idle_exit_timeout_ms = 30000;
  bool spdk_proxy_allow_borrow = false;
  size_t spdk_proxy_reserved_shared_bytes = 0;
};

struct EvictionConfig {
  // "lru" and MORI's "prefix_aware_lru" both pick, among the candidate_window least recently
  // used values, the deepest radix-tree depth first: values put without a depth are plain LRU.
  std::string policy = "lru";
  size_t candidate_window = 16;
  bool auto_promote_on_read = true;
};

struct CopyPipelineConfig {
  bool async_enabled = true;
  size_t queue_depth = 4096;
  size_t worker_threads = 2;
  size_t batch_max_ops = 128;
};

struct MasterClientConfig {
  std::string master_address;
  std::string node_id;
  std::string node_address;
  bool auto_heartbeat = true;
  std::vector<std::string> tags;
};

struct IoEngineConfig {
  std::string host;
  uint16_t port = 0;  // 0: any free port
};

// A distributed worker's GPU pages (MORI's hbm section; off by default). The arena is device
// memory on `device`, registered with the worker's MORI-IO engine as GPU memory and carved like
// the DRAM arena; the master routes puts there before DRAM. MORI's peer makes one allocation per
// entry of buffer_sizes; here their sum is one allocation (one page pool). capacity_bytes is
// MORI's user-facing spelling: used when buffer_sizes is empty.
struct HbmConfig {
  int device = 0;
  size_t capacity_bytes = 0;
  std::vector<size_t> buffer_sizes;
  // The bytes of the arena (0: no HBM tier).
  size_t total_bytes() const;
};

struct DistributedConfig {
  MasterClientConfig master_config;
  HbmConfig hbm;
  IoEngineConfig io_engine;
  size_t staging_buffer_size = size_t{64} << 20;
  size_t ssd_staging_buffer_size = size_t{256} << 20;
  int ssd_staging_buffer_slots = 16;
  uint16_t peer_service_port = 0;
  bool cache_remote_fetches = true;
  CacheRemoteAdmission cache_remote_admission = CacheRemoteAdmission::SIZE;
  size_t admission_max_block_bytes = size_t{16} << 20;
  uint64_t dram_page_size = 0;  // 0: the master's default
  // MORI's later fields (vLLM's connector sets them). Remote transfers here move whole values,
  // zero-copy or through staging_buffer_size: the ranged scratch arenas and their prefetch are
  // accepted and unused; gets are always served locally first when this worker owns the key.
  size_t ranged_scratch_size = size_t{128} << 20;
  bool ranged_locality_prefetch = false;
  bool local_first = true;
  std::string backend_policy_path;
};

struct StandaloneProcessConfig {
  std::string address;  // unix:///path/to/server.sock
  bool auto_start = false;
  int startup_timeout_ms = 30000;
  std::string worker_node_id;
  std::string worker_node_address;
  std::vector<std::string> tags;
};

struct Config {
  DramConfig dram;
  SsdConfig ssd;
  EvictionConfig eviction;
  CopyPipelineConfig copy_pipeline;
  Role role = Role::Standalone;
  bool follower_mode = false;            // MORI's older spelling of Role::SharedSSDFollower
  bool force_ssd_copy_on_write = false;  // MORI's older spelling of Role::SharedSSDLeader
  std::optional<DistributedConfig> distributed;
  std::optional<StandaloneProcessConfig> standalone_process;

  // The role after the older fields are taken into account.
  Role resolved_role() const;
  // Throws mori::Error(kInvalidArgument) naming the first bad field ("ssd.capacity_bytes must be > 0").
  void validate() const;
  // MORI's defaults overlaid with the UMBP_* settings of core's env table (read afresh).
  static Config from_environment();
};

}  // namespace mori::umbp
