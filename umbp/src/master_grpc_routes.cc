// SPDX-License-Identifier: MIT
// BatchRouteGet in C++ for the master's grpc++ server (master_grpc_routes.h).
#include "src/master_grpc_routes.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <unordered_set>
#include <utility>

#include "mori/core/status.h"

#if MORI_UMBP_HAVE_PROTOBUF
#include "umbp.pb.h"
#include "umbp_admin.pb.h"
#endif

namespace mori::umbp {

namespace {

double steady_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double wall_s() {  // the clock of the Python side's time.time(), which leases and access times use
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

// A reply with no route counts: serialized into `reply`, the call counted (latency from t0);
// false (the call goes to Python) when it does not serialize.
template <typename Reply>
bool NativeRoutes::answer(const Reply& resp, std::string& reply, NativeRpc rpc, double t0) {
  if (!resp.SerializeToString(&reply)) return false;
  count(rpc, RoutedGets{}, t0);
  return true;
}

#if MORI_UMBP_HAVE_PROTOBUF
bool native_routes_available() { return true; }
#else
bool native_routes_available() { return false; }
#endif

NativeRoutes::Router NativeRoutes::index_router(MasterIndex& index) {
  return [&index](const std::vector<std::string>& keys, const std::vector<std::string>& exclude, const Alive& alive,
                  double now, double lease_until, bool any_copy, RoutedGets& out) {
    out = index.route_choose(keys, exclude, alive.ids, now, lease_until, any_copy);
    return true;
  };
}

NativeRoutes::NativeRoutes(Router router, double lease_s, bool any_copy, std::vector<double> latency_bounds,
                           AliveSource alive, double alive_max_age_s)
    : router_(std::move(router)),
      lease_s_(lease_s),
      any_copy_(any_copy),
      bounds_(std::move(latency_bounds)),
      alive_source_(std::move(alive)),
      alive_max_age_s_(alive_max_age_s) {
  MORI_CHECK_ARG(!bounds_.empty(), "latency_bounds must not be empty (the last one is +inf)");
  for (auto& t : tally_) t.buckets.assign(bounds_.size(), 0);
}

std::shared_ptr<const NativeRoutes::Alive> NativeRoutes::alive_now() {
  const double now = steady_s();
  {
    std::lock_guard<std::mutex> lk(alive_mu_);
    // One caller refreshes; the others go on with the copy they have (as old as the Python
    // side's own cache of it may be) unless there is none yet.
    if ((now - alive_stamp_ <= alive_max_age_s_ || refreshing_) && alive_) return alive_;
    refreshing_ = true;
  }
  auto fresh = std::make_shared<Alive>();
  try {
    fresh->rooms = alive_source_();
    for (const NodeRoom& n : fresh->rooms) {
      fresh->ids.push_back(n.node_id);
      fresh->peer.emplace(n.node_id, n.peer_address);
    }
  } catch (...) {
    std::lock_guard<std::mutex> lk(alive_mu_);
    refreshing_ = false;
    throw;
  }
  std::lock_guard<std::mutex> lk(alive_mu_);
  alive_ = fresh;
  alive_stamp_ = now;
  refreshing_ = false;
  return alive_;
}

bool NativeRoutes::route(const std::vector<std::string>& keys, const std::vector<std::string>& exclude, RoutedGets& out,
                         std::shared_ptr<const Alive>& alive, bool pending_matters) {
  alive = alive_now();
  for (int look = 0;; ++look) {
    const uint64_t dones = pending_ != nullptr ? pending_->dones() : 0;
    const double now = wall_s();
    if (!router_(keys, exclude, *alive, now, now + lease_s_, any_copy_, out)) return false;
    if (out.misses == 0 || !pending_matters || pending_ == nullptr) return true;
    // A miss may be a put routed but not yet reported: the Python handler routes it to the put's
    // target. (The hits were touched and leased already; its second pass leases them again.)
    if (pending_->any(keys, out.node_ref, now)) return false;
    // Or a key reported meanwhile, in neither of the two places when each was looked at: again.
    if (pending_->dones() == dones || look == 2) return true;
    out = RoutedGets{};
  }
}

void NativeRoutes::count(NativeRpc rpc, const RoutedGets& r, double t0) {
  Tally part;
  for (size_t i = 0; i < r.nodes.size(); ++i) part.hits[r.nodes[i]] += r.hits[i];
  part.misses = r.misses;
  count(rpc, part, t0);
}

void NativeRoutes::count(NativeRpc rpc, const Tally& part, double t0) {
  const double dt = steady_s() - t0;
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), dt) - bounds_.begin();
  std::lock_guard<std::mutex> lk(counts_mu_);
  Tally& t = tally_[static_cast<int>(rpc)];
  for (const auto& [node, n] : part.hits) t.hits[node] += n;
  t.buckets[std::min(bucket, t.buckets.size() - 1)] += 1;
  t.latency_sum_s += dt;
  t.answered += 1;
  t.misses += part.misses;
  t.exists += part.exists;
  t.routed += part.routed;
  t.unavailable += part.unavailable;
  answered_.fetch_add(1, std::memory_order_relaxed);
}

bool NativeRoutes::batch_route_get(std::string_view request, std::string& reply) {
#if MORI_UMBP_HAVE_PROTOBUF
  const double t0 = steady_s();
  ::umbp::BatchRouteGetRequest req;
  // An unparsable request is the Python handler's to answer, as grpcio would.
  if (!req.ParseFromArray(request.data(), static_cast<int>(request.size()))) return false;
  // The keys move out of the parsed request (no copy, no allocation per key).
  std::vector<std::string> keys;
  keys.reserve(req.keys_size());
  for (std::string& k : *req.mutable_keys()) keys.push_back(std::move(k));
  std::vector<std::string> exclude(req.exclude_nodes().begin(), req.exclude_nodes().end());
  RoutedGets r;
  std::shared_ptr<const Alive> alive;
  if (!route(keys, exclude, r, alive, /*pending_matters=*/true)) return false;
  ::umbp::BatchRouteGetResponse resp;
  for (const auto& node : r.nodes) {
    auto* info = resp.add_nodes();
    info->set_node_id(node);
    auto it = alive->peer.find(node);
    if (it != alive->peer.end()) info->set_peer_address(it->second);
  }
  resp.mutable_node_ref()->Add(r.node_ref.begin(), r.node_ref.end());
  resp.mutable_tier()->Reserve(static_cast<int>(r.tier.size()));
  for (int32_t t : r.tier) resp.add_tier(static_cast<::umbp::TierType>(t));
  resp.mutable_size()->Add(r.size.begin(), r.size.end());
  r.offset.resize(keys.size(), 0);  // a store that leaves them short (misses): zeros, as Python pads
  r.checksum.resize(keys.size(), 0);
  resp.mutable_offset()->Add(r.offset.begin(), r.offset.end());
  resp.mutable_checksum()->Add(r.checksum.begin(), r.checksum.end());
  if (!resp.SerializeToString(&reply)) return false;
  count(NativeRpc::kBatchRouteGet, r, t0);
  return true;
#else
  return false;
#endif
}

bool NativeRoutes::batch_lookup(std::string_view request, std::string& reply) {
#if MORI_UMBP_HAVE_PROTOBUF
  if (!lookup_) return false;
  const double t0 = steady_s();
  ::umbp::BatchLookupRequest req;
  if (!req.ParseFromArray(request.data(), static_cast<int>(request.size()))) return false;
  std::vector<std::string> keys(req.keys().begin(), req.keys().end());
  std::vector<bool> found;
  for (int look = 0;; ++look) {
    const uint64_t dones = pending_ != nullptr ? pending_->dones() : 0;
    found = keys.empty() ? std::vector<bool>{} : lookup_(keys);
    if (found.size() != keys.size()) return false;
    // A routed put not yet reported counts: its put returned, or will.
    const double now = wall_s();
    bool missed = false;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!found[i] && pending_ != nullptr) found[i] = pending_->find(keys[i], now).has_value();
      missed = missed || !found[i];
    }
    // A key reported between the index's answer and the pending look is in neither: look again.
    if (!missed || pending_ == nullptr || pending_->dones() == dones || look == 2) break;
  }
  ::umbp::BatchLookupResponse resp;
  resp.mutable_found()->Reserve(static_cast<int>(keys.size()));
  for (size_t i = 0; i < keys.size(); ++i) resp.add_found(found[i]);
  return answer(resp, reply, NativeRpc::kBatchLookup, t0);
