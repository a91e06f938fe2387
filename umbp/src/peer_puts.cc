// SPDX-License-Identifier: MIT
// The owner's side of a pulled put (peer_puts.h).
#include "src/peer_puts.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "mori/core/log.h"

namespace mori::umbp {

namespace {
using Clock = std::chrono::steady_clock;
constexpr int32_t kTierUnknown = 0, kTierDram = 2;
}  // namespace

PeerPuts::PeerPuts(Store store, io::Engine& engine, io::MemoryDesc arena, Wakeup* wake, int64_t transfer_timeout_ms)
    : store_(std::move(store)),
      engine_(engine),
      arena_(std::move(arena)),
      wake_(wake),
      transfer_timeout_ms_(transfer_timeout_ms) {}

void PeerPuts::remember_source(const std::string& packed, io::MemoryDesc desc) {
  std::lock_guard<std::mutex> lk(mu_);
  if (sources_.size() >= kMaxSources) sources_.clear();  // writers come and go; the live ones come back
  sources_[packed] = std::move(desc);
}

void PeerPuts::hold_next(int count, double past_s) {
  std::lock_guard<std::mutex> lk(mu_);
  hold_count_ = count;
  hold_past_s_ = past_s;
}

double PeerPuts::take_hold() {
  std::lock_guard<std::mutex> lk(mu_);
  if (hold_count_ <= 0) return -1;
  --hold_count_;
  return hold_past_s_;
}

size_t PeerPuts::sources() const {
  std::lock_guard<std::mutex> lk(mu_);
  return sources_.size();
}

bool PeerPuts::run(const std::vector<Entry>& entries, const std::vector<std::string>& sources, double time_left_s,
                   std::vector<Grant>& out) {
  const Clock::time_point start = Clock::now();
  for (const Entry& e : entries)
    if (e.tier != kTierUnknown && e.tier != kTierDram) return false;
  std::vector<io::MemoryDesc> descs(sources.size());
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (size_t s = 0; s < sources.size(); ++s) {
      auto it = sources_.find(sources[s]);
      if (it == sources_.end()) return false;  // a writer's buffer first seen: Python unpacks it
      descs[s] = it->second;
    }
  }
  std::vector<std::string> keys;
  std::vector<uint64_t> sizes;
  std::vector<int> tiers;
  for (const Entry& e : entries) {
    keys.push_back(e.key);
    sizes.push_back(e.size);
    tiers.push_back(e.tier);
  }
  out.assign(entries.size(), Grant{});
  const std::vector<SlotGrant> grants = store_.allocate(keys, sizes, tiers);
  std::map<uint32_t, std::vector<size_t>> by_source;
  for (size_t j = 0; j < entries.size() && j < grants.size(); ++j) {
    out[j].slot = grants[j];
    if (grants[j].outcome == SlotOutcome::Allocated && entries[j].source_ref > 0 &&
        entries[j].source_ref <= sources.size())
      by_source[entries[j].source_ref].push_back(j);
  }
  const auto left_s = [&] { return time_left_s - std::chrono::duration<double>(Clock::now() - start).count(); };
  bool committed_any = false;
  for (const auto& [ref, js] : by_source) {
    io::Segments segs;
    for (size_t j : js) {
      segs.local_offsets.push_back(grants[j].offset);
      segs.remote_offsets.push_back(entries[j].source_offset);
      segs.sizes.push_back(entries[j].size);
    }
    if (const double past_s = take_hold(); past_s >= 0)
      std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, left_s()) + past_s));
    bool read = time_left_s < 0 || left_s() > 0;
    if (read) {
      const double seconds = time_left_s < 0 ? 30.0 : left_s();
      const int64_t wait_ms =
          std::max<int64_t>(1, std::min<int64_t>(transfer_timeout_ms_, static_cast<int64_t>(seconds * 1000)));
      try {
        io::TransferStatus st = engine_.transfer(true, arena_, descs[ref - 1], segs, engine_.allocate_transfer_uid());
        if (st.WaitFor(wait_ms) != io::StatusCode::SUCCESS) {
          MORI_LOG(kWarn, "umbp", "peer: pulling %zu put value(s) from their writer failed: %s", js.size(),
                   st.Message().c_str());
          read = false;
        }
      } catch (const std::exception& e) {  // a bad descriptor is the writer's: its puts fail
        MORI_LOG(kWarn, "umbp", "peer: reading %zu value(s) from a writer failed: %s", js.size(), e.what());
        read = false;
      }
    }
    if (read && time_left_s >= 0 && left_s() <= 0) {
      // Past the writer's deadline it has given up and may reuse its memory: not committed.
      MORI_LOG(kWarn, "umbp", "peer: %zu value(s) read after their writer's deadline: not committed", js.size());
      read = false;
    }
    std::vector<uint64_t> ids;
    std::vector<std::string> ks;
    for (size_t j : js) {
      ids.push_back(grants[j].slot_id);
      ks.push_back(entries[j].key);
    }
    std::vector<bool> ok(js.size(), false);
    if (read) {
      ok = store_.commit(ids, ks);
    } else {
      store_.abort(ids);
    }
    for (size_t k = 0; k < js.size(); ++k) {
      const bool good = k < ok.size() && ok[k];
      out[js[k]].committed = good;
      out[js[k]].failed = !good;
      committed_any |= good;
    }
  }
  if (committed_any && wake_ != nullptr) wake_->set();
  return true;
}

}  // namespace mori::umbp
