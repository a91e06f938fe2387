// SPDX-License-Identifier: MIT
// The target side of the tcp transport: a progress engine that serves remote
// PEs' requests without this PE's application calling in. One listener thread
// accepts connections (net::Acceptor: strangers bounded in number and lifetime);
// each connection must prove the job secret (auth.h), then gets a service thread that
// applies puts, gets, atomics and signals into the regions this PE exposes,
// strictly in arrival order. Every request is checked against those regions
// before memory is touched; a bad request gets an error reply and the target
// keeps serving.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "mori/core/acceptor.h"
#include "mori/core/rate_limited_log.h"
#include "mori/core/socket_reader.h"
#include "mori/core/store.h"
#include "mori/transports/mem_region.h"
#include "mori/transports/transport.h"
#include "tcp/tcp_protocol.h"

namespace mori::tcp {

// Whether an atomic returns the old value (its reply carries it).
bool is_fetching(AmoOp op);

// The regions a PE exposes to its peers' requests, and the check every request passes before
// memory is touched: the tcp target's, and that of ucx's requests over active messages (where
// UCX has no hardware RMA, ucx_transport.cc), which carry the same Request.
class RegionTable {
 public:
  explicit RegionTable(int my_pe) : my_pe_(my_pe) {}
  // Makes [region.local_base, +region.size) reachable under region.id.
  void expose(const MemRegion& region);
  // Wakes a lookup that waits for a region still being registered; later lookups do not wait.
  void stop();

  // Where request `rq` of `peer` lands, checked: `data` is a put's destination, a get's source
  // or an atomic's word (aligned to its width), `signal` a put_signal's 8-byte aligned signal
  // word. Refused: both null, `status` and `error` say why, naming this PE and `peer`.
  struct Located {
    char* data = nullptr;
    char* signal = nullptr;
    ReplyStatus status = ReplyStatus::kOk;
    std::string error;
  };
  Located locate(const Request& rq, int peer);
  // Completes a located request once a put's payload is in `data`: the put_signal's signal
  // (release: whoever sees it sees the data) or a release fence; an atomic is applied and its
  // old value returned.
  static uint64_t apply(const Located& at, const Request& rq);

 private:
  struct Exposed {
    char* base;
    size_t size;
    MemKind kind;
  };
  char* find(uint32_t region, uint64_t offset, uint64_t length, int peer, const char* what, Located* at);

  const int my_pe_;
  std::atomic<bool> stopping_{false};
  mutable std::shared_mutex mu_;
  std::condition_variable_any cv_;
  std::map<uint32_t, Exposed> regions_;
};

class TcpTarget {
 public:
  struct Options {
    int my_pe = 0;
    int n_pes = 1;
    JobSecret secret{};
    std::string bind_ip = "0.0.0.0";
    double timeout_s = 120;  // liveness budget of connections (keepalive, handshakes)
    // Called after remote data lands in [offset, offset + length) of `region` (rings the doorbell).
    std::function<void(uint32_t region, uint64_t offset, uint64_t length)> on_write;
  };

  explicit TcpTarget(Options options);
  ~TcpTarget();
  TcpTarget(const TcpTarget&) = delete;
  TcpTarget& operator=(const TcpTarget&) = delete;

  int port() const { return port_; }

  // Makes [region.local_base, +region.size) reachable under region.id. The memory must
  // stay mapped until this target is destroyed (stop() joins every service thread).
  void expose(const MemRegion& region);

  // First PE whose primary connection broke without a goodbye, or -1.
  int dead_peer() const { return first_dead_.load(std::memory_order_acquire); }
  // Whether `pe` said goodbye (finalized) on its primary connection.
  bool finalized(int pe) const;

  // Stops accepting and serving; joins every thread. Idempotent.
  void stop();

 private:
  void serve(net::Connection& conn);
  // Returns the PE on success; -1 if the peer was refused (and told, where it authenticated).
  int handshake(net::Connection& conn, bool* primary);
  // Applies one request; returns false when the connection must close.
  bool handle(int fd, SocketReader& in, const Request& rq, int peer, bool* bye);
  void mark_gone(int pe, bool said_bye, const std::string& why);

  Options opt_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  log::RateLimit refusals_log_;

  RegionTable regions_;

  mutable std::mutex peers_mu_;
  size_t authenticated_ = 0;           // connections being served
  std::vector<uint8_t> primary_live_;  // per PE: a primary connection is being served
  std::vector<uint8_t> said_bye_;      // per PE: finalized on purpose
  std::atomic<int> first_dead_{-1};
  std::unique_ptr<net::Acceptor> acceptor_;  // last: its threads use everything above
};

}  // namespace mori::tcp
