// SPDX-License-Identifier: MIT
#include "src/master_index.h"

#include <algorithm>
#include <functional>

#include "mori/core/status.h"

namespace mori::umbp {

namespace {

std::mt19937_64& thread_rng() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng;
}

size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(thread_rng()); }

}  // namespace

MasterIndex::MasterIndex(size_t shards, std::vector<int32_t> tier_priority) : tier_priority_(std::move(tier_priority)) {
  MORI_CHECK_ARG(shards >= 1, "shards must be >= 1, got %zu", shards);
  shards_.reserve(shards);
  for (size_t i = 0; i < shards; ++i) shards_.push_back(std::make_unique<Shard>());
}

MasterIndex::Shard& MasterIndex::shard_of(const std::string& key) const {
  return *shards_[std::hash<std::string>{}(key) % shards_.size()];
}

int MasterIndex::rank(int32_t tier) const {
  for (size_t i = 0; i < tier_priority_.size(); ++i)
    if (tier_priority_[i] == tier) return static_cast<int>(i);
  return static_cast<int>(tier_priority_.size());
}

uint32_t MasterIndex::intern(std::string_view node_id) {
  if (auto id = find_node(node_id)) return *id;
  std::unique_lock lock(nodes_mu_);
  auto [it, inserted] = node_ids_.try_emplace(std::string(node_id), static_cast<uint32_t>(node_names_.size()));
  if (inserted) node_names_.emplace_back(node_id);
  return it->second;
}

std::optional<uint32_t> MasterIndex::find_node(std::string_view node_id) const {
  std::shared_lock lock(nodes_mu_);
  auto it = node_ids_.find(std::string(node_id));
  if (it == node_ids_.end()) return std::nullopt;
  return it->second;
}

std::vector<char> MasterIndex::node_mask(const std::vector<std::string>& node_ids) const {
  std::shared_lock lock(nodes_mu_);
  std::vector<char> mask(node_names_.size(), 0);
  for (const auto& n : node_ids) {
    auto it = node_ids_.find(n);
    if (it != node_ids_.end()) mask[it->second] = 1;
  }
  return mask;
}

bool MasterIndex::add(std::string_view node_id, const std::string& key, int32_t tier, uint64_t size, double now,
                      uint64_t offset, uint64_t checksum) {
  const uint32_t node = intern(node_id);
  Shard& shard = shard_of(key);
  std::lock_guard lock(shard.mu);
  auto [it, new_key] = shard.entries.try_emplace(key);
  Entry& entry = it->second;
  if (new_key) entry.last_access = now;
  auto same = std::find_if(entry.copies.begin(), entry.copies.end(),
                           [&](const Copy& c) { return c.node == node && c.tier == tier; });
  if (same != entry.copies.end()) {
    same->size = size;
    same->offset = offset;
    same->checksum = checksum;
  } else {
    const int r = rank(tier);
    auto at = std::find_if(entry.copies.begin(), entry.copies.end(), [&](const Copy& c) { return rank(c.tier) > r; });
    entry.copies.insert(at, Copy{node, tier, size, offset, checksum});
  }
  shard.by_node[node].insert(key);
  return new_key;
}

std::optional<std::pair<uint64_t, bool>> MasterIndex::remove_locked(Shard& shard, uint32_t node, const std::string& key,
                                                                    int32_t tier) {
  auto it = shard.entries.find(key);
  if (it == shard.entries.end()) return std::nullopt;
  auto& copies = it->second.copies;
  auto copy =
      std::find_if(copies.begin(), copies.end(), [&](const Copy& c) { return c.node == node && c.tier == tier; });
  if (copy == copies.end()) return std::nullopt;
  const uint64_t size = copy->size;
  copies.erase(copy);
  const bool node_still_holds =
      std::any_of(copies.begin(), copies.end(), [&](const Copy& c) { return c.node == node; });
  if (!node_still_holds) {
    auto keys = shard.by_node.find(node);
    if (keys != shard.by_node.end()) {
      keys->second.erase(key);
      if (keys->second.empty()) shard.by_node.erase(keys);
    }
  }
  if (!copies.empty()) return std::make_pair(size, false);
  shard.entries.erase(it);
  return std::make_pair(size, true);
}

