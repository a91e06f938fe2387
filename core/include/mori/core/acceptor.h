// SPDX-License-Identifier: MIT
// The accept side of a TCP service that anyone on the network can reach (the bootstrap store,
// the tcp transport's target): one thread per connection, hardened against strangers.
//   - At most `max_pending` connections may be unauthenticated at once; a new one evicts the
//     oldest stranger (a real peer authenticates within a round trip, an idle attacker does not).
//   - An unauthenticated connection lives at most `pending_lifetime_s`.
//   - A descriptor is closed as soon as its connection's thread ends.
//   - The accept loop never gives up: out of descriptors (EMFILE/ENFILE) it evicts a stranger,
//     waits a moment and goes on.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>

#include "mori/core/rate_limited_log.h"
#include "mori/core/unique_fd.h"

namespace mori::net {

class Acceptor;

// One accepted connection, handed to the service's handler on a thread of its own.
class Connection {
 public:
  int fd() const { return fd_.get(); }
  const std::string& peer() const { return peer_; }  // "ip:port" of the other end
  // Call once the peer proved the secret: the connection stops counting as a stranger's and is
  // never evicted. Returns false when it was evicted meanwhile (the handler should give up).
  bool admit();
  // Whether the acceptor closed this connection to make room or because it took too long
  // (already logged: the handler need not report its failure again).
  bool evicted() const;

 private:
  friend class Acceptor;
  Acceptor* owner_ = nullptr;
  UniqueFd fd_;
  std::string peer_;
  double accepted_at_ = 0;
  bool admitted_ = false, evicted_ = false;  // guarded by the owner's mutex
  std::atomic<bool> done_{false};
  std::thread thread_;
};

class Acceptor {
 public:
  struct Options {
    std::string service;             // named in log lines, e.g. "bootstrap store"
    const char* subsys = "NET";      // log subsystem
    size_t max_pending = 64;         // unauthenticated connections at once
    double pending_lifetime_s = 10;  // how long a stranger may take to authenticate
  };
  using Handler = std::function<void(Connection&)>;

  // Owns `listen_fd` and starts accepting. `handler` runs once per connection, on
  // its own thread; an exception it throws ends that connection only.
  Acceptor(UniqueFd listen_fd, Options options, Handler handler);
  ~Acceptor();
  Acceptor(const Acceptor&) = delete;
  Acceptor& operator=(const Acceptor&) = delete;

  // Stops accepting, shuts every connection down, joins every thread, closes every descriptor.
  // Idempotent.
  void stop();

 private:
  friend class Connection;
  void loop();
  void reap_locked();
  void evict_locked(Connection& c, const char* why);
  size_t pending_locked() const;
  Connection* oldest_pending_locked();

  UniqueFd listen_fd_;
  Options opt_;
  Handler handler_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::list<Connection> conns_;  // a list: connections never move while their thread runs
  log::RateLimit evictions_log_;
  std::thread thread_;
};

}  // namespace mori::net
