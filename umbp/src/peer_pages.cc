// SPDX-License-Identifier: MIT
#include "src/peer_pages.h"

#include <algorithm>
#include <thread>

#include "mori/core/env.h"
#include "mori/core/log.h"
#include "mori/core/status.h"
#include "mori/core/thread_name.h"
#include "mori/umbp/client.h"
#include "src/checksum.h"

#if MORI_WITH_CUDA
#include <cuda_runtime_api.h>

#include "mori/core/cuda_check.h"
#endif

namespace mori::umbp {

uint64_t device_checksum(const void* data, size_t size, int device) {
#if MORI_WITH_CUDA
  // Hashed piecewise from a host copy: the bytes reached device memory through the copy engine
  // (CUDA IPC) or io/'s staged tcp, and no host pass of ours saw them on the way. The streaming
  // form gives the one-shot value, so readers verify with value_checksum().
  constexpr size_t kPiece = size_t{4} << 20;
  CudaDeviceGuard guard(device);  // this thread may never have used `device`
  thread_local std::vector<char> host;
  if (host.size() < std::min(size, kPiece)) host.resize(std::min(size, kPiece));
  ValueHasher hasher;
  const char* src = static_cast<const char*>(data);
  for (size_t off = 0; off < size; off += kPiece) {
    const size_t n = std::min(kPiece, size - off);
    check_cuda(cudaMemcpy(host.data(), src + off, n, cudaMemcpyDeviceToHost), "cudaMemcpy (HBM value checksum)");
    hasher.update(host.data(), n);
  }
  return hasher.digest();
#else
  (void)data, (void)size, (void)device;
  raise(Status::kUnavailable, "device_checksum: this build of MORI has no CUDA");
#endif
}

namespace {

void device_to_host(void* host, const char* src, size_t n, int device) {
#if MORI_WITH_CUDA
  CudaDeviceGuard guard(device);  // the copy pipeline's threads never chose a device
  check_cuda(cudaMemcpy(host, src, n, cudaMemcpyDeviceToHost), "cudaMemcpy (HBM value to its SSD copy)");
#else
  (void)host, (void)src, (void)n, (void)device;
  raise(Status::kUnavailable, "device_to_host: this build of MORI has no CUDA");
#endif
}

// Flips the first n (at most 8) bytes of a freed HBM value (DramTier::invalidate).
void device_invalidate(char* p, size_t n, int device) {
#if MORI_WITH_CUDA
  CudaDeviceGuard guard(device);
  unsigned char bytes[8];
  n = std::min<size_t>(n, sizeof(bytes));
  check_cuda(cudaMemcpy(bytes, p, n, cudaMemcpyDeviceToHost), "cudaMemcpy (a freed HBM value's first bytes)");
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<unsigned char>(~bytes[i]);
  check_cuda(cudaMemcpy(p, bytes, n, cudaMemcpyHostToDevice), "cudaMemcpy (invalidating a freed HBM value)");
#else
  (void)p, (void)n, (void)device;
  raise(Status::kUnavailable, "device_invalidate: this build of MORI has no CUDA");
#endif
}

}  // namespace

PeerPages::DeviceMemory::~DeviceMemory() {
#if MORI_WITH_CUDA
  if (ptr) {
    CudaDeviceGuard guard(device, std::nothrow);
    (void)cudaFree(ptr);
  }
#endif
}

namespace {

// The HBM arena: `bytes` of device memory on `device`, or an error naming the setting.
char* alloc_hbm(const HbmConfig& hbm, size_t bytes) {
#if MORI_WITH_CUDA
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    raise(Status::kUnavailable,
          "distributed.hbm: %zu bytes of HBM asked on device %d, but CUDA sees no device here (%s): unset "
          "distributed.hbm.capacity_bytes / buffer_sizes on this worker",
          bytes, hbm.device, e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
  }
  if (hbm.device >= count)
    raise(Status::kInvalidArgument, "distributed.hbm.device is %d, but this host has %d CUDA device(s)", hbm.device,
          count);
  CudaDeviceGuard guard(hbm.device);
  void* p = nullptr;
  const cudaError_t a = cudaMalloc(&p, bytes);
  if (a != cudaSuccess) {
    (void)cudaGetLastError();
    raise(Status::kOutOfMemory, "distributed.hbm: cannot allocate %zu bytes on CUDA device %d: %s", bytes, hbm.device,
          cudaGetErrorString(a));
  }
  return static_cast<char*>(p);
#else
  raise(Status::kUnavailable,
        "distributed.hbm: %zu bytes of HBM asked on device %d, but this build of MORI has no CUDA: unset "
        "distributed.hbm.capacity_bytes / buffer_sizes, or build with a CUDA toolkit",
        bytes, hbm.device);
#endif
}

}  // namespace

PeerPages::PeerPages(DramTier& dram, SsdTier* ssd, CopyPipeline* pipeline, bool copy_sync, size_t staging_bytes,
                     int staging_slots, int dram_lease_ms, int ssd_lease_ms, const HbmConfig& hbm,
                     const DramConfig& watermarks, const EvictionConfig& eviction, const CopyPipelineConfig& copy)
    : dram_(dram),
      ssd_(ssd),
      pipeline_(pipeline),
      copy_sync_(copy_sync),
      dram_lease_(std::max(dram_lease_ms, 1)),
      ssd_lease_(std::max(ssd_lease_ms, 1)) {
  if (const size_t bytes = hbm.total_bytes()) {
    hbm_mem_.ptr = alloc_hbm(hbm, bytes);
    hbm_mem_.device = hbm.device;
    DramTier::ExternalArena a;
    a.base = hbm_mem_.ptr;
    a.capacity = bytes;
    a.tier = TierType::HBM;
    a.checksum = [device = hbm.device](const char* p, size_t n) { return device_checksum(p, n, device); };
    a.copy_to_host = [device = hbm.device](void* host, const char* p, size_t n) { device_to_host(host, p, n, device); };
    a.invalidate = [device = hbm.device](char* p, size_t n) { device_invalidate(p, n, device); };
    hbm_ = std::make_unique<DramTier>(a, watermarks, eviction);
    if (ssd_ && pipeline_) hbm_pipeline_ = std::make_unique<CopyPipeline>(copy, *hbm_, *ssd_);
  }
  if (ssd_ && staging_bytes > 0 && staging_slots > 0) {
    slot_bytes_ =
        staging_bytes / static_cast<size_t>(staging_slots) / HeapAllocator::kMinAlign * HeapAllocator::kMinAlign;
    if (slot_bytes_ == 0)
      raise(Status::kInvalidArgument,
            "distributed.ssd_staging_buffer_size (%zu) is too small for %d ssd_staging_buffer_slots", staging_bytes,
            staging_slots);
    staging_ = host_.alloc(slot_bytes_ * static_cast<size_t>(staging_slots));
    slot_busy_.assign(static_cast<size_t>(staging_slots), false);
  }
  dram_.set_event_log(&events_);
  if (hbm_) hbm_->set_event_log(&events_);
  if (ssd_) ssd_->set_event_log(&events_);
  reaper_thread_ = std::thread([this] { reaper(); });
  name_thread(reaper_thread_, "umbp-peer-reap");
}

PeerPages::~PeerPages() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  reaper_cv_.notify_all();
  reaper_thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, l] : leases_) end_lease(l);
  leases_.clear();
  for (auto& [id, p] : pending_) p.tier->abort_slot(p.block);
  pending_.clear();
  dram_.set_event_log(nullptr);
  if (hbm_) hbm_->set_event_log(nullptr);
  if (ssd_) ssd_->set_event_log(nullptr);
  host_.free(staging_);
}