#else
  (void)request;
  (void)reply;
  return false;
#endif
}

bool NativeRoutes::route_get(std::string_view request, std::string& reply) {
  // One call is a batch of one: the same parse, route, reply and counts.
  std::vector<std::string> replies(1);
  std::vector<char> answered(1, 0);
  route_get_batch({request}, replies, answered);
  if (answered[0]) reply = std::move(replies[0]);
  return answered[0] != 0;
}

void NativeRoutes::route_get_batch(const std::vector<std::string_view>& requests, std::vector<std::string>& replies,
                                   std::vector<char>& answered) {
#if MORI_UMBP_HAVE_PROTOBUF
  const double t0 = steady_s();
  // The requests by the nodes they exclude (almost always none): one router call per group.
  std::map<std::vector<std::string>, std::vector<size_t>> groups;
  std::vector<std::string> keys(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    ::umbp::RouteGetRequest req;
    if (!req.ParseFromArray(requests[i].data(), static_cast<int>(requests[i].size()))) continue;
    keys[i] = std::move(*req.mutable_key());
    groups[std::vector<std::string>(req.exclude_nodes().begin(), req.exclude_nodes().end())].push_back(i);
  }
  for (const auto& [exclude, members] : groups) {
    std::vector<std::string> group_keys;
    group_keys.reserve(members.size());
    for (size_t i : members) group_keys.push_back(keys[i]);
    RoutedGets r;
    std::shared_ptr<const Alive> alive;
    // As route_get: a miss is a miss (no look at pending puts).
    if (!route(group_keys, exclude, r, alive, /*pending_matters=*/false)) continue;
    for (size_t j = 0; j < members.size(); ++j) {
      const size_t i = members[j];
      ::umbp::RouteGetResponse resp;
      Tally part;
      const uint32_t ref = j < r.node_ref.size() ? r.node_ref[j] : 0;
      if (ref == 0) {
        resp.set_found(false);
        part.misses = 1;
      } else {
        const std::string& node = r.nodes[ref - 1];
        resp.set_found(true);
        resp.set_node_id(node);
        resp.set_tier(static_cast<::umbp::TierType>(r.tier[j]));
        resp.set_size(r.size[j]);
        auto it = alive->peer.find(node);
        if (it != alive->peer.end()) resp.set_peer_address(it->second);
        part.hits[node] = 1;
      }
      if (!resp.SerializeToString(&replies[i])) continue;
      answered[i] = 1;
      count(NativeRpc::kRouteGet, part, t0);
    }
  }
#else
  (void)requests, (void)replies, (void)answered;
#endif
}

