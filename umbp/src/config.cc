// SPDX-License-Identifier: MIT
#include "mori/umbp/config.h"

#include <algorithm>
#include <cctype>

#include "mori/core/env.h"
#include "mori/core/status.h"

namespace mori::umbp {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

void check_watermarks(double high, double low, const char* tier) {
  MORI_CHECK_ARG(high > 0.0 && high <= 1.0 && low > 0.0 && low < high,
                 "%s watermarks must satisfy 0 < low_watermark < high_watermark <= 1 (got low %g, high %g)", tier, low,
                 high);
}

}  // namespace

Role Config::resolved_role() const {
  if (role != Role::Standalone) return role;
  if (follower_mode) return Role::SharedSSDFollower;
  if (force_ssd_copy_on_write) return Role::SharedSSDLeader;
  return Role::Standalone;
}

void Config::validate() const {
  // Distributed mode: 0 is a lookup-only node (a scheduler's: no pages, nothing routed to it).
  MORI_CHECK_ARG(dram.capacity_bytes > 0 || distributed, "dram.capacity_bytes must be > 0");
  check_watermarks(dram.high_watermark, dram.low_watermark, "dram");
  MORI_CHECK_ARG(!dram.use_hugepages || dram.hugepage_size == 0 || (dram.hugepage_size & (dram.hugepage_size - 1)) == 0,
                 "dram.hugepage_size must be a power of two (got %zu)", dram.hugepage_size);
  if (ssd.enabled) {
    MORI_CHECK_ARG(ssd.capacity_bytes > 0, "ssd.capacity_bytes must be > 0");
    MORI_CHECK_ARG(ssd.segment_size_bytes > 0, "ssd.segment_size_bytes must be > 0");
    MORI_CHECK_ARG(!ssd.storage_dir.empty(), "ssd.storage_dir must not be empty");
    check_watermarks(ssd.high_watermark, ssd.low_watermark, "ssd");
    MORI_CHECK_ARG(ssd.ssd_backend == "file" || ssd.ssd_backend == "spdk" || ssd.ssd_backend == "spdk_proxy",
                   "ssd.ssd_backend must be one of file, spdk, spdk_proxy (got '%s')", ssd.ssd_backend.c_str());
    if (ssd.ssd_backend != "file")
      raise(Status::kUnavailable,
            "ssd.ssd_backend '%s': this build has no SPDK; use 'file' (io_uring or POSIX on a file system)",
            ssd.ssd_backend.c_str());
    MORI_CHECK_ARG(ssd.io.queue_depth > 0, "ssd.io.queue_depth must be > 0");
  }
  MORI_CHECK_ARG(eviction.policy == "lru" || eviction.policy == "prefix_aware_lru",
                 "eviction.policy must be 'lru' or 'prefix_aware_lru' (got '%s')", eviction.policy.c_str());
  MORI_CHECK_ARG(eviction.candidate_window > 0, "eviction.candidate_window must be > 0");
  MORI_CHECK_ARG(copy_pipeline.queue_depth > 0, "copy_pipeline.queue_depth must be > 0");
  MORI_CHECK_ARG(copy_pipeline.worker_threads > 0, "copy_pipeline.worker_threads must be > 0");
  MORI_CHECK_ARG(copy_pipeline.batch_max_ops > 0, "copy_pipeline.batch_max_ops must be > 0");
  MORI_CHECK_ARG(!(distributed && standalone_process),
                 "distributed and standalone_process are exclusive: set one of them");
  if (distributed) {
    const auto& m = distributed->master_config;
    MORI_CHECK_ARG(!m.master_address.empty(), "distributed.master_config.master_address must not be empty");
    MORI_CHECK_ARG(!m.node_id.empty(), "distributed.master_config.node_id must not be empty");
    MORI_CHECK_ARG(!m.node_address.empty(), "distributed.master_config.node_address must not be empty");
    const auto& h = distributed->hbm;
    for (size_t i = 0; i < h.buffer_sizes.size(); ++i)
      MORI_CHECK_ARG(h.buffer_sizes[i] > 0, "distributed.hbm.buffer_sizes[%zu] must be > 0", i);
    MORI_CHECK_ARG(h.total_bytes() == 0 || h.device >= 0, "distributed.hbm.device must be >= 0 (got %d)", h.device);
  }
  if (standalone_process) {
    MORI_CHECK_ARG(!standalone_process->address.empty(), "standalone_process.address must not be empty");
    MORI_CHECK_ARG(standalone_process->startup_timeout_ms > 0, "standalone_process.startup_timeout_ms must be > 0");
  }
}

size_t HbmConfig::total_bytes() const {
  if (buffer_sizes.empty()) return capacity_bytes;
  size_t n = 0;
  for (size_t b : buffer_sizes) n += b;
  return n;
}

Config Config::from_environment() {
  const env::Settings s = env::current();
  Config c;
  c.dram.capacity_bytes = s.umbp_dram_capacity;
  c.dram.high_watermark = s.umbp_dram_high_wm;
  c.dram.low_watermark = s.umbp_dram_low_wm;
  c.dram.use_hugepages = s.umbp_dram_use_hugepages;
  c.dram.hugepage_size = s.umbp_dram_hugepage_size;
  c.dram.numa_node = static_cast<int>(s.umbp_dram_numa_node);
  c.dram.prefault = s.umbp_dram_prefault;
  c.ssd.enabled = s.umbp_ssd_enabled;
  c.ssd.storage_dir = s.umbp_ssd_dir;
  c.ssd.capacity_bytes = s.umbp_ssd_capacity;
  c.ssd.ssd_backend = s.umbp_ssd_backend;
  c.ssd.high_watermark = s.umbp_ssd_high_wm;
  c.ssd.low_watermark = s.umbp_ssd_low_wm;
  c.eviction.policy = s.umbp_eviction_policy;
  const std::string role = lower(s.umbp_role);
  if (role.empty() || role == "standalone")
    c.role = Role::Standalone;
  else if (role == "shared_ssd_leader" || role == "sharedssdleader" || role == "leader")
    c.role = Role::SharedSSDLeader;
  else if (role == "shared_ssd_follower" || role == "sharedssdfollower" || role == "follower")
    c.role = Role::SharedSSDFollower;
  else
    raise(Status::kInvalidArgument,
          "UMBP_ROLE: expected standalone, shared_ssd_leader or shared_ssd_follower, got '%s'", s.umbp_role.c_str());
  if (!s.umbp_standalone_address.empty()) {
    StandaloneProcessConfig sp;
    sp.address = s.umbp_standalone_address;
    sp.auto_start = s.umbp_standalone_auto_start;
    sp.startup_timeout_ms = static_cast<int>(s.umbp_standalone_startup_timeout_ms);
    c.standalone_process = sp;
  }
  return c;
}

}  // namespace mori::umbp