void PeerPages::end_leases() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, l] : leases_) end_lease(l);
  leases_.clear();
}

void PeerPages::end_lease(Lease& l) {
  if (l.block) {
    DramTier::Block* b = l.block;
    l.tier->unpin_blocks(&b, 1);
  } else {
    for (int s = l.staging_slot; s < l.staging_slot + l.staging_count; ++s) slot_busy_[static_cast<size_t>(s)] = false;
  }
}

void PeerPages::reaper() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (pending_.empty() && leases_.empty()) {
      reaper_cv_.wait(lock);
      continue;
    }
    // Leases last hundreds of ms: a tenth of the shortest is late enough to matter little.
    reaper_cv_.wait_for(lock, std::max(std::chrono::milliseconds(5), dram_lease_ / 10));
    const auto now = Clock::now();
    for (auto it = leases_.begin(); it != leases_.end();) {
      if (it->second.deadline <= now) {
        end_lease(it->second);
        it = leases_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.deadline <= now) {
        MORI_LOG(kWarn, "umbp", "peer: the slot of '%s' was not committed within %lld ms: aborted (writer gone?)",
                 it->second.key.c_str(), static_cast<long long>(kPendingTtl.count()));
        it->second.tier->abort_slot(it->second.block);
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

DramTier* PeerPages::tier_of(int tier) { return tier == static_cast<int>(TierType::HBM) ? hbm_.get() : &dram_; }

std::vector<SlotGrant> PeerPages::allocate(const std::vector<std::string>& keys, const std::vector<uint64_t>& sizes,
                                           const std::vector<int>& tiers) {
  if (keys.size() != sizes.size())
    raise(Status::kInvalidArgument, "allocate: %zu keys but %zu sizes", keys.size(), sizes.size());
  if (!tiers.empty() && tiers.size() != keys.size())
    raise(Status::kInvalidArgument, "allocate: %zu keys but %zu tiers", keys.size(), tiers.size());
  std::vector<SlotGrant> out(keys.size());
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].empty() || keys[i].size() > kMaxKeyBytes || sizes[i] == 0) {
      out[i].outcome = SlotOutcome::Failed;
      continue;
    }
    if (ssd_ && ssd_->contains(keys[i])) {  // write-once across both tiers
      out[i].outcome = SlotOutcome::AlreadyExists;
      continue;
    }
    DramTier* tier = tier_of(tiers.empty() ? static_cast<int>(TierType::DRAM) : tiers[i]);
    if (!tier) {  // HBM asked of a peer without an HBM arena
      out[i].outcome = SlotOutcome::Failed;
      continue;
    }
    // Write-once across the memory tiers too: a key is in one arena at most.
    DramTier* other = tier == &dram_ ? hbm_.get() : &dram_;
    if (other && other->contains(keys[i])) {
      out[i].outcome = SlotOutcome::AlreadyExists;
      continue;
    }
    DramTier::PutOutcome o;
    DramTier::Block* b = tier->reserve_slot(keys[i], sizes[i], &o);
    if (!b) {
      out[i].outcome = o == DramTier::PutOutcome::kExists ? SlotOutcome::AlreadyExists : SlotOutcome::NoSpace;
      continue;
    }
    const uint64_t id = next_id_++;
    pending_.emplace(id, Pending{tier, b, keys[i], Clock::now() + kPendingTtl});
    out[i] = {SlotOutcome::Allocated, id, DramTier::offset_of(b)};
  }
  reaper_cv_.notify_all();
  return out;
}