bool NativeRoutes::batch_route_put(std::string_view request, std::string& reply) {
#if MORI_UMBP_HAVE_PROTOBUF
  if (put_routes_ == nullptr || pending_ == nullptr || !lookup_ || python_puts_.load(std::memory_order_acquire))
    return false;
  const double t0 = steady_s();
  ::umbp::BatchRoutePutRequest req;
  if (!req.ParseFromArray(request.data(), static_cast<int>(request.size()))) return false;
  if (req.keys_size() != req.block_sizes_size()) return false;  // Python names the argument
  std::vector<std::string> keys;
  keys.reserve(req.keys_size());
  for (std::string& k : *req.mutable_keys()) keys.push_back(std::move(k));
  const std::unordered_set<std::string> exclude(req.exclude_nodes().begin(), req.exclude_nodes().end());
  const std::vector<bool> known = keys.empty() ? std::vector<bool>{} : lookup_(keys);
  if (known.size() != keys.size()) return false;
  const std::shared_ptr<const Alive> alive = alive_now();
  const double now = wall_s();
  const std::string& writer = req.node_id();
  const auto writer_peer = alive->peer.find(writer);
  ::umbp::BatchRoutePutResponse resp;
  resp.mutable_entries()->Reserve(static_cast<int>(keys.size()));
  std::unordered_set<std::string_view> seen;
  Tally t;
  for (size_t i = 0; i < keys.size(); ++i) {
    auto* e = resp.add_entries();
    const uint64_t size = req.block_sizes(static_cast<int>(i));
    if (known[i] || !seen.insert(keys[i]).second) {  // in the index, or earlier in this batch
      e->set_outcome(::umbp::ROUTE_PUT_OUTCOME_ALREADY_EXISTS);
      ++t.exists;
      continue;
    }
    std::optional<PutRoute> target;
    if (auto p = pending_->find(keys[i], now); p && !exclude.count(p->node_id)) {
      target = PutRoute{p->node_id, p->tier, p->peer_address};  // a concurrent writer's put: the same place
    } else if ((target = put_routes_->route(writer, size, alive->rooms, exclude))) {
      pending_->add(keys[i],
                    PendingPut{target->node_id, target->tier, target->peer_address, size, now + pending_ttl_s_}, now);
      ++t.routed;
    } else {
      // UNAVAILABLE: the writer keeps the value in its own store; gets are routed there meanwhile.
      e->set_outcome(::umbp::ROUTE_PUT_OUTCOME_UNAVAILABLE);
      ++t.unavailable;
      if (writer_peer != alive->peer.end())
        pending_->add(keys[i], PendingPut{writer, /*TIER_DRAM*/ 2, writer_peer->second, size, now + pending_ttl_s_},
                      now);
      continue;
    }
    e->set_outcome(::umbp::ROUTE_PUT_OUTCOME_ROUTED);
    e->set_node_id(target->node_id);
    e->set_tier(static_cast<::umbp::TierType>(target->tier));
    e->set_peer_address(target->peer_address);
    t.hits[target->node_id] += 1;
  }
  if (!resp.SerializeToString(&reply)) return false;
  count(NativeRpc::kBatchRoutePut, t, t0);
  return true;
#else
  (void)request;
  (void)reply;
  return false;
#endif
}

