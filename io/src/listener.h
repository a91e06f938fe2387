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

#include "io/src/wire.h"
#include "mori/core/acceptor.h"
#include "mori/core/rate_limited_log.h"

namespace mori::io {

class EngineImpl;

class Listener {
 public:
  Listener(EngineImpl& engine, const std::string& host, int port);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  int port() const { return port_; }
  // Tells every peer that holds a grant for `region` to drop it and waits (up to
  // timeout_s) for each to confirm. False if some peer did not answer in time.
  bool revoke(uint32_t region, double timeout_s);

 private:
  // One authenticated peer's connection (lives on its handler's stack).
  struct Conn {
    int fd = -1;
    std::string peer_key;
    std::mutex send_mu;
    std::set<uint32_t> granted;   // guarded by the listener's mu_
    std::set<uint32_t> revoking;  // guarded by the listener's mu_
  };

  void serve(net::Connection& nc);
  void serve_requests(Conn* c);
  void reply(Conn* c, const wire::Reply& r, const std::string& message, const void* payload, size_t n);
  void send_iov(Conn* c, std::vector<iovec>& iov);

  EngineImpl& engine_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  log::RateLimit refusals_log_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<Conn*> conns_;
  std::unique_ptr<net::Acceptor> acceptor_;  // last: stopped first
};

}  // namespace mori::io
