// SPDX-License-Identifier: MIT
// The UMBP master's pending puts: keys it routed to an owner whose ADD event has not come yet,
// each with its target and until when it counts. A get route or a lookup of such a key answers
// with the put's target (its put returned, or will). One registry, in libmori: the Python
// servicers (master_service.py) and the grpc++ server's native get path (master_grpc_routes.h)
// read the same one, so a native answer can tell a plain miss from a pending put.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace mori::umbp {

struct PendingPut {
  std::string node_id;
  int32_t tier = 0;
  std::string peer_address;
  uint64_t size = 0;
  double expires = 0;  // seconds since the epoch (time.time())
};

class PendingPuts {
 public:
  // Records (or replaces) the key's pending put at `now`. Past `kPruneAbove` entries the ones
  // expired by then go (then again once the registry has doubled).
  void add(const std::string& key, PendingPut put, double now);
  // The key's pending put, if one is recorded and not expired at `now`.
  std::optional<PendingPut> find(const std::string& key, double now) const;
  // Whether any keys[i] with node_ref[i] == 0 (a miss of a route) is pending at `now` (no lock
  // taken when none is recorded).
  bool any(const std::vector<std::string>& keys, const std::vector<uint32_t>& node_ref, double now) const;
  // The owners reported these keys: their records are done.
  void done(const std::vector<std::string>& keys);
  size_t size() const { return size_.load(std::memory_order_acquire); }
  // How many done() calls removed records so far. A route looks in the index, then here; an
  // owner's report adds the key to the index, then calls done(): a key reported between the
  // two looks is in neither. A route that saw this count change across its two looks looks again.
  uint64_t dones() const { return dones_.load(std::memory_order_acquire); }

  static constexpr size_t kPruneAbove = 100000;

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, PendingPut> map_;
  std::atomic<size_t> size_{0};  // map_.size(), read without the lock
  std::atomic<uint64_t> dones_{0};
  size_t prune_at_ = kPruneAbove;  // the size at which add() sweeps out the expired
};

}  // namespace mori::umbp