bool NativeRoutes::place_feed(std::string_view request, std::string& reply) {
#if MORI_UMBP_HAVE_PROTOBUF
  if (!feed_) return false;
  const double t0 = steady_s();
  ::umbp::PlaceFeedRequest req;
  if (!req.ParseFromArray(request.data(), static_cast<int>(request.size()))) return false;
  FeedSlice got;
  if (!feed_(req.feed_id(), req.since_seq(), req.max_entries(), got)) return false;
  ::umbp::PlaceFeedResponse resp;
  resp.set_feed_id(got.feed_id);
  resp.set_next_seq(got.next_seq);
  resp.set_gap(got.gap);
  resp.set_more(got.more);
  if (!got.entries.empty()) {
    const std::shared_ptr<const Alive> alive = alive_now();
    std::unordered_map<std::string_view, uint32_t> refs;
    for (const FedPlace& e : got.entries) {
      auto ref = refs.find(e.node_id);
      if (ref == refs.end()) {
        auto peer = alive->peer.find(e.node_id);
        if (peer == alive->peer.end()) continue;  // an owner gone: its places are of no use
        auto* node = resp.add_nodes();
        node->set_node_id(e.node_id);
        node->set_peer_address(peer->second);
        ref = refs.emplace(e.node_id, static_cast<uint32_t>(resp.nodes_size())).first;
      }
      resp.add_node_ref(ref->second);
      resp.add_keys(e.key);
      resp.add_added(e.added);
      resp.add_offset(e.offset);
      resp.add_size(e.size);
      resp.add_checksum(e.checksum);
    }
  }
  return answer(resp, reply, NativeRpc::kPlaceFeed, t0);
#else
  (void)request;
  (void)reply;
  return false;
#endif
}

NativeRoutes::Counts NativeRoutes::drain(NativeRpc rpc) {
  Counts c;
  std::lock_guard<std::mutex> lk(counts_mu_);
  Tally& t = tally_[static_cast<int>(rpc)];
  c.hits.assign(t.hits.begin(), t.hits.end());
  t.hits.clear();
  c.buckets.swap(t.buckets);
  t.buckets.assign(bounds_.size(), 0);
  c.latency_sum_s = t.latency_sum_s;
  t.latency_sum_s = 0;
  c.answered = t.answered;
  t.answered = 0;
  c.misses = t.misses;
  t.misses = 0;
  c.exists = std::exchange(t.exists, 0);
  c.routed = std::exchange(t.routed, 0);
  c.unavailable = std::exchange(t.unavailable, 0);
  return c;
}

}  // namespace mori::umbp
