// SPDX-License-Identifier: MIT
#include "io/src/listener.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <vector>

#include "io/src/engine_impl.h"
#include "io/src/registry.h"
#include "mori/core/auth.h"
#include "mori/core/log.h"
#include "mori/core/socket.h"
#include "mori/core/status.h"
#include "transports/tcp/socket_reader.h"

namespace mori::io {

Listener::Listener(EngineImpl& engine, const std::string& host, int port) : engine_(engine) {
  int fd = net::listen_tcp(host, port, &port_);
  net::Acceptor::Options opt;
  opt.service = "IO engine '" + engine_.key() + "'";
  opt.subsys = "IO";
  opt.pending_lifetime_s = engine_.settings().connect_timeout_s;
  acceptor_ = std::make_unique<net::Acceptor>(fd, opt, [this](net::Connection& c) { serve(c); });
}

Listener::~Listener() {
  stopping_.store(true);
  acceptor_->stop();  // shuts every connection down and joins its thread
}

static void set_timeouts(int fd, double seconds) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(seconds);
  tv.tv_usec = static_cast<suseconds_t>((seconds - static_cast<double>(tv.tv_sec)) * 1e6);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

void Listener::serve(net::Connection& nc) {
  const auto& s = engine_.settings();
  Conn conn;
  Conn* c = &conn;
  c->fd = nc.fd();
  bool authenticated = false;
  try {
    set_timeouts(c->fd, s.connect_timeout_s);
    double deadline = net::now() + s.connect_timeout_s;
    const std::string& secret = engine_.desc().secret;
    if (auth::server_handshake(c->fd, secret.data(), secret.size(), wire::kAuthLabel, deadline)) {
      wire::Hello hello{};
      if (net::recv_all(c->fd, &hello, sizeof(hello), deadline) && hello.version == wire::kVersion &&
          hello.key_len <= wire::kMaxKey) {
        c->peer_key.resize(hello.key_len);
        if (hello.key_len == 0 || net::recv_all(c->fd, c->peer_key.data(), hello.key_len, deadline)) {
          wire::HelloReply reply{wire::kVersion, 1};
          net::send_all(c->fd, &reply, sizeof(reply));
          authenticated = nc.admit();
        }
      }
    }
  } catch (const std::exception&) {
  }
  if (!authenticated) {
    uint64_t suppressed = 0;
    if (!nc.evicted() && refusals_log_.allow(&suppressed))
      MORI_LOG(kWarn, "IO", "engine '%s' refused a connection from %s that could not prove its secret%s",
               engine_.key().c_str(), nc.peer().c_str(),
               suppressed ? format(" (%llu similar lines suppressed)", (unsigned long long)suppressed).c_str() : "");
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    conns_.insert(c);
  }
  try {
    net::set_nodelay(c->fd);
    set_timeouts(c->fd, s.timeout_s);
    int buf = 4 << 20;  // as the initiator's lanes: a read reply of a few MiB need not wait for the window to grow
    setsockopt(c->fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
    serve_requests(c);
  } catch (const std::exception& e) {
    MORI_LOG(kInfo, "IO", "engine '%s': connection from '%s' ended: %s", engine_.key().c_str(), c->peer_key.c_str(),
             e.what());
  }
  ::shutdown(c->fd, SHUT_RDWR);
  {
    std::lock_guard<std::mutex> lock(mu_);
    conns_.erase(c);
  }
  cv_.notify_all();
}

void Listener::send_iov(Conn* c, std::vector<iovec>& iov) {
  msghdr msg{};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = iov.size();
  std::lock_guard<std::mutex> lock(c->send_mu);
  while (msg.msg_iovlen > 0) {
    ssize_t k = ::sendmsg(c->fd, &msg, MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) raise(Status::kTimeout, "peer '%s' stopped reading", c->peer_key.c_str());
      raise_errno("send to '%s'", c->peer_key.c_str());
    }
    net::advance_iov(msg, static_cast<size_t>(k));
  }
}

void Listener::reply(Conn* c, const wire::Reply& r, const std::string& message, const void* payload, size_t n) {
  std::vector<iovec> iov = {{const_cast<wire::Reply*>(&r), sizeof(r)},
                            {const_cast<char*>(message.data()), message.size()},
                            {const_cast<void*>(payload), n}};
  send_iov(c, iov);
}

static wire::Reply make_reply(uint64_t id, StatusCode status, const std::string& message, uint64_t length) {
  wire::Reply r{};
  r.kind = static_cast<uint8_t>(wire::ReplyKind::kReply);
  r.status = static_cast<uint8_t>(status);
  r.message_len = static_cast<uint16_t>(message.size());
  r.id = id;
  r.length = length;
  return r;
}

// Replies of one connection, sent together when the requests that were already received
// are answered (one sendmsg for a batch of 128 small writes instead of 128). Payloads are
// sent from registered memory: the batch keeps those regions in use until it is sent.
class ReplyBatch {
 public:
  explicit ReplyBatch(std::function<void(std::vector<iovec>&)> send) : send_(std::move(send)) {}
  void add(const wire::Reply& r, std::string message, const void* payload, size_t n, RegionUse use) {
    headers_.push_back(r);
    iov_.push_back({&headers_.back(), sizeof(wire::Reply)});
    if (!message.empty()) {
      messages_.push_back(std::move(message));
      iov_.push_back({messages_.back().data(), messages_.back().size()});
    }
    if (n) iov_.push_back({const_cast<void*>(payload), n});
    if (use) holds_.push_back(std::move(use));
    bytes_ += n;
    if (headers_.size() >= 128 || bytes_ >= (4u << 20) || iov_.size() >= 512) flush();
  }
  void flush() {
    if (iov_.empty()) return;
    send_(iov_);
    iov_.clear();
    headers_.clear();
    messages_.clear();
    holds_.clear();
    bytes_ = 0;
  }

