// SPDX-License-Identifier: MIT
#include "src/location_cache.h"

#include <algorithm>
#include <optional>

#include "mori/core/log.h"
#include "src/arrival_checksums.h"

namespace mori::umbp {

namespace {

LocationCache::Clock::time_point from_seconds(double s) {
  return LocationCache::Clock::time_point(
      std::chrono::duration_cast<LocationCache::Clock::duration>(std::chrono::duration<double>(s)));
}

double to_seconds(LocationCache::Clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

}  // namespace

void LocationCache::remember(const std::string& node_id, const std::string& address, const io::MemoryDesc& arena,
                             const std::vector<std::string>& keys, const std::vector<uint64_t>& offsets,
                             const std::vector<uint64_t>& sizes, const std::vector<uint64_t>& checksums,
                             double expires) {
  const size_t n = std::min({keys.size(), offsets.size(), sizes.size(), checksums.size()});
  const Clock::time_point until = from_seconds(expires);
  std::lock_guard<std::mutex> lock(mu_);
  auto& owner = owners_[node_id];
  if (!owner || owner->address != address || !(owner->arena == arena))
    owner = std::make_shared<const Owner>(Owner{node_id, address, arena});
  for (size_t i = 0; i < n; ++i) {
    auto it = entries_.find(keys[i]);
    if (it != entries_.end()) {
      lru_.splice(lru_.end(), lru_, it->second.lru);  // the most recently remembered
    } else {
      lru_.push_back(keys[i]);
      it = entries_.emplace(keys[i], Entry{}).first;
      it->second.lru = std::prev(lru_.end());
    }
    Entry& e = it->second;
    e.owner = owner;
    e.offset = offsets[i];
    e.size = sizes[i];
    e.checksum = checksums[i];
    e.expires = until;
  }
  while (entries_.size() > capacity_) erase_locked(entries_.find(lru_.front()));
}

void LocationCache::forget_owner(const std::string& node_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (owners_.erase(node_id) == 0) return;
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (it->second.owner->node_id == node_id) erase_locked(it);
    it = next;
  }
}

void LocationCache::forget(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& k : keys) {
    auto it = entries_.find(k);
    if (it != entries_.end()) erase_locked(it);
  }
}

size_t LocationCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

void LocationCache::add_region(uintptr_t ptr, uint64_t size, const io::MemoryDesc& desc) {
  std::lock_guard<std::mutex> lock(mu_);
  regions_.push_back(Region{ptr, size, desc});
}

void LocationCache::remove_region(uintptr_t ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  regions_.erase(std::remove_if(regions_.begin(), regions_.end(), [&](const Region& r) { return r.ptr == ptr; }),
                 regions_.end());
}

bool LocationCache::peek(const std::string& key, Place* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  const Entry& e = it->second;
  *out = Place{e.owner->node_id, e.owner->address, e.offset, e.size, e.checksum, to_seconds(e.expires)};
  return true;
}

std::vector<bool> LocationCache::holds(const std::vector<std::string>& keys) const {
  std::vector<bool> out(keys.size(), false);
  const Clock::time_point now = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = entries_.find(keys[i]);
    if (it == entries_.end() || it->second.expires <= now) continue;
    auto owner = owners_.find(it->second.owner->node_id);
    out[i] = owner != owners_.end() && owner->second == it->second.owner;
  }
  return out;
}

bool LocationCache::adjust(const std::string& key, int64_t offset, double expires) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  if (offset >= 0) it->second.offset = static_cast<uint64_t>(offset);
  if (expires >= 0) it->second.expires = from_seconds(expires);
  return true;
}