std::optional<std::pair<uint64_t, bool>> MasterIndex::remove(std::string_view node_id, const std::string& key,
                                                             int32_t tier) {
  auto node = find_node(node_id);
  if (!node) return std::nullopt;
  Shard& shard = shard_of(key);
  std::lock_guard lock(shard.mu);
  return remove_locked(shard, *node, key, tier);
}

std::vector<std::pair<std::string, uint64_t>> MasterIndex::remove_node(std::string_view node_id) {
  std::vector<std::pair<std::string, uint64_t>> gone;
  auto node = find_node(node_id);
  if (!node) return gone;
  for (auto& shard : shards_) {
    std::lock_guard lock(shard->mu);
    auto keys = shard->by_node.find(*node);
    if (keys == shard->by_node.end()) continue;
    std::vector<std::string> held(keys->second.begin(), keys->second.end());
    for (const auto& key : held) {
      auto& copies = shard->entries.at(key).copies;
      std::vector<int32_t> tiers;
      for (const Copy& c : copies)
        if (c.node == *node) tiers.push_back(c.tier);
      for (int32_t tier : tiers) {
        auto removed = remove_locked(*shard, *node, key, tier);
        if (removed && removed->second) gone.emplace_back(key, removed->first);
      }
    }
  }
  return gone;
}

std::vector<std::vector<IndexCopy>> MasterIndex::route(const std::vector<std::string>& keys,
                                                       const std::vector<std::string>& exclude, double now,
                                                       double lease_until) {
  const std::vector<char> excluded = node_mask(exclude);
  std::vector<std::vector<Copy>> found(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    Shard& shard = shard_of(keys[i]);
    std::lock_guard lock(shard.mu);
    auto it = shard.entries.find(keys[i]);
    if (it == shard.entries.end()) continue;
    for (const Copy& c : it->second.copies)
      if (c.node >= excluded.size() || !excluded[c.node]) found[i].push_back(c);
    if (found[i].empty()) continue;
    it->second.last_access = now;
    it->second.lease_until = std::max(it->second.lease_until, lease_until);
  }
  std::vector<std::vector<IndexCopy>> out(keys.size());
  std::shared_lock lock(nodes_mu_);
  for (size_t i = 0; i < keys.size(); ++i)
    for (const Copy& c : found[i]) out[i].push_back(IndexCopy{node_names_[c.node], c.tier, c.size});
  return out;
}