 private:
  std::function<void(std::vector<iovec>&)> send_;
  std::deque<wire::Reply> headers_;  // a deque: addresses stay put while iov_ points at them
  std::deque<std::string> messages_;
  std::vector<iovec> iov_;
  std::vector<RegionUse> holds_;
  size_t bytes_ = 0;
};

void Listener::serve_requests(Conn* c) {
  tcp::SocketReader reader(c->fd, 256 * 1024);
  std::unique_ptr<gpu::HostBuffer> staging;
  auto stage = [&](size_t n) -> char* {
    if (!staging || staging->size() < n) staging = std::make_unique<gpu::HostBuffer>(std::max<size_t>(n, 1 << 20));
    return staging->data();
  };
  Registry& registry = engine_.registry();
  ReplyBatch batch([&](std::vector<iovec>& iov) { send_iov(c, iov); });
  auto answer = [&](uint64_t id, StatusCode status, const std::string& why) {
    batch.add(make_reply(id, status, why, 0), why, nullptr, 0, RegionUse());
  };
  while (!stopping_.load()) {
    if (!reader.buffered()) {
      batch.flush();  // everything received so far is answered: send it before waiting
      pollfd pfd{c->fd, POLLIN, 0};
      int rc = poll(&pfd, 1, 200);
      if (rc < 0 && errno != EINTR) raise_errno("poll");
      if (rc <= 0) continue;
    }
    wire::Request q;
    if (!reader.read(&q, sizeof(q))) return;  // the initiator closed
    auto op = static_cast<wire::Op>(q.op);
    if ((op == wire::Op::kWrite || op == wire::Op::kRead) && q.length > wire::kMaxChunk)
      raise(Status::kRemote, "peer '%s' announced a %llu-byte request", c->peer_key.c_str(),
            static_cast<unsigned long long>(q.length));
    std::string why;
    switch (op) {
      case wire::Op::kWrite: {
        RegionUse use = registry.acquire(q.region, q.region_key, q.offset, q.length, true, &why);
        if (!use) {
          reader.skip(q.length);
          answer(q.id, StatusCode::ERR_INVALID_ARGS, why);
          break;
        }
        StatusCode status = StatusCode::SUCCESS;
        if (use->loc == MemoryLocationType::GPU) {
          char* buf = stage(q.length);
          if (!reader.read(buf, q.length)) raise(Status::kRemote, "connection closed in a payload");
          why = gpu::copy_to_device(use->ptr + q.offset, buf, q.length, use->device);
          if (!why.empty()) status = StatusCode::ERR_GPU_OP;
        } else if (q.length && !reader.read(use->ptr + q.offset, q.length)) {
          raise(Status::kRemote, "connection closed in a payload");
        }
        answer(q.id, status, why);
        break;
      }
      case wire::Op::kRead: {
        RegionUse use = registry.acquire(q.region, q.region_key, q.offset, q.length, true, &why);
        if (!use) {
          answer(q.id, StatusCode::ERR_INVALID_ARGS, why);
          break;
        }
        const char* src = use->ptr + q.offset;
        if (use->loc == MemoryLocationType::GPU) {
          char* buf = stage(q.length);
          why = gpu::copy_to_host(buf, src, q.length, use->device);
          if (!why.empty()) {
            answer(q.id, StatusCode::ERR_GPU_OP, why);
            break;
          }
          batch.add(make_reply(q.id, StatusCode::SUCCESS, "", q.length), "", buf, q.length, RegionUse());
          batch.flush();  // the staging buffer is reused by the next request
          break;
        }
        batch.add(make_reply(q.id, StatusCode::SUCCESS, "", q.length), "", src, q.length, std::move(use));
        break;
      }
      case wire::Op::kNotify:
        engine_.note_inbound(c->peer_key, q.aux);
        break;
      case wire::Op::kGrant: {
        RegionUse use = registry.acquire(q.region, q.region_key, 0, 0, true, &why);
        if (use && use->loc != MemoryLocationType::CPU) why = "direct access is for CPU memory only";
        if (!why.empty()) {
          answer(q.id, StatusCode::ERR_INVALID_ARGS, why);
          break;
        }
        wire::GrantReply g{};
        g.pid = static_cast<uint64_t>(getpid());
        g.addr = reinterpret_cast<uint64_t>(use->ptr);
        g.size = use->size;
        g.token_addr = reinterpret_cast<uint64_t>(engine_.token());
        std::memcpy(g.token, engine_.token(), sizeof(g.token));
        {
          std::lock_guard<std::mutex> lock(mu_);
          c->granted.insert(q.region);
        }
        batch.add(make_reply(q.id, StatusCode::SUCCESS, "", sizeof(g)), "", &g, sizeof(g), RegionUse());
        batch.flush();
        break;
      }
      case wire::Op::kRevokeAck: {
        std::lock_guard<std::mutex> lock(mu_);
        c->revoking.erase(static_cast<uint32_t>(q.aux));
        cv_.notify_all();
        break;
      }
      default:
        raise(Status::kRemote, "peer '%s' sent an unknown request %u", c->peer_key.c_str(), q.op);
    }
  }
}

bool Listener::revoke(uint32_t region, double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  for (Conn* c : conns_) {
    // Every peer hears of it (its sessions turn dead); those with a grant drop it first.
    c->granted.erase(region);
    c->revoking.insert(region);
    wire::Reply r{};
    r.kind = static_cast<uint8_t>(wire::ReplyKind::kRevoke);
    r.id = region;
    try {
      reply(c, r, "", nullptr, 0);
    } catch (const std::exception&) {
      c->revoking.erase(region);
      ::shutdown(c->fd, SHUT_RDWR);  // a peer we cannot tell must not keep access
    }
  }
  return cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] {
    for (Conn* c : conns_)
      if (c->revoking.count(region)) return false;
    return true;
  });
}

}  // namespace mori::io
