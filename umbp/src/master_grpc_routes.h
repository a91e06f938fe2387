// SPDX-License-Identifier: MIT
// Phase 2 of the master's grpc++ server: BatchRouteGet and RouteGet answered in C++, on the worker thread
// that received it, without the interpreter lock, when the store is the in-memory one (whose
// block index, MasterIndex, already answers the lookup natively). A call it cannot answer
// exactly as the Python handler would (a key with no live copy, which may be a pending put only
// the Python side knows; a request that does not parse) is left to the Python handler. Its
// route counters and latencies are kept here and drained into the Python metrics at scrape time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "src/master_index.h"

namespace mori::umbp {

// True when this build generated the protobuf C++ of umbp.proto (protoc + libprotobuf-dev).
bool native_routes_available();

// Which RPC a count belongs to.
enum class NativeRpc { kBatchRouteGet = 0, kRouteGet = 1 };

class NativeRouteGet {
 public:
  // The live clients as (node_id, peer_address): asked again when the copy is older than max_age_s.
  using AliveSource = std::function<std::vector<std::pair<std::string, std::string>>()>;

  // index: the in-memory store's block index (outlives this); lease_s: a routed key's lease;
  // any_copy: UMBP_ROUTE_GET_STRATEGY=random; latency_bounds: the upper bounds of the Python
  // latency histogram's buckets (+inf last), so drained counts add bucket for bucket.
  NativeRouteGet(MasterIndex& index, double lease_s, bool any_copy, std::vector<double> latency_bounds,
                 AliveSource alive, double alive_max_age_s);

  // Answer a BatchRouteGet / RouteGet request (serialized) into reply; false: leave it to Python.
  bool batch_route_get(const std::string& request, std::string& reply);
  bool route_get(const std::string& request, std::string& reply);

  struct Counts {
    std::vector<std::pair<std::string, uint64_t>> hits;  // per serving node, since the last drain
    std::vector<uint64_t> buckets;                       // latency counts per bucket (not cumulative)
    double latency_sum_s = 0;
    uint64_t answered = 0;
  };
  // What was counted for `rpc` since the last drain (and zero it).
  Counts drain(NativeRpc rpc);

 private:
  struct Alive {
    std::unordered_map<std::string, std::string> peer;  // node_id -> peer_address
    std::vector<std::string> ids;
  };
  std::shared_ptr<const Alive> alive_now();

  MasterIndex& index_;
  double lease_s_;
  bool any_copy_;
  std::vector<double> bounds_;
  AliveSource alive_source_;
  double alive_max_age_s_;
  std::mutex alive_mu_;
  std::shared_ptr<const Alive> alive_;
  double alive_stamp_ = -1e300;  // steady-clock seconds of alive_
  bool refreshing_ = false;
  struct Tally {
    std::unordered_map<std::string, uint64_t> hits;
    std::vector<uint64_t> buckets;
    double latency_sum_s = 0;
    uint64_t answered = 0;
  };
  // Route the keys: false when a key has no live copy (the call is left to Python).
  bool route(const std::vector<std::string>& keys, const std::vector<std::string>& exclude, RoutedGets& out,
             std::shared_ptr<const Alive>& alive);
  void count(NativeRpc rpc, const RoutedGets& r, double t0);
  std::mutex counts_mu_;
  Tally tally_[2];
};

}  // namespace mori::umbp
