// SPDX-License-Identifier: MIT
// The target's side: accepts connections, lets in only peers that prove they hold this
// engine's secret, and serves their reads, writes, notifications and grants against the
// registry, each request checked (region, key, range) before memory is touched.
#pragma once

#include <atomic>
#include <condition_variable>
#include <list>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "io/src/wire.h"

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
  struct Conn {
    int fd = -1;
    std::string peer_key;
    std::mutex send_mu;
    std::set<uint32_t> granted;    // guarded by the listener's mu_
    std::set<uint32_t> revoking;   // guarded by the listener's mu_
    std::thread thread;
    std::atomic<bool> done{false};
    std::atomic<bool> ready{false};  // authenticated
  };

  void accept_loop();
  void serve(Conn* c);
  void serve_requests(Conn* c);
  void reply(Conn* c, const wire::Reply& r, const std::string& message, const void* payload, size_t n);
  void reap();  // joins finished connection threads

  EngineImpl& engine_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> unauthenticated_{0};
  std::atomic<uint64_t> refused_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::list<std::unique_ptr<Conn>> conns_;
};

}  // namespace mori::io
