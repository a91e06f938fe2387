// SPDX-License-Identifier: MIT
// The DRAM -> SSD copy (MORI's copy-on-commit; a peer's HBM pages have a pipeline of their own,
// which stages device memory through host memory): values put into DRAM reach the SSD tier from
// `worker_threads` background threads, `batch_max_ops` values per SsdTier::write_batch. A value
// stays pinned in DRAM (unevictable) until its copy is done, so nothing leaves the store before
// the SSD has it.
//
// A full queue (`queue_depth` values waiting) makes submit() copy in the caller's thread: that
// slows the put down (back-pressure) rather than dropping the copy, because a dropped copy
// would let the value be evicted from DRAM with no SSD copy behind it, which with SSD enabled
// is data loss. Such copies count in stats().sync_fallbacks.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "mori/umbp/config.h"
#include "src/dram_tier.h"
#include "src/ssd_tier.h"

namespace mori::umbp {

struct CopyPipelineStats {
  uint64_t copied = 0, failed = 0, sync_fallbacks = 0;
};

class CopyPipeline {
 public:
  // async=false (copy_pipeline.async_enabled) starts no threads: submit() copies at once.
  CopyPipeline(const CopyPipelineConfig& config, DramTier& dram, SsdTier& ssd);
  // Finishes the queued copies, then stops the threads.
  ~CopyPipeline();
  CopyPipeline(const CopyPipeline&) = delete;
  CopyPipeline& operator=(const CopyPipeline&) = delete;

  // Takes over blocks put with copy_hold (nullptr entries are skipped) and releases each once
  // its copy is done.
  void submit(const std::vector<DramTier::Block*>& blocks);
  // Copies now in the calling thread, then releases.
  void copy_now(const std::vector<DramTier::Block*>& blocks);
  // Waits until every copy submitted before the call is done.
  void drain();
  CopyPipelineStats stats() const;

 private:
  void worker();
  void copy_batch(const std::vector<DramTier::Block*>& blocks);

  const CopyPipelineConfig config_;
  DramTier& dram_;
  SsdTier& ssd_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_, idle_cv_;
  std::deque<DramTier::Block*> queue_;
  size_t in_flight_ = 0;  // taken by a worker, not yet released
  bool stopping_ = false;
  CopyPipelineStats stats_;
  std::vector<std::thread> workers_;
};

}  // namespace mori::umbp
