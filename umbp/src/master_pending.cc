// SPDX-License-Identifier: MIT
// The master's pending puts (master_pending.h).
#include "src/master_pending.h"

#include <algorithm>

namespace mori::umbp {

void PendingPuts::add(const std::string& key, PendingPut put, double now) {
  std::lock_guard<std::mutex> lk(mu_);
  if (map_.size() >= prune_at_) {
    // Puts whose owner never reported them: dropped once expired. The next sweep waits until the
    // registry has doubled, so a burst of live puts costs each add O(1) amortized, not a scan.
    std::erase_if(map_, [now](const auto& kv) { return kv.second.expires <= now; });
    prune_at_ = std::max(kPruneAbove, 2 * map_.size());
  }
  map_[key] = std::move(put);
  size_.store(map_.size(), std::memory_order_release);
}

std::optional<PendingPut> PendingPuts::find(const std::string& key, double now) const {
  if (size() == 0) return std::nullopt;
  std::lock_guard<std::mutex> lk(mu_);
  auto it = map_.find(key);
  if (it == map_.end() || it->second.expires <= now) return std::nullopt;
  return it->second;
}

bool PendingPuts::any(const std::vector<std::string>& keys, const std::vector<uint32_t>& node_ref, double now) const {
  if (size() == 0) return false;
  std::lock_guard<std::mutex> lk(mu_);
  for (size_t i = 0; i < keys.size() && i < node_ref.size(); ++i) {
    if (node_ref[i] != 0) continue;
    auto it = map_.find(keys[i]);
    if (it != map_.end() && it->second.expires > now) return true;
  }
  return false;
}

void PendingPuts::done(const std::vector<std::string>& keys) {
  if (size() == 0) return;
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& k : keys) map_.erase(k);
  size_.store(map_.size(), std::memory_order_release);
  dones_.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace mori::umbp
