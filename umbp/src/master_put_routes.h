// SPDX-License-Identifier: MIT
// The UMBP master's put routing: where a put should go, from the room each live node reported
// (its heartbeats and registration) less what this master routed to it since. One registry, in
// libmori: the Python servicers (master_routing.PutRouter wraps it) and the grpc++ server's
// native BatchRoutePut (master_grpc_routes.h) route against the same counts, so a batch routed
// natively and a RoutePut routed in Python never offer the same room twice.
//
// Memory tiers only, HBM before DRAM. `most_available` picks the node with the most free bytes in
// the tier (ties: the larger node id), `random` draws nodes weighted by free bytes. Affinity
// `none` considers every node, `same` prefers the writer when it has room, `local` only the writer.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace mori::umbp {

struct TierRoom {
  int32_t tier = 0;
  uint64_t total = 0;
  uint64_t available = 0;
  uint64_t max_allocatable = 0;  // 0: not reported (any size up to `available`)
};

// A live node as the metadata store knows it.
struct NodeRoom {
  std::string node_id;
  std::string peer_address;
  double last_heartbeat = 0;  // as the store's ClientRecord has it
  std::vector<TierRoom> tiers;
};

struct PutRoute {
  std::string node_id;
  int32_t tier = 0;
  std::string peer_address;
};

class PutRoutes {
 public:
  // algo: "most_available" | "random"; affinity: "none" | "same" | "local". Raises mori::Error
  // (kInvalidArgument) naming the setting otherwise.
  PutRoutes(const std::string& algo, const std::string& affinity);

  // A heartbeat or registration (at wall time `at`) brought the node's room: what was routed to
  // it before is forgotten, and this room is routed against from now on (unless a later report
  // came first: heartbeats may be served out of order). An empty `tiers` only forgets.
  void reported(const std::string& node_id, const std::vector<TierRoom>& tiers, double at);
  // The node left: nothing of it is kept.
  void forget(const std::string& node_id);
  // Where a put of `size` bytes from `writer` goes among `nodes` (less `exclude`); the bytes
  // count as routed to it. None: no node has room.
  std::optional<PutRoute> route(const std::string& writer, uint64_t size, const std::vector<NodeRoom>& nodes,
                                const std::unordered_set<std::string>& exclude);

  static constexpr int32_t kTiers[] = {1, 2};  // TIER_HBM, TIER_DRAM: the put tiers, fastest first

 private:
  const std::vector<TierRoom>& room_of(const NodeRoom& node) const;
  std::optional<PutRoute> pick(const std::vector<const NodeRoom*>& nodes, uint64_t size);

  bool random_ = false;
  enum class Affinity { kNone, kSame, kLocal } affinity_ = Affinity::kNone;
  std::mutex mu_;
  // (node, tier) -> bytes routed since the node's room was last reported.
  std::unordered_map<std::string, std::unordered_map<int32_t, int64_t>> routed_;
  struct Report {
    double at = 0;
    std::vector<TierRoom> tiers;
  };
  std::unordered_map<std::string, Report> reported_;
  std::mt19937_64 rng_{std::random_device{}()};
};

}  // namespace mori::umbp
