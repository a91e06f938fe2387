// SPDX-License-Identifier: MIT
// The target's side: accepts connections, lets in only peers that prove they hold this
// engine's secret, and serves their reads, writes, notifications and grants against the
// registry, each request checked (region, key, range) before memory is touched.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <sys/uio.h>

#include "mori/core/acceptor.h"
#include "mori/core/rate_limited_log.h"
#include "src/wire.h"

namespace mori::io {

class EngineImpl;

class Listener {
 public:
  Listener(EngineImpl& engine, const std::string& host, int port);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  int port() const { return port_; }
  // Tells every connected peer that `region` is gone (those with a grant drop it) and
  // waits (up to timeout_s in all, whatever the number of peers) for each to confirm.
  // A peer that cannot be told or does not confirm in time is disconnected, so that it
  // neither keeps access nor keeps the region in use. False if that happened.
  bool revoke(uint32_t region, double timeout_s);

 private:
  // One authenticated peer's connection (lives on its handler's stack).
  struct Conn {
    int fd = -1;
    std::string peer_key;
    bool verified = false;  // proved it is engine `peer_key` (its notifications count)
    bool ready = false;     // past the handshakes (guarded by the listener's mu_)
    std::mutex send_mu;
    std::set<uint32_t> granted;             // guarded by the listener's mu_
    std::set<uint32_t> revoking;            // guarded by the listener's mu_
    std::vector<uint32_t> revokes_to_send;  // its thread was busy sending: it sends them (mu_)
  };

  void serve(net::Connection& nc);
  void serve_requests(Conn* c);
  void reply(Conn* c, const wire::Reply& r, const std::string& message, const void* payload, size_t n);
  void send_iov(Conn* c, std::vector<iovec>& iov);
  // Sends what revoke() left to this connection's thread.
  void send_pending_revokes(Conn* c);
  // After the hello: whether the caps leave room for one more connection of c->peer_key
  // (then c is counted), else the refusal to send.
  wire::HelloReply admit_peer(Conn* c, bool known);

  EngineImpl& engine_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  log::RateLimit refusals_log_;
  log::RateLimit unverified_log_{1, 10};
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<Conn*> conns_;
  std::unique_ptr<net::Acceptor> acceptor_;  // last: stopped first
};

}  // namespace mori::io
