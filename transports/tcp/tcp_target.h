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
#include "tcp/tcp_protocol.h"

namespace mori::tcp {

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
  struct Exposed {
    char* base;
    size_t size;
    MemKind kind;
  };
  void serve(net::Connection& conn);
  // Returns the PE on success; -1 if the peer was refused (and told, where it authenticated).
  int handshake(net::Connection& conn, bool* primary);
  // Applies one request; returns false when the connection must close.
  bool handle(int fd, SocketReader& in, const Request& rq, int peer, bool* bye);
  // The exposed memory for (region, offset, length), or an error text.
  char* locate(uint32_t region, uint64_t offset, uint64_t length, int peer, const char* what, ReplyStatus* status,
               std::string* error);
  void mark_gone(int pe, bool said_bye, const std::string& why);

  Options opt_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  log::RateLimit refusals_log_;

  mutable std::shared_mutex regions_mu_;
  std::condition_variable_any regions_cv_;
  std::map<uint32_t, Exposed> regions_;

  mutable std::mutex peers_mu_;
  size_t authenticated_ = 0;           // connections being served
  std::vector<uint8_t> primary_live_;  // per PE: a primary connection is being served
  std::vector<uint8_t> said_bye_;      // per PE: finalized on purpose
  std::atomic<int> first_dead_{-1};
  std::unique_ptr<net::Acceptor> acceptor_;  // last: its threads use everything above
};

}  // namespace mori::tcp