RoutedGets MasterIndex::route_choose(const std::vector<std::string>& keys, const std::vector<std::string>& exclude,
                                     const std::vector<std::string>& alive, double now, double lease_until,
                                     bool any_copy) {
  const std::vector<char> excluded = node_mask(exclude);
  const std::vector<char> live = node_mask(alive);
  auto is_live = [&](uint32_t node) { return node < live.size() && live[node]; };
  RoutedGets out;
  out.node_ref.assign(keys.size(), 0);
  out.tier.assign(keys.size(), 0);
  out.size.assign(keys.size(), 0);
  out.offset.assign(keys.size(), 0);
  out.checksum.assign(keys.size(), 0);
  std::vector<uint32_t> ref_of;  // interned node -> 1-based index into out.nodes
  std::vector<uint32_t> chosen_nodes;
  std::vector<const Copy*> usable;
  for (size_t i = 0; i < keys.size(); ++i) {
    Shard& shard = shard_of(keys[i]);
    Copy chosen{};
    bool hit = false;
    {
      std::lock_guard lock(shard.mu);
      auto it = shard.entries.find(keys[i]);
      if (it != shard.entries.end()) {
        Entry& entry = it->second;
        usable.clear();
        bool any_unexcluded = false;
        for (const Copy& c : entry.copies) {
          if (c.node < excluded.size() && excluded[c.node]) continue;
          any_unexcluded = true;
          if (is_live(c.node)) usable.push_back(&c);
        }
        if (any_unexcluded) {
          entry.last_access = now;
          entry.lease_until = std::max(entry.lease_until, lease_until);
        }
        if (!usable.empty()) {
          hit = true;
          if (any_copy) {
            chosen = *usable[usable.size() == 1 ? 0 : pick(usable.size())];
          } else {
            const int32_t best = usable.front()->tier;
            size_t in_tier = 1;
            while (in_tier < usable.size() && usable[in_tier]->tier == best) ++in_tier;
            chosen = *usable[in_tier == 1 ? 0 : pick(in_tier)];
          }
        }
      }
    }
    if (!hit) {
      ++out.misses;
      continue;
    }
    if (chosen.node >= ref_of.size()) ref_of.resize(chosen.node + 1, 0);
    if (ref_of[chosen.node] == 0) {
      chosen_nodes.push_back(chosen.node);
      out.hits.push_back(0);
      ref_of[chosen.node] = static_cast<uint32_t>(chosen_nodes.size());
    }
    const uint32_t ref = ref_of[chosen.node];
    ++out.hits[ref - 1];
    out.node_ref[i] = ref;
    out.tier[i] = chosen.tier;
    out.size[i] = chosen.size;
    out.offset[i] = chosen.offset;
    out.checksum[i] = chosen.checksum;
  }
  std::shared_lock lock(nodes_mu_);
  for (uint32_t node : chosen_nodes) out.nodes.push_back(node_names_[node]);
  return out;
}

std::vector<bool> MasterIndex::contains(const std::vector<std::string>& keys) const {
  std::vector<bool> out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    Shard& shard = shard_of(keys[i]);
    std::lock_guard lock(shard.mu);
    out[i] = shard.entries.count(keys[i]) != 0;
  }
  return out;
}

std::vector<IndexCandidate> MasterIndex::candidates(std::string_view node_id, int32_t tier, double now) const {
  std::vector<IndexCandidate> out;
  auto node = find_node(node_id);
  if (!node) return out;
  for (const auto& shard : shards_) {
    std::lock_guard lock(shard->mu);
    auto keys = shard->by_node.find(*node);
    if (keys == shard->by_node.end()) continue;
    for (const auto& key : keys->second) {
      const Entry& entry = shard->entries.at(key);
      if (entry.lease_until > now) continue;
      for (const Copy& c : entry.copies)
        if (c.node == *node && c.tier == tier) out.push_back(IndexCandidate{key, c.size, entry.last_access});
    }
  }
  return out;
}

std::vector<std::pair<std::string, int32_t>> MasterIndex::node_copies(std::string_view node_id) const {
  std::vector<std::pair<std::string, int32_t>> out;
  auto node = find_node(node_id);
  if (!node) return out;
  for (const auto& shard : shards_) {
    std::lock_guard lock(shard->mu);
    auto keys = shard->by_node.find(*node);
    if (keys == shard->by_node.end()) continue;
    for (const auto& key : keys->second)
      for (const Copy& c : shard->entries.at(key).copies)
        if (c.node == *node) out.emplace_back(key, c.tier);
  }
  return out;
}

std::vector<std::string> MasterIndex::node_keys(std::string_view node_id) const {
  std::vector<std::string> out;
  auto node = find_node(node_id);
  if (!node) return out;
  for (const auto& shard : shards_) {
    std::lock_guard lock(shard->mu);
    auto keys = shard->by_node.find(*node);
    if (keys != shard->by_node.end()) out.insert(out.end(), keys->second.begin(), keys->second.end());
  }
  return out;
}

size_t MasterIndex::size() const {
  size_t n = 0;
  for (const auto& shard : shards_) {
    std::lock_guard lock(shard->mu);
    n += shard->entries.size();
  }
  return n;
}

}  // namespace mori::umbp