std::vector<bool> PeerPages::commit(const std::vector<uint64_t>& slot_ids, const std::vector<std::string>& keys) {
  if (keys.size() != slot_ids.size())
    raise(Status::kInvalidArgument, "commit: %zu slot ids but %zu keys", slot_ids.size(), keys.size());
  std::vector<bool> ok(slot_ids.size(), false);
  std::vector<DramTier::Block*> mine(slot_ids.size(), nullptr);
  std::vector<DramTier*> tiers(slot_ids.size(), nullptr);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < slot_ids.size(); ++i) {
      auto it = pending_.find(slot_ids[i]);
      if (it == pending_.end() || it->second.key != keys[i]) continue;
      mine[i] = it->second.block;
      tiers[i] = it->second.tier;
      pending_.erase(it);
    }
  }
  // Checksums and publication outside mu_: a large value takes a while to hash.
  std::vector<DramTier::Block*> held_at(mine.size(), nullptr);
  std::vector<char> published(mine.size(), 0);
  // The DRAM values' checksums first, their chunks side by side on the team (a single large
  // value too); HBM values are hashed by their tier through host copies.
  std::vector<size_t> dram_at;
  std::vector<const char*> dram_ptrs;
  std::vector<uint64_t> dram_sizes;
  if (dram_.takes_checksums())
    for (size_t i = 0; i < mine.size(); ++i)
      if (mine[i] && tiers[i] == &dram_) {
        dram_at.push_back(i);
        dram_ptrs.push_back(static_cast<const char*>(DramTier::data_of(mine[i])));
        dram_sizes.push_back(DramTier::size_of(mine[i]));
      }
  const std::vector<uint64_t> sums = value_checksums(dram_ptrs, dram_sizes);
  std::vector<const uint64_t*> sum_of(mine.size(), nullptr);
  for (size_t k = 0; k < dram_at.size(); ++k) sum_of[dram_at[k]] = &sums[k];
  auto commit_one = [&](size_t i) {
    bool pub = false;
    // Held (pinned) for its SSD copy: DRAM blocks by the store's pipeline, HBM ones by hbm_pipeline_.
    const bool hold = tiers[i] == &dram_ ? pipeline_ != nullptr : hbm_pipeline_ != nullptr;
    held_at[i] = tiers[i]->commit_slot(mine[i], hold, &pub, sum_of[i]);
    published[i] = pub;
  };
  for (size_t i = 0; i < mine.size(); ++i)
    if (mine[i] && tiers[i] == &dram_) commit_one(i);
  std::vector<DramTier::Block*> held, held_hbm;
  for (size_t i = 0; i < mine.size(); ++i) {
    if (mine[i] && tiers[i] != &dram_) commit_one(i);
    ok[i] = published[i] != 0;
    if (held_at[i]) (tiers[i] == &dram_ ? held : held_hbm).push_back(held_at[i]);
  }
  if (pipeline_ && !held.empty()) {
    if (copy_sync_)
      pipeline_->copy_now(held);
    else
      pipeline_->submit(held);
  }
  if (hbm_pipeline_ && !held_hbm.empty()) {
    if (copy_sync_)
      hbm_pipeline_->copy_now(held_hbm);
    else
      hbm_pipeline_->submit(held_hbm);
  }
  return ok;
}

