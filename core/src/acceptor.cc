// SPDX-License-Identifier: MIT
#include "mori/core/acceptor.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>

#include "mori/core/log.h"
#include "mori/core/socket.h"
#include "mori/core/thread_name.h"

namespace mori::net {

bool Connection::admit() {
  std::lock_guard<std::mutex> lock(owner_->mu_);
  if (evicted_) return false;
  admitted_ = true;
  return true;
}

bool Connection::evicted() const {
  std::lock_guard<std::mutex> lock(owner_->mu_);
  return evicted_;
}

Acceptor::Acceptor(UniqueFd listen_fd, Options options, Handler handler)
    : listen_fd_(std::move(listen_fd)), opt_(std::move(options)), handler_(std::move(handler)) {
  thread_ = std::thread([this] { loop(); });
  name_thread(thread_, "mori-accept");
}

Acceptor::~Acceptor() { stop(); }

void Acceptor::stop() {
  if (stopping_.exchange(true)) return;
  ::shutdown(listen_fd_.get(), SHUT_RDWR);  // wakes poll()/accept()
  if (thread_.joinable()) thread_.join();
  listen_fd_.reset();
  std::list<Connection> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Connection& c : conns_) ::shutdown(c.fd_.get(), SHUT_RDWR);  // wakes blocked recv()/send()
    conns.splice(conns.end(), conns_);
  }
  for (Connection& c : conns) {
    if (c.thread_.joinable()) c.thread_.join();
    c.fd_.reset();
  }
}

size_t Acceptor::pending_locked() const {
  size_t n = 0;
  for (const Connection& c : conns_) n += !c.admitted_ && !c.evicted_ && !c.done_.load();
  return n;
}

Connection* Acceptor::oldest_pending_locked() {
  for (Connection& c : conns_)  // in accept order
    if (!c.admitted_ && !c.evicted_ && !c.done_.load()) return &c;
  return nullptr;
}

void Acceptor::evict_locked(Connection& c, const char* why) {
  c.evicted_ = true;
  // Only shut down here: the descriptor stays ours until its thread has ended (see reap_locked),
  // so its number cannot be reused under a thread still reading it.
  ::shutdown(c.fd_.get(), SHUT_RDWR);
  MORI_LOG_LIMITED(evictions_log_, kWarn, opt_.subsys, "%s: closed an unauthenticated connection from %s: %s",
                   opt_.service.c_str(), c.peer_.c_str(), why);
}

void Acceptor::reap_locked() {
  double now_s = now();
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (it->done_.load()) {
      it->thread_.join();
      it->fd_.reset();
      it = conns_.erase(it);
      continue;
    }
    if (!it->admitted_ && !it->evicted_ && now_s - it->accepted_at_ > opt_.pending_lifetime_s)
      evict_locked(*it, "it did not authenticate in time");
    ++it;
  }
}

void Acceptor::loop() {
  while (!stopping_.load()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      reap_locked();
    }
    pollfd pfd{listen_fd_.get(), POLLIN, 0};
    int rc = ::poll(&pfd, 1, 250);  // wakes now and then to reap and expire strangers
    if (stopping_.load()) return;
    if (rc <= 0) continue;
    UniqueFd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd) {
      int err = errno;
      if (stopping_.load()) return;
      if (err == EINTR || err == ECONNABORTED || err == EAGAIN) continue;
      std::lock_guard<std::mutex> lock(mu_);
      if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        if (Connection* c = oldest_pending_locked()) evict_locked(*c, "this process ran out of descriptors");
      } else {
        MORI_LOG_LIMITED(evictions_log_, kWarn, opt_.subsys, "%s: accept failed (%s); still listening",
                         opt_.service.c_str(), std::strerror(err));
      }
      // Let the evicted threads end; the loop reaps them before the next accept.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    set_nodelay(fd.get());
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_locked() >= opt_.max_pending)
      if (Connection* c = oldest_pending_locked()) evict_locked(*c, "too many connections are waiting to authenticate");
    Connection& c = conns_.emplace_back();
    c.owner_ = this;
    c.peer_ = peer_address(fd.get());
    c.fd_ = std::move(fd);
    c.accepted_at_ = now();
    try {
      c.thread_ = std::thread([this, &c] {
        try {
          handler_(c);
        } catch (const std::exception& e) {
          MORI_LOG(kDebug, opt_.subsys, "%s: connection from %s ended: %s", opt_.service.c_str(), c.peer_.c_str(),
                   e.what());
        }
        ::shutdown(c.fd_.get(), SHUT_RDWR);  // the peer sees the end now; the descriptor is closed by the reaper
        c.done_.store(true);
      });
      name_thread(c.thread_, "mori-conn");
    } catch (const std::system_error& e) {  // no thread to be had: drop this connection, keep listening
      MORI_LOG_LIMITED(evictions_log_, kWarn, opt_.subsys, "%s: dropped a connection from %s: %s", opt_.service.c_str(),
                       c.peer_.c_str(), e.what());
      c.fd_.reset();
      conns_.pop_back();
    }
  }
}

}  // namespace mori::net