void LocationCache::erase_locked(std::unordered_map<std::string, Entry>::iterator it) {
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

int LocationCache::region_of_locked(uintptr_t ptr, uint64_t size) const {
  for (size_t r = 0; r < regions_.size(); ++r)
    if (regions_[r].ptr <= ptr && ptr + size <= regions_[r].ptr + regions_[r].size) return static_cast<int>(r);
  return -1;
}

LocationCache::Result LocationCache::read(io::Engine& engine, const std::vector<std::string>& keys,
                                          const std::vector<uintptr_t>& ptrs, const std::vector<uint64_t>& sizes,
                                          const std::vector<uint32_t>& idx, int64_t timeout_ms,
                                          const Verifier& verify) {
  struct Job {
    uint32_t i;
    uint64_t offset, checksum;
  };
  // One owner's transfer: a pair per local region (one in the usual case: the caller's pool).
  struct Batch {
    std::shared_ptr<const Owner> owner;
    std::vector<int> regions;
    std::vector<io::MemoryDesc> locals;
    std::vector<io::Segments> segs;
    std::vector<std::vector<Job>> jobs;
    std::vector<io::TransferStatus> statuses;
    std::string failure;
  };
  Result r;
  std::vector<Batch> batches;
  const size_t n = idx.empty() ? keys.size() : idx.size();
  const Clock::time_point now = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t j = 0; j < n; ++j) {
      const uint32_t i = idx.empty() ? static_cast<uint32_t>(j) : idx[j];
      auto it = entries_.find(keys[i]);
      if (it == entries_.end()) {
        r.rest.push_back(i);
        continue;
      }
      const Entry& e = it->second;
      auto owner = owners_.find(e.owner->node_id);
      if (e.expires <= now || e.size != sizes[i] || owner == owners_.end() || owner->second != e.owner) {
        erase_locked(it);  // out of its lease, another size, or learnt from an owner since replaced
        r.rest.push_back(i);
        continue;
      }
      const int reg = region_of_locked(ptrs[i], sizes[i]);
      if (reg < 0) {
        r.other.push_back(i);
        r.other_places.push_back(
            Place{e.owner->node_id, e.owner->address, e.offset, e.size, e.checksum, to_seconds(e.expires)});
        continue;
      }
      auto b = std::find_if(batches.begin(), batches.end(), [&](const Batch& x) { return x.owner == e.owner; });
      if (b == batches.end()) b = batches.insert(batches.end(), Batch{e.owner, {}, {}, {}, {}, {}, {}});
      auto g = std::find(b->regions.begin(), b->regions.end(), reg);
      const size_t k = g - b->regions.begin();
      if (g == b->regions.end()) {
        b->regions.push_back(reg);
        b->locals.push_back(regions_[reg].desc);
        b->segs.emplace_back();
        b->jobs.emplace_back();
      }
      b->segs[k].local_offsets.push_back(ptrs[i] - regions_[reg].ptr);
      b->segs[k].remote_offsets.push_back(e.offset);
      b->segs[k].sizes.push_back(sizes[i]);
      b->jobs[k].push_back(Job{i, e.offset, e.checksum});
    }
  }
  if (batches.empty()) return r;

  // The values' checksums hashed as they land, value i at observed[i] (-1: not read here).
  std::vector<int32_t> observed(keys.size(), -1);
  std::vector<uintptr_t> optrs;
  std::vector<uint64_t> osizes;
  for (const Batch& b : batches)
    for (const auto& jobs : b.jobs)
      for (const Job& job : jobs) {
        observed[job.i] = static_cast<int32_t>(optrs.size());
        optrs.push_back(ptrs[job.i]);
        osizes.push_back(sizes[job.i]);
      }
  auto arrival = std::make_shared<ArrivalChecksums>(optrs, osizes);

  // Every owner's transfer is posted before any is waited for: they run side by side.
  const Clock::time_point deadline = now + std::chrono::milliseconds(timeout_ms);
  for (Batch& b : batches) {
    std::vector<uint64_t> uids(b.locals.size());
    for (auto& u : uids) u = engine.allocate_transfer_uid();
    try {
      b.statuses = engine.batch(true, b.locals, std::vector<io::MemoryDesc>(b.locals.size(), b.owner->arena), b.segs,
                                uids, arrival);
    } catch (const std::exception& e) {  // refused here (a range): ours, the peer not at fault
      MORI_LOG(kWarn, "umbp", "located read from %s refused: %s", b.owner->node_id.c_str(), e.what());
    }
  }
  std::vector<uintptr_t> vptrs;
  std::vector<uint64_t> vsizes, vsums;
  std::vector<uint32_t> arrived;  // to hash from memory
  std::vector<bool> ok(keys.size(), false);
  for (Batch& b : batches) {
    for (size_t k = 0; k < std::min(b.statuses.size(), b.jobs.size()); ++k) {
      const int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      const io::StatusCode code = b.statuses[k].WaitFor(std::max<int64_t>(1, left));
      if (code == io::StatusCode::SUCCESS) {
        for (const Job& job : b.jobs[k]) {
          if (std::optional<uint64_t> sum = arrival->checksum(static_cast<size_t>(observed[job.i]))) {
            ++r.on_arrival;
            ok[job.i] = *sum == job.checksum;
            continue;
          }
          arrived.push_back(job.i);
          vptrs.push_back(ptrs[job.i]);
          vsizes.push_back(sizes[job.i]);
          vsums.push_back(job.checksum);
        }
      } else if (code == io::StatusCode::ERR_INVALID_ARGS) {
        MORI_LOG(kWarn, "umbp", "located read from %s refused: %s", b.owner->node_id.c_str(),
                 b.statuses[k].Message().c_str());
      } else if (b.failure.empty()) {
        b.failure = b.statuses[k].Message();
        if (b.failure.empty())
          b.failure =
              "no completion within UMBP_CALL_TIMEOUT_MS (code " + std::to_string(static_cast<uint32_t>(code)) + ")";
      }
    }
    if (!b.failure.empty()) r.failed.push_back({b.owner->node_id, b.owner->address, b.failure});
  }
  const std::vector<bool> good = arrived.empty() ? std::vector<bool>{} : verify(vptrs, vsizes, vsums);
  for (size_t j = 0; j < arrived.size(); ++j)
    if (j < good.size() && good[j]) ok[arrived[j]] = true;
  for (const Batch& b : batches)
    for (const auto& jobs : b.jobs)
      for (const Job& job : jobs)
        if (ok[job.i]) {
          r.got.push_back(job.i);
          r.got_bytes += sizes[job.i];
        }
  // What was not read and verified: a stale place (its block reused: the checksum tells) or a
  // failed read; forgotten, unless remembered anew meanwhile, and left to the routed path.
  std::lock_guard<std::mutex> lock(mu_);
  for (const Batch& b : batches)
    for (const auto& jobs : b.jobs)
      for (const Job& job : jobs) {
        if (ok[job.i]) continue;
        ++r.stale;
        r.rest.push_back(job.i);
        auto it = entries_.find(keys[job.i]);
        if (it != entries_.end() && it->second.owner == b.owner && it->second.offset == job.offset &&
            it->second.checksum == job.checksum)
          erase_locked(it);
      }
  std::sort(r.rest.begin(), r.rest.end());
  return r;
}

void LocationCache::tally(const Result& r) {
  std::lock_guard<std::mutex> lk(tally_mu_);
  tally_.got += r.got.size();
  tally_.stale += r.stale;
  tally_.on_arrival += r.on_arrival;
  tally_.got_bytes += r.got_bytes;
}

LocationCache::Tally LocationCache::tallied() const {
  std::lock_guard<std::mutex> lk(tally_mu_);
  return tally_;
}

}  // namespace mori::umbp