std::vector<bool> PeerPages::verify(const std::vector<uintptr_t>& ptrs, const std::vector<uint64_t>& sizes,
                                    const std::vector<uint64_t>& checksums) {
  if (ptrs.size() != sizes.size() || ptrs.size() != checksums.size())
    raise(Status::kInvalidArgument, "verify: %zu ptrs, %zu sizes and %zu checksums differ in length", ptrs.size(),
          sizes.size(), checksums.size());
  std::vector<const char*> at(ptrs.size());
  for (size_t i = 0; i < ptrs.size(); ++i) at[i] = reinterpret_cast<const char*>(ptrs[i]);
  const std::vector<uint64_t> sums = value_checksums(at, sizes);
  std::vector<bool> match(ptrs.size());
  for (size_t i = 0; i < ptrs.size(); ++i) match[i] = sums[i] == checksums[i];
  return match;
}

std::vector<uint64_t> PeerPages::value_checksums(const std::vector<const char*>& ptrs,
                                                 const std::vector<uint64_t>& sizes) {
  // One task per checksum chunk (checksum.h): a large value's chunks are hashed side by side too.
  struct Task {
    size_t value;
    uint64_t off, len;
  };
  std::vector<Task> tasks;
  std::vector<size_t> first(ptrs.size() + 1);
  uint64_t bytes = 0;
  for (size_t i = 0; i < ptrs.size(); ++i) {
    first[i] = tasks.size();
    bytes += sizes[i];
    for (uint64_t off = 0; off == 0 || off < sizes[i]; off += kChecksumChunk)
      tasks.push_back({i, off, std::min<uint64_t>(kChecksumChunk, sizes[i] - off)});
  }
  first[ptrs.size()] = tasks.size();
  std::vector<uint64_t> digests(tasks.size());
  for_each_value(tasks.size(), bytes, [&](int t) {
    const Task& k = tasks[static_cast<size_t>(t)];
    digests[t] = chunk_checksum(ptrs[k.value] + k.off, k.len);
  });
  std::vector<uint64_t> sums(ptrs.size());
  for (size_t i = 0; i < ptrs.size(); ++i)
    sums[i] = sizes[i] <= kChecksumChunk
                  ? digests[first[i]]
                  : combine_chunk_checksums(&digests[first[i]], first[i + 1] - first[i], sizes[i]);
  return sums;
}

