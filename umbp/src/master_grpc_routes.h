// SPDX-License-Identifier: MIT
// Phase 2 of the master's grpc++ server: BatchRouteGet and RouteGet answered in C++, on the worker thread
// that received it, without the interpreter lock, from the in-memory store's block index
// (MasterIndex) or the Redis store's scripts (RedisRoutes, master_grpc_redis.h). Misses are answered
// here too (SGLang's exists calls end in misses), unless a missing key is a put routed and not yet
// reported (the master's PendingPuts, master_pending.h, which the Python servicers keep): a
// BatchRouteGet naming one is left to the Python handler, as is a request that does not parse.
// BatchLookup and BatchRoutePut too (existence from the index, or by EXISTS over Redis:
// RedisRoutes), puts routed by the master's one PutRoutes (master_put_routes.h) and recorded in
// its PendingPuts as the Python handler does; with per-engine quotas set, puts are the Python
// handler's. The place feed's polls (UMBPMasterAdmin.PlaceFeed) too. Route counters and latencies are kept here and
// drained into the Python metrics at scrape time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "src/master_index.h"
#include "src/master_pending.h"
#include "src/master_place_feed.h"
#include "src/master_put_routes.h"

namespace mori::umbp {

// True when this build generated the protobuf C++ of umbp.proto (protoc + libprotobuf-dev).
bool native_routes_available();

// Which RPC a count belongs to.
enum class NativeRpc { kBatchRouteGet = 0, kRouteGet = 1, kBatchLookup = 2, kBatchRoutePut = 3, kPlaceFeed = 4 };

class NativeRoutes {
 public:
  // The live clients with their room: asked again when the copy is older than max_age_s.
  using AliveSource = std::function<std::vector<NodeRoom>()>;
  struct Alive {
    std::unordered_map<std::string, std::string> peer;  // node_id -> peer_address
    std::vector<std::string> ids;
    std::vector<NodeRoom> rooms;
  };
  // The store's get path for a batch: route_choose's columns into out; false when the store
  // failed (the call goes to Python).
  using Router =
      std::function<bool(const std::vector<std::string>& keys, const std::vector<std::string>& exclude,
                         const Alive& alive, double now, double lease_until, bool any_copy, RoutedGets& out)>;

  // router: the store's get path; lease_s: a routed key's lease; any_copy:
  // UMBP_ROUTE_GET_STRATEGY=random; latency_bounds: the upper bounds of the Python latency
  // histogram's buckets (+inf last), so drained counts add bucket for bucket.
  NativeRoutes(Router router, double lease_s, bool any_copy, std::vector<double> latency_bounds, AliveSource alive,
               double alive_max_age_s);
  // The in-memory store's block index (which outlives this) as the router.
  static Router index_router(MasterIndex& index);
  // Existence only (BatchLookup, and a put's dedup): whether each key has a copy in the store, or
  // fewer answers than keys when the store failed (the call is then Python's). Without it
  // BatchLookup and BatchRoutePut stay the Python handler's.
  using Lookup = std::function<std::vector<bool>(const std::vector<std::string>& keys)>;
  void set_lookup(Lookup lookup) { lookup_ = std::move(lookup); }

  // Answer a BatchRouteGet / RouteGet request (serialized) into reply; false: leave it to Python.
  bool batch_route_get(std::string_view request, std::string& reply);
  bool route_get(std::string_view request, std::string& reply);
  // Several RouteGet requests at once (MasterGrpcServer::set_native_batch; route_get is a batch
  // of one): the keys of those that exclude the same nodes are routed by one router call (over
  // Redis, one script call per endpoint for all of them). answered[i] false leaves request i to
  // the one-by-one path (it did not parse, or the store failed).
  void route_get_batch(const std::vector<std::string_view>& requests, std::vector<std::string>& replies,
                       std::vector<char>& answered);
  // A BatchLookup (a scheduler's existence check): a key is found with a copy in the store or as
  // a pending put, as the Python handler answers. False (Python's) without a lookup.
  bool batch_lookup(std::string_view request, std::string& reply);
  // A BatchRoutePut over the lookup's index (set_puts first): false leaves it to Python (no
  // routes set, quotas set, a request that does not parse or whose lengths differ).
  bool batch_route_put(std::string_view request, std::string& reply);

  // The master's pending puts (which outlive this): a BatchRouteGet missing one of them is the
  // Python handler's (it routes the key to the put's target); BatchLookup counts them as found.
  void set_pending(PendingPuts* pending) { pending_ = pending; }
  // BatchRoutePut answered here: routed by `routes` (which outlives this), each routed key
  // recorded in the pending puts for pending_ttl_s, as the Python handler does. Needs a lookup.
  void set_puts(PutRoutes* routes, double pending_ttl_s) {
    put_routes_ = routes;
    pending_ttl_s_ = pending_ttl_s;
  }
  // Workers' PlaceFeed polls answered here from the master's feed (which outlives this), with the
  // live owners' peer addresses (an owner gone is left out, as the Python handler does).
  void set_place_feed(const PlaceFeed* feed) {
    feed_ = [feed](uint64_t id, uint64_t seq, uint32_t most, FeedSlice& out) {
      out = feed->since(id, seq, most);
      return true;
    };
  }
  // Or from another log (the Redis store's): false leaves the call to Python.
  using FeedSource = std::function<bool(uint64_t feed_id, uint64_t seq, uint32_t max_entries, FeedSlice& out)>;
  void set_feed_source(FeedSource source) { feed_ = std::move(source); }
  bool place_feed(std::string_view request, std::string& reply);
  // Per-engine quotas are set: puts are the Python handler's from now on (it keeps the counts).
  void set_python_puts(bool on) { python_puts_.store(on, std::memory_order_release); }

  struct Counts {
    std::vector<std::pair<std::string, uint64_t>> hits;  // per serving node, since the last drain
    std::vector<uint64_t> buckets;                       // latency counts per bucket (not cumulative)
    double latency_sum_s = 0;
    uint64_t answered = 0;
    uint64_t misses = 0;  // keys with no live copy, answered as such
    // BatchRoutePut: keys per outcome (already_exists, routed, unavailable); `hits` counts the
    // keys routed to each node.
    uint64_t exists = 0, routed = 0, unavailable = 0;
  };
  // What was counted for `rpc` since the last drain (and zero it).
  Counts drain(NativeRpc rpc);
  // Calls answered here since the start, both RPCs.
  uint64_t answered() const { return answered_.load(std::memory_order_relaxed); }

 private:
  std::shared_ptr<const Alive> alive_now();

  Router router_;
  Lookup lookup_;
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
    uint64_t misses = 0;
    uint64_t exists = 0, routed = 0, unavailable = 0;
  };
  // Route the keys: false when the store failed, or (with `pending_matters`) when a missing key
  // is a pending put (the call is left to Python).
  bool route(const std::vector<std::string>& keys, const std::vector<std::string>& exclude, RoutedGets& out,
             std::shared_ptr<const Alive>& alive, bool pending_matters);
  PendingPuts* pending_ = nullptr;
  PutRoutes* put_routes_ = nullptr;
  FeedSource feed_;
  double pending_ttl_s_ = 0;
  std::atomic<bool> python_puts_{false};
  template <typename Reply>
  bool answer(const Reply& resp, std::string& reply, NativeRpc rpc, double t0);
  void count(NativeRpc rpc, const RoutedGets& r, double t0);
  void count(NativeRpc rpc, const Tally& part, double t0);  // a call's counts, its latency from t0
  std::mutex counts_mu_;
  Tally tally_[5];
  std::atomic<uint64_t> answered_{0};
};

}  // namespace mori::umbp
