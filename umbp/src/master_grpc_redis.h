// SPDX-License-Identifier: MIT
// The Redis store's get path for the master's grpc++ server, in C++ (hiredis): the same
// ROUTE_GET_BATCH Lua script the Python store runs (umbp/distributed/master_store_redis_scripts.py,
// handed over as text with its SHA-1, called with EVALSHA and loaded once when a Redis does not
// know it), over the same key layout and endpoint routing as RedisMetadataStore._group (shard =
// CRC-32 of the key modulo the block shards; endpoint = shard modulo the endpoints), one call per
// endpoint touched, the endpoints' calls in flight together. Then the copy each reader should use
// is chosen as GetRouter.choose does. Any Redis failure answers false: the call goes to the
// Python handler, which has the store's own retries and error reporting. In a Redis Cluster
// each shard is one hash slot: one call per shard touched, to the node that held the shard's
// slot when the master started (the Python store's cluster client says which); a MOVED or ASK
// reply after a resharding is a failure like any other, so the Python client serves that call.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "src/master_index.h"
#include "src/master_place_feed.h"

struct redisContext;

namespace mori::umbp {

// True when this build found hiredis (libhiredis-dev).
bool native_redis_available();

class RedisRoutes {
 public:
  struct Options {
    // One per endpoint: redis://[[user]:password@]host[:port][/db] or unix://[[user]:password@]/path[?db=N].
    std::vector<std::string> uris;
    std::string password;                     // UMBP_REDIS_PASSWORD (a password in a URI wins)
    std::vector<std::string> shard_prefixes;  // "{ns:b0}", ... (UMBP_REDIS_BLOCK_SHARDS of them)
    // Redis Cluster: per shard, the index into uris of the node holding its slot (empty: not a
    // cluster; shard s lives on endpoint s % uris.size()).
    std::vector<size_t> shard_endpoint;
    std::string script;                  // ROUTE_GET_BATCH's text
    std::string sha;                     // its SHA-1 in hex
    std::vector<int32_t> tier_priority;  // fastest first (GET_TIER_PRIORITY)
    double connect_timeout_s = 1.0;
    double socket_timeout_s = 1.0;
    size_t pool_size = 16;  // idle connections kept per endpoint
    // The place feed's _SINCE script (master_place_feed_redis.py): its text, SHA-1 and three keys
    // (stream, counter, feed id), on endpoint feed_endpoint. No keys: polls stay Python's.
    std::string feed_script, feed_sha;
    std::vector<std::string> feed_keys;
    size_t feed_endpoint = 0;
  };
  // Raises mori::Error (kInvalidArgument) for a URI it cannot serve (the caller keeps Python).
  explicit RedisRoutes(Options options);
  ~RedisRoutes();
  RedisRoutes(const RedisRoutes&) = delete;
  RedisRoutes& operator=(const RedisRoutes&) = delete;

  // The batch's routed gets as MasterIndex::route_choose gives them; false on any Redis failure.
  // alive: the live node ids.
  bool route_choose(const std::vector<std::string>& keys, const std::vector<std::string>& exclude,
                    const std::unordered_map<std::string, std::string>& alive, double now, double lease_until,
                    bool any_copy, RoutedGets& out);

  // Whether each key has a copy in the store (the store's lookup_batch: EXISTS, pipelined per
  // endpoint); false on any Redis failure.
  bool exists(const std::vector<std::string>& keys, std::vector<bool>& out);

  // A place-feed poll (PlaceFeed.since's rules, by the store's _SINCE script); false on any
  // Redis failure or without feed keys.
  bool place_feed(uint64_t feed_id, uint64_t seq, uint32_t max_entries, FeedSlice& out);

  uint64_t failures() const;                // Redis failures that sent a call to Python
  static constexpr double kBackoffS = 0.2;  // how long Python alone serves after a failure

 private:
  struct Endpoint {
    std::string host, user, password;
    std::string unix_path;  // unix://: the socket's path (host and port unused)
    int port = 6379;
    int db = 0;
    std::mutex mu;
    std::vector<redisContext*> idle;
  };
  redisContext* take(Endpoint& ep);
  void give(Endpoint& ep, redisContext* c);
  // A call's keys grouped as RedisMetadataStore._group groups them: by endpoint, or by shard in a
  // cluster (one script's keys must share a slot).
  size_t shard_of(const std::string& key) const;
  size_t group_count() const;
  size_t group_of(size_t shard) const;
  size_t endpoint_of_group(size_t group) const;
  // Back to the pool, unless the call failed on it or it broke (then closed); conn is cleared.
  void release(size_t endpoint, redisContext*& conn, bool failed);
  // A Redis failure: counted, and Python alone serves for kBackoffS. Returns false.
  bool failed_call();
  int rank(int32_t tier) const;

  Options opt_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  std::mutex rng_mu_;
  std::mt19937_64 rng_{std::random_device{}()};
  std::atomic<uint64_t> failures_{0};
  // After a failure the Python store alone serves for a moment (steady-clock seconds): a Redis
  // that is down or unreachable then costs a call one connection attempt, not two.
  std::atomic<double> python_until_{0};
};

}  // namespace mori::umbp