void PeerPages::for_each_value(size_t n, uint64_t bytes, const std::function<void(int)>& fn) {
  // MORI_COPY_THREADS (the team UMBP's large copies use; 1: hash on the caller's thread), else
  // the host's cores up to 8, counted once (hardware_concurrency() reads sysfs on every call).
  static const int cores = static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 8));
  const int64_t set = env::get().copy_threads;
  const int threads = set > 0 ? static_cast<int>(std::min<int64_t>(set, 64)) : cores;
  std::unique_lock<std::mutex> team_lock(team_mu_, std::defer_lock);
  if (n < 2 || threads < 2 || bytes < kParallelHashMin || !team_lock.try_lock()) {
    for (size_t i = 0; i < n; ++i) fn(static_cast<int>(i));
    return;
  }
  if (!team_) team_ = std::make_unique<ThreadTeam>(threads);
  team_->run(static_cast<int>(n), fn);
}

std::vector<bool> PeerPages::abort(const std::vector<uint64_t>& slot_ids) {
  std::lock_guard<std::mutex> lock(mu_);
  for (uint64_t id : slot_ids) {
    auto it = pending_.find(id);
    if (it == pending_.end()) continue;
    it->second.tier->abort_slot(it->second.block);
    pending_.erase(it);
  }
  return std::vector<bool>(slot_ids.size(), true);
}

std::vector<ResolvedValue> PeerPages::resolve(const std::vector<std::string>& keys) {
  std::vector<ResolvedValue> out(keys.size());
  std::vector<DramTier::Block*> pinned(keys.size(), nullptr);
  std::vector<DramTier*> pinned_in(keys.size(), nullptr);
  for (size_t i = 0; i < keys.size(); ++i) {
    DramTier::Block* b = hbm_ ? hbm_->pin(keys[i]) : nullptr;  // the fastest tier first, as the master's routes
    if (b) {
      pinned_in[i] = hbm_.get();
      out[i] = {true, TierType::HBM, DramTier::offset_of(b), DramTier::size_of(b), DramTier::checksum_of(b), 0};
    } else if ((b = dram_.pin(keys[i]))) {
      pinned_in[i] = &dram_;
      out[i] = {true, TierType::DRAM, DramTier::offset_of(b), DramTier::size_of(b), DramTier::checksum_of(b), 0};
    }
    if (b) {
      pinned[i] = b;
    } else if (ssd_) {
      const uint64_t size = ssd_->value_size(keys[i]);
      if (size) out[i] = {true, TierType::SSD, 0, size, 0, 0};
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  const auto deadline = Clock::now() + dram_lease_;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!pinned[i]) continue;
    out[i].lease_id = next_id_++;
    leases_.emplace(out[i].lease_id, Lease{pinned_in[i], pinned[i], -1, 0, deadline});
  }
  reaper_cv_.notify_all();
  return out;
}

