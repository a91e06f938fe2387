// SPDX-License-Identifier: MIT
#include "src/copy_pipeline.h"

#include <algorithm>
#include <exception>

#include "mori/core/log.h"
#include "mori/core/thread_name.h"

namespace mori::umbp {

CopyPipeline::CopyPipeline(const CopyPipelineConfig& config, DramTier& dram, SsdTier& ssd)
    : config_(config), dram_(dram), ssd_(ssd) {
  if (!config_.async_enabled) return;
  for (size_t i = 0; i < config_.worker_threads; ++i) {
    workers_.emplace_back([this] { worker(); });
    name_thread(workers_.back(), "umbp-ssd-copy");
  }
}

CopyPipeline::~CopyPipeline() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void CopyPipeline::submit(const std::vector<DramTier::Block*>& blocks) {
  if (workers_.empty()) return copy_now(blocks);
  std::vector<DramTier::Block*> overflow;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (DramTier::Block* b : blocks) {
      if (!b) continue;
      if (queue_.size() < config_.queue_depth)
        queue_.push_back(b);
      else
        overflow.push_back(b);
    }
    stats_.sync_fallbacks += overflow.size();
  }
  work_cv_.notify_all();
  if (!overflow.empty()) copy_now(overflow);
}

void CopyPipeline::copy_now(const std::vector<DramTier::Block*>& blocks) {
  std::vector<DramTier::Block*> batch;
  batch.reserve(std::min(blocks.size(), config_.batch_max_ops));
  for (DramTier::Block* b : blocks) {
    if (!b) continue;
    batch.push_back(b);
    if (batch.size() == config_.batch_max_ops) {
      copy_batch(batch);
      batch.clear();
    }
  }
  if (!batch.empty()) copy_batch(batch);
}

void CopyPipeline::copy_batch(const std::vector<DramTier::Block*>& blocks) {
  std::vector<std::string> keys;
  std::vector<const void*> datas;
  std::vector<size_t> sizes;
  keys.reserve(blocks.size());
  datas.reserve(blocks.size());
  sizes.reserve(blocks.size());
  for (const DramTier::Block* b : blocks) {
    keys.push_back(DramTier::key_of(b));
    datas.push_back(DramTier::data_of(b));
    sizes.push_back(DramTier::size_of(b));
  }
  uint64_t copied = 0;
  try {
    if (dram_.external()) {
      // Device memory (a peer's HBM pages): staged through host memory, at most kStagedBytes
      // (or one value) per SSD write, so a batch of large values does not double in host memory.
      constexpr size_t kStagedBytes = size_t{64} << 20;
      std::vector<char> staged;
      for (size_t first = 0; first < blocks.size();) {
        size_t last = first, total = 0;
        while (last < blocks.size() && (last == first || total + sizes[last] <= kStagedBytes)) total += sizes[last++];
        staged.resize(total);
        size_t off = 0;
        for (size_t i = first; i < last; ++i) {
          dram_.copy_to_host(blocks[i], staged.data() + off);
          datas[i] = staged.data() + off;
          off += sizes[i];
        }
        const std::vector<std::string> k(keys.begin() + first, keys.begin() + last);
        const std::vector<const void*> d(datas.begin() + first, datas.begin() + last);
        const std::vector<size_t> z(sizes.begin() + first, sizes.begin() + last);
        for (bool w : ssd_.write_batch(k, d, z)) copied += w ? 1 : 0;
        first = last;
      }
    } else {
      const std::vector<bool> ok = ssd_.write_batch(keys, datas, sizes);
      for (size_t i = 0; i < ok.size(); ++i) copied += ok[i] ? 1 : 0;
    }
  } catch (const std::exception& e) {
    MORI_LOG(kError, "umbp", "DRAM->SSD copy of %zu values failed: %s", blocks.size(), e.what());
  }
  // Released whatever happened: a value the SSD did not take may now be evicted (and is then
  // gone); stats().ssd_copy_failures says how many.
  dram_.release_held(blocks.data(), blocks.size());
  std::lock_guard<std::mutex> lock(mu_);
  stats_.copied += copied;
  stats_.failed += blocks.size() - copied;
}

void CopyPipeline::worker() {
  std::vector<DramTier::Block*> batch;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and every queued copy is done
    batch.clear();
    while (!queue_.empty() && batch.size() < config_.batch_max_ops) {
      batch.push_back(queue_.front());
      queue_.pop_front();
    }
    in_flight_ += batch.size();
    lock.unlock();
    copy_batch(batch);
    lock.lock();
    in_flight_ -= batch.size();
    if (queue_.empty() && in_flight_ == 0) idle_cv_.notify_all();
  }
}

void CopyPipeline::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [this] { return queue_.empty() && in_flight_ == 0; });
}

CopyPipelineStats CopyPipeline::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace mori::umbp
