// SPDX-License-Identifier: MIT
// The UMBP master's in-memory block index: key -> copies (node, tier, size), with each key's last
// routed access (LRU eviction) and lease (a routed get protects the key from master eviction).
// Sharded by key hash, one mutex per shard. The get path (lookup, tier-priority choice among live
// copies, touch and lease) runs here for a whole batch, so the Python master pays per call, not
// per key. Node ids are interned to small integers: copies and per-node views carry those.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace mori::umbp {

// One batch's routed gets, columnar like BatchRouteGetResponse: node_ref[i] is 0 for a miss,
// else a 1-based index into nodes (each distinct serving node listed once, in first-use order).
struct RoutedGets {
  std::vector<std::string> nodes;
  std::vector<uint64_t> hits;  // per entry of nodes: keys routed to it
  std::vector<uint32_t> node_ref;
  std::vector<int32_t> tier;
  std::vector<uint64_t> size;
  // Where the chosen copy lies in its owner's DRAM arena and its XXH3, as the owner's ADD event
  // said (checksum 0: not known; the reader resolves the key at the owner then).
  std::vector<uint64_t> offset;
  std::vector<uint64_t> checksum;
  uint64_t misses = 0;
};

struct IndexCopy {
  std::string node_id;
  int32_t tier;
  uint64_t size;
};

struct IndexCandidate {
  std::string key;
  uint64_t size;
  double last_access;
};

class MasterIndex {
 public:
  // tier_priority: the get path's order, fastest first; tiers not listed rank after them.
  MasterIndex(size_t shards, std::vector<int32_t> tier_priority);
  MasterIndex(const MasterIndex&) = delete;
  MasterIndex& operator=(const MasterIndex&) = delete;

  // Records a copy (or updates its size and place); true if the key had no copy before.
  // offset, checksum: the copy's place in the owner's arena and its XXH3 (0: not known).
  bool add(std::string_view node_id, const std::string& key, int32_t tier, uint64_t size, double now,
           uint64_t offset = 0, uint64_t checksum = 0);
  // Drops a copy: (its size, whether it was the key's last), or nothing if unknown.
  std::optional<std::pair<uint64_t, bool>> remove(std::string_view node_id, const std::string& key, int32_t tier);
  // Drops every copy the node holds; (key, size) of the keys left with no copy.
  std::vector<std::pair<std::string, uint64_t>> remove_node(std::string_view node_id);

  // Per key its copies not on an excluded node, fastest tier first (empty on a miss); keys with
  // such a copy are touched (last access = now) and leased until lease_until.
  std::vector<std::vector<IndexCopy>> route(const std::vector<std::string>& keys,
                                            const std::vector<std::string>& exclude, double now, double lease_until);
  // route() and then the copy each reader should use among those on live nodes: the fastest
  // tier's (a random one when it has several), or any live copy when any_copy.
  RoutedGets route_choose(const std::vector<std::string>& keys, const std::vector<std::string>& exclude,
                          const std::vector<std::string>& alive, double now, double lease_until, bool any_copy);

  std::vector<bool> contains(const std::vector<std::string>& keys) const;
  // The node's copies in the tier that are not leased at now.
  std::vector<IndexCandidate> candidates(std::string_view node_id, int32_t tier, double now) const;
  std::vector<std::pair<std::string, int32_t>> node_copies(std::string_view node_id) const;
  std::vector<std::string> node_keys(std::string_view node_id) const;
  size_t size() const;

 private:
  struct Copy {
    uint32_t node;
    int32_t tier;
    uint64_t size;
    uint64_t offset = 0;
    uint64_t checksum = 0;
  };
  struct Entry {
    std::vector<Copy> copies;  // fastest tier first; insertion order within a rank
    double last_access = 0.0;
    double lease_until = 0.0;
  };
  struct Shard {
    mutable std::mutex mu;
    std::unordered_map<std::string, Entry> entries;
    std::unordered_map<uint32_t, std::unordered_set<std::string>> by_node;  // node -> keys it holds
  };

  Shard& shard_of(const std::string& key) const;
  int rank(int32_t tier) const;
  uint32_t intern(std::string_view node_id);
  std::optional<uint32_t> find_node(std::string_view node_id) const;
  // Node ids as a membership mask over interned ids (names never seen are ignored).
  std::vector<char> node_mask(const std::vector<std::string>& node_ids) const;
  static std::optional<std::pair<uint64_t, bool>> remove_locked(Shard& shard, uint32_t node, const std::string& key,
                                                                int32_t tier);

  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<int32_t> tier_priority_;
  mutable std::shared_mutex nodes_mu_;
  std::unordered_map<std::string, uint32_t> node_ids_;
  std::vector<std::string> node_names_;
};

}  // namespace mori::umbp