StagedValue PeerPages::prepare_ssd_read(const std::string& key, uint64_t max_size) {
  StagedValue out;
  if (!ssd_) {
    out.outcome = StageOutcome::NotFound;
    return out;
  }
  const uint64_t size = ssd_->value_size(key);
  if (size == 0) {
    out.outcome = StageOutcome::NotFound;
    return out;
  }
  // A value larger than one slot takes adjacent slots: the reader reads it in one transfer.
  const size_t count = (size + slot_bytes_ - 1) / slot_bytes_;
  if (count > slot_busy_.size() || (max_size && size > max_size)) {
    out.outcome = StageOutcome::SizeTooLarge;
    out.size = size;
    return out;
  }
  int slot = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    size_t run = 0;
    for (size_t s = 0; s < slot_busy_.size(); ++s) {
      run = slot_busy_[s] ? 0 : run + 1;
      if (run == count) {
        slot = static_cast<int>(s + 1 - count);
        std::fill_n(slot_busy_.begin() + slot, count, true);
        break;
      }
    }
  }
  if (slot < 0) {
    out.outcome = StageOutcome::NoSlot;  // not enough adjacent slots free: the reader retries
    return out;
  }
  char* dst = static_cast<char*>(staging_.ptr) + static_cast<size_t>(slot) * slot_bytes_;
  bool read = false;
  try {
    read = ssd_->read(key, dst, size);  // checksum verified against the record
  } catch (const std::exception& e) {
    MORI_LOG(kWarn, "umbp", "peer: staging '%s' from the SSD failed: %s", key.c_str(), e.what());
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!read) {
    std::fill_n(slot_busy_.begin() + slot, count, false);
    out.outcome = ssd_->contains(key) ? StageOutcome::Error : StageOutcome::NotFound;
    return out;
  }
  out.outcome = StageOutcome::Ok;
  out.offset = static_cast<uint64_t>(slot) * slot_bytes_;
  out.size = size;
  out.checksum = value_checksum(dst, size);
  out.lease_id = next_id_++;
  leases_.emplace(out.lease_id, Lease{nullptr, nullptr, slot, static_cast<int>(count), Clock::now() + ssd_lease_});
  reaper_cv_.notify_all();
  return out;
}

void PeerPages::drain_hbm_copies() {
  if (hbm_pipeline_) hbm_pipeline_->drain();
}

void PeerPages::clear_hbm() {
  drain_hbm_copies();
  if (hbm_) hbm_->clear();
}

std::vector<bool> PeerPages::hbm_get(const std::vector<std::string>& keys, const std::vector<uintptr_t>& dsts,
                                     const std::vector<uint64_t>& sizes) {
  std::vector<bool> hits(keys.size(), false);
  if (!hbm_) return hits;
#if MORI_WITH_CUDA
  CudaDeviceGuard guard(hbm_mem_.device);
  for (size_t i = 0; i < keys.size(); ++i) {
    DramTier::Block* b = hbm_->pin(keys[i]);  // no eviction frees it while it is copied out
    if (!b) continue;
    const size_t size = DramTier::size_of(b);
    const cudaError_t e =
        size == sizes[i] ? cudaMemcpy(reinterpret_cast<void*>(dsts[i]), DramTier::data_of(b), size, cudaMemcpyDefault)
                         : cudaErrorInvalidValue;
    if (size == sizes[i] && e != cudaSuccess) {
      (void)cudaGetLastError();
      MORI_LOG(kWarn, "umbp", "peer: reading '%s' from HBM failed: %s", keys[i].c_str(), cudaGetErrorString(e));
    }
    hits[i] = e == cudaSuccess;
    hbm_->unpin_blocks(&b, 1);
  }
#else
  (void)dsts, (void)sizes;
#endif
  return hits;
}

