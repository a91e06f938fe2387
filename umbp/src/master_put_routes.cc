// SPDX-License-Identifier: MIT
// The master's put routing (master_put_routes.h).
#include "src/master_put_routes.h"

#include <algorithm>

#include "mori/core/status.h"

namespace mori::umbp {

PutRoutes::PutRoutes(const std::string& algo, const std::string& affinity) {
  MORI_CHECK_ARG(algo == "most_available" || algo == "random",
                 "UMBP_ROUTE_PUT_SELECT_ALGO must be one of ('most_available', 'random'), got '%s'", algo.c_str());
  MORI_CHECK_ARG(affinity == "none" || affinity == "same" || affinity == "local",
                 "UMBP_ROUTE_PUT_NODE_AFFINITY must be one of ('none', 'same', 'local'), got '%s'", affinity.c_str());
  random_ = algo == "random";
  affinity_ = affinity == "same" ? Affinity::kSame : affinity == "local" ? Affinity::kLocal : Affinity::kNone;
}

void PutRoutes::reported(const std::string& node_id, const std::vector<TierRoom>& tiers, double at) {
  std::lock_guard<std::mutex> lk(mu_);
  routed_.erase(node_id);
  if (tiers.empty()) return;
  auto it = reported_.find(node_id);
  if (it == reported_.end() || at >= it->second.at) reported_[node_id] = Report{at, tiers};
}

void PutRoutes::forget(const std::string& node_id) {
  std::lock_guard<std::mutex> lk(mu_);
  routed_.erase(node_id);
  reported_.erase(node_id);
}

const std::vector<TierRoom>& PutRoutes::room_of(const NodeRoom& node) const {
  // A record newer than this master's last report (another master of a shared store saw a later
  // heartbeat) wins over it.
  auto it = reported_.find(node.node_id);
  return it != reported_.end() && it->second.at >= node.last_heartbeat ? it->second.tiers : node.tiers;
}

std::optional<PutRoute> PutRoutes::pick(const std::vector<const NodeRoom*>& nodes, uint64_t size) {
  struct Fit {
    int64_t free;
    const NodeRoom* node;
  };
  std::vector<Fit> fitting;
  for (int32_t tier : kTiers) {
    fitting.clear();
    for (const NodeRoom* n : nodes) {
      const auto& room = room_of(*n);
      auto cap = std::find_if(room.begin(), room.end(), [tier](const TierRoom& t) { return t.tier == tier; });
      if (cap == room.end()) continue;
      int64_t routed = 0;
      if (auto r = routed_.find(n->node_id); r != routed_.end())
        if (auto t = r->second.find(tier); t != r->second.end()) routed = t->second;
      const int64_t free = static_cast<int64_t>(cap->available) - routed;
      if (free < static_cast<int64_t>(size) || (cap->max_allocatable && cap->max_allocatable < size)) continue;
      fitting.push_back({free, n});
    }
    if (fitting.empty()) continue;
    const NodeRoom* chosen = nullptr;
    if (!random_) {
      chosen = std::max_element(fitting.begin(), fitting.end(), [](const Fit& a, const Fit& b) {
                 return a.free != b.free ? a.free < b.free : a.node->node_id < b.node->node_id;
               })->node;
    } else {
      std::vector<double> weights;
      for (const Fit& f : fitting) weights.push_back(static_cast<double>(std::max<int64_t>(f.free, 1)));
      std::discrete_distribution<size_t> draw(weights.begin(), weights.end());
      chosen = fitting[draw(rng_)].node;
    }
    routed_[chosen->node_id][tier] += static_cast<int64_t>(size);
    return PutRoute{chosen->node_id, tier, chosen->peer_address};
  }
  return std::nullopt;
}

std::optional<PutRoute> PutRoutes::route(const std::string& writer, uint64_t size, const std::vector<NodeRoom>& nodes,
                                         const std::unordered_set<std::string>& exclude) {
  std::vector<const NodeRoom*> candidates, mine;
  for (const NodeRoom& n : nodes) {
    if (exclude.count(n.node_id)) continue;
    if (n.node_id == writer) mine.push_back(&n);
    if (affinity_ != Affinity::kLocal || n.node_id == writer) candidates.push_back(&n);
  }
  std::lock_guard<std::mutex> lk(mu_);
  if (affinity_ == Affinity::kSame)
    if (auto target = pick(mine, size)) return target;
  return pick(candidates, size);
}

}  // namespace mori::umbp