std::vector<int> PeerPages::hbm_put(const std::vector<std::string>& keys, const std::vector<uintptr_t>& srcs,
                                    const std::vector<uint64_t>& sizes) {
  if (keys.size() != srcs.size() || keys.size() != sizes.size())
    raise(Status::kInvalidArgument, "hbm_put: %zu keys, %zu srcs, %zu sizes", keys.size(), srcs.size(), sizes.size());
  std::vector<int> out(keys.size(), static_cast<int>(SlotOutcome::Failed));
  if (!hbm_) return out;
  const std::vector<SlotGrant> grants =
      allocate(keys, sizes, std::vector<int>(keys.size(), static_cast<int>(TierType::HBM)));
  std::vector<uint64_t> ids, aborted;
  std::vector<std::string> ks;
  std::vector<size_t> idx;
#if MORI_WITH_CUDA
  CudaDeviceGuard guard(hbm_mem_.device);
#endif
  for (size_t i = 0; i < keys.size(); ++i) {
    out[i] = static_cast<int>(grants[i].outcome);
    if (grants[i].outcome != SlotOutcome::Allocated) continue;
#if MORI_WITH_CUDA
    const cudaError_t e = cudaMemcpy(hbm_mem_.ptr + grants[i].offset, reinterpret_cast<const void*>(srcs[i]), sizes[i],
                                     cudaMemcpyDefault);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      MORI_LOG(kWarn, "umbp", "peer: writing '%s' into HBM failed: %s", keys[i].c_str(), cudaGetErrorString(e));
      aborted.push_back(grants[i].slot_id);
      out[i] = static_cast<int>(SlotOutcome::Failed);
      continue;
    }
#endif
    ids.push_back(grants[i].slot_id);
    ks.push_back(keys[i]);
    idx.push_back(i);
  }
  if (!aborted.empty()) abort(aborted);
  const std::vector<bool> ok = commit(ids, ks);
  for (size_t j = 0; j < idx.size(); ++j)
    if (!ok[j]) out[idx[j]] = static_cast<int>(SlotOutcome::Failed);
  return out;
}

bool PeerPages::release(uint64_t lease_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return false;
  end_lease(it->second);
  leases_.erase(it);
  return true;
}

std::vector<uint64_t> PeerPages::evict(const std::vector<std::string>& keys) {
  std::vector<uint64_t> freed(keys.size(), 0);
  // EvictKey names keys, not tiers: a key lives in one arena at most (allocate() keeps it so).
  for (size_t i = 0; i < keys.size(); ++i) freed[i] = (hbm_ ? hbm_->evict_key(keys[i]) : 0) + dram_.evict_key(keys[i]);
  return freed;
}

std::vector<uint64_t> PeerPages::remove(const std::vector<std::string>& keys) {
  if (pipeline_) pipeline_->drain();
  drain_hbm_copies();
  std::vector<uint64_t> freed(keys.size(), 0);
  for (size_t i = 0; i < keys.size(); ++i) {
    for (DramTier* tier : {&dram_, hbm_.get()}) {
      if (!tier) continue;
      // Held by this call while it is dropped and its leases end: freed (and its bytes made to
      // fail their checksum) when the last holder lets go, here.
      DramTier::Block* b = tier->pin(keys[i]);
      if (!b) continue;
      freed[i] += DramTier::size_of(b);
      tier->remove(keys[i]);
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto it = leases_.begin(); it != leases_.end();) {
          if (it->second.block == b) {
            end_lease(it->second);
            it = leases_.erase(it);
          } else {
            ++it;
          }
        }
      }
      tier->unpin_blocks(&b, 1);
    }
    if (ssd_) {
      const size_t on_ssd = ssd_->value_size(keys[i]);
      if (on_ssd && ssd_->remove(keys[i])) freed[i] += on_ssd;
    }
  }
  return freed;
}

std::pair<uint64_t, std::vector<OwnedKey>> PeerPages::snapshot() {
  const uint64_t baseline = events_.mark_and_drop();
  std::vector<OwnedKey> keys;
  for (auto& v : dram_.snapshot()) keys.push_back({std::move(v.key), TierType::DRAM, v.size, v.offset, v.checksum});
  if (hbm_)
    for (auto& v : hbm_->snapshot()) keys.push_back({std::move(v.key), TierType::HBM, v.size, v.offset, v.checksum});
  if (ssd_)
    for (auto& [k, size] : ssd_->snapshot()) keys.push_back({std::move(k), TierType::SSD, size});
  return {baseline, std::move(keys)};
}

size_t PeerPages::leases() const {
  std::lock_guard<std::mutex> lock(mu_);
  return leases_.size();
}

size_t PeerPages::pending_slots() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.size();
}

}  // namespace mori::umbp
