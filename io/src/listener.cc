// SPDX-License-Identifier: MIT
#include "src/listener.h"

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

#include "mori/core/auth.h"
#include "mori/core/log.h"
#include "mori/core/socket.h"
#include "mori/core/socket_reader.h"
#include "mori/core/status.h"
#include "src/engine_impl.h"
#include "src/network_ordered.h"
#include "src/registry.h"
#include "src/send_message.h"
#include "src/socket_poll.h"

namespace mori::io {

Listener::Listener(EngineImpl& engine, const std::string& host, int port) : engine_(engine) {
  UniqueFd fd = net::listen_tcp(host, port, &port_);
  net::Acceptor::Options opt;
  opt.service = "IO engine '" + engine_.key() + "'";
  opt.subsys = "IO";
  opt.pending_lifetime_s = engine_.settings().connect_timeout_s;
  acceptor_ = std::make_unique<net::Acceptor>(std::move(fd), opt, [this](net::Connection& c) { serve(c); });
}

Listener::~Listener() {
  stopping_.store(true);
  acceptor_->stop();  // shuts every connection down and joins its thread
}

wire::HelloReply Listener::admit_peer(Conn* c, bool known) {
  const auto& s = engine_.settings();
  wire::HelloReply reply{wire::kVersion, static_cast<uint32_t>(wire::HelloStatus::kAccepted), 0};
  std::lock_guard<std::mutex> lock(mu_);
  size_t mine = 0;
  for (Conn* o : conns_) mine += o->peer_key == c->peer_key;
  if (conns_.size() >= s.max_connections) {
    reply.status = static_cast<uint32_t>(wire::HelloStatus::kTooManyTotal);
    reply.limit = static_cast<uint32_t>(s.max_connections);
  } else if (mine >= s.max_connections_per_peer) {
    reply.status = static_cast<uint32_t>(wire::HelloStatus::kTooManyPeer);
    reply.limit = static_cast<uint32_t>(s.max_connections_per_peer);
  } else {
    if (known) reply.status = static_cast<uint32_t>(wire::HelloStatus::kProveIdentity);
    conns_.insert(c);  // counted from now on (revocations skip it until it is ready)
  }
  return reply;
}

void Listener::serve(net::Connection& nc) {
  const auto& s = engine_.settings();
  Conn conn;
  Conn* c = &conn;
  c->fd = nc.fd();
  bool authenticated = false, counted = false, impostor = false;
  wire::HelloReply verdict{};
  try {
    net::set_timeouts(c->fd, s.connect_timeout_s);
    double deadline = net::now() + s.connect_timeout_s;
    const std::string& secret = engine_.desc().secret;
    if (auth::server_handshake(c->fd, secret.data(), secret.size(), wire::kAuthLabel, deadline)) {
      wire::Hello hello{};
      if (net::recv_all(c->fd, &hello, sizeof(hello), deadline) && hello.version == wire::kVersion &&
          hello.key_len <= wire::kMaxKey) {
        c->peer_key.resize(hello.key_len);
        if (hello.key_len == 0 || net::recv_all(c->fd, c->peer_key.data(), hello.key_len, deadline)) {
          std::string claimed;
          bool known = engine_.secret_of(c->peer_key, &claimed);
          verdict = admit_peer(c, known);
          counted = verdict.status == static_cast<uint32_t>(wire::HelloStatus::kAccepted) ||
                    verdict.status == static_cast<uint32_t>(wire::HelloStatus::kProveIdentity);
          net::send_all(c->fd, &verdict, sizeof(verdict));
          if (counted && known) {
            // It names an engine we know: it must prove it is that engine (its own secret).
            impostor = true;
            auth::client_handshake(c->fd, claimed.data(), claimed.size(), wire::kIdentityLabel, deadline);
            impostor = false;
            c->verified = true;
          }
          if (counted) authenticated = nc.admit();
        }
      }
    }
  } catch (const std::exception&) {
  }
  if (!authenticated) {
    if (counted) {
      std::lock_guard<std::mutex> lock(mu_);
      conns_.erase(c);
    }
    uint64_t suppressed = 0;
    if (nc.evicted() || !refusals_log_.allow(&suppressed)) return;
    std::string tail = suppressed ? format(" (%llu similar lines suppressed)", (unsigned long long)suppressed) : "";
    auto status = static_cast<wire::HelloStatus>(verdict.status);
    if (impostor)
      MORI_LOG(kWarn, "IO",
               "engine '%s' refused a connection from %s that claimed to be engine '%s' but could not "
               "prove it%s",
               engine_.key().c_str(), nc.peer().c_str(), c->peer_key.c_str(), tail.c_str());
    else if (status == wire::HelloStatus::kTooManyTotal || status == wire::HelloStatus::kTooManyPeer)
      MORI_LOG(
          kWarn, "IO", "engine '%s' refused a connection of engine '%s' from %s: %u %s served already (%s)%s",
          engine_.key().c_str(), c->peer_key.c_str(), nc.peer().c_str(), verdict.limit,
          status == wire::HelloStatus::kTooManyTotal ? "connections are" : "of its connections are",
          status == wire::HelloStatus::kTooManyTotal ? "MORI_IO_MAX_CONNECTIONS" : "MORI_IO_MAX_CONNECTIONS_PER_PEER",
          tail.c_str());
    else
      MORI_LOG(kWarn, "IO", "engine '%s' refused a connection from %s that could not prove its secret%s",
               engine_.key().c_str(), nc.peer().c_str(), tail.c_str());
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    c->ready = true;
  }
  try {
    net::set_nodelay(c->fd);
    net::set_timeouts(c->fd, s.timeout_s);
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
  send_message(c->fd, msg, engine_.settings().send_halves_upto, [&](int err) {
    if (err == EAGAIN || err == EWOULDBLOCK) raise(Status::kTimeout, "peer '%s' stopped reading", c->peer_key.c_str());
    errno = err;
    raise_errno("send to '%s'", c->peer_key.c_str());
  });
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
  SocketReader reader(c->fd, 256 * 1024);
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
  // An inbound transfer of this peer finished (a kNotify, or a request flagged kNotifyOnSuccess
  // that succeeded).
  auto notice = [&](uint64_t uid) {
    if (!c->verified) {
      // Only a proven sender's notifications count: anyone with our descriptor could
      // otherwise report "transfer done" in another engine's name.
      uint64_t suppressed = 0;
      if (unverified_log_.allow(&suppressed))
        MORI_LOG(kWarn, "IO",
                 "engine '%s': dropped a notification from a connection that says it is engine '%s' without "
                 "proof (register that engine's EngineDesc here before it connects)%s",
                 engine_.key().c_str(), c->peer_key.c_str(),
                 suppressed ? format(" (%llu similar lines suppressed)", (unsigned long long)suppressed).c_str() : "");
      return;
    }
    if (engine_.notifications_on()) engine_.note_inbound(c->peer_key, uid);
  };
  // The last write's payload was large, so the next request likely carries one too: its
  // header is then received alone when nothing is buffered, and the payload goes from the
  // kernel straight into registered memory. (Received with the header, up to the reader's
  // 256 KiB of it would come through the buffer and be copied: all of a 64 KiB write.)
  // Small writes keep one recv() for header and payload together.
  bool large_next = false;
  // MORI_IO_TCP_POLL_US: after serving a request, the thread polls the socket for the next
  // one before it sleeps (an initiator posting in a loop sends it within a round trip); a
  // connection idle for its receive timeout sleeps at once. It sleeps in recv() itself, as a
  // plain socket server does: a poll() first cost every request a system call on its path
  // (stop() wakes it by shutting the socket down; revocations are sent by revoke() while the
  // thread waits, or here before it waits again).
  const auto window = std::chrono::microseconds(engine_.settings().poll_us);
  bool active = false;
  while (!stopping_.load()) {
    if (!reader.buffered()) {
      batch.flush();  // everything received so far is answered: send it before waiting
      send_pending_revokes(c);
      if (active) poll_readable(c->fd, window);
    }
    wire::Request q;
    const SocketReader::Next next = reader.next(&q, sizeof(q), large_next);
    if (next == SocketReader::Next::kClosed) return;  // the initiator closed
    active = next == SocketReader::Next::kMessage;
    if (!active) {
      // Idle for MORI_IO_TIMEOUT_MS: rest in poll() up to 200 ms before recv() again, so that a
      // short timeout does not wake an idle connection's thread every few milliseconds.
      pollfd pfd{c->fd, POLLIN, 0};
      if (poll(&pfd, 1, 200) < 0 && errno != EINTR) raise_errno("poll");
      continue;
    }
    auto op = static_cast<wire::Op>(q.op);
    large_next = op == wire::Op::kWrite && q.length >= SocketReader::kDirectBytes;
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
        } else if (q.length) {
          // Nothing buffered (a large write's header came alone): the payload's segments are
          // taken as they arrive while polling, the rest (after the window) by blocking reads.
          char* dst = use->ptr + q.offset;
          NetworkOrderedAccess payload;
          size_t got = reader.buffered() ? 0 : recv_polling(c->fd, dst, q.length, window);
          if (got < q.length && !reader.read(dst + got, q.length - got))
            raise(Status::kRemote, "connection closed in a payload");
        }
        answer(q.id, status, why);
        if (status == StatusCode::SUCCESS && (q.flags & wire::kNotifyOnSuccess)) notice(q.aux);  // the data is in place
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
        } else {
          batch.add(make_reply(q.id, StatusCode::SUCCESS, "", q.length), "", src, q.length, std::move(use));
        }
        if (q.flags & wire::kNotifyOnSuccess) {
          batch.flush();  // the data has left this memory before the owner hears it may reuse it
          notice(q.aux);
        }
        break;
      }
      case wire::Op::kNotify: notice(q.aux); break;
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
      default: raise(Status::kRemote, "peer '%s' sent an unknown request %u", c->peer_key.c_str(), q.op);
    }
  }
}

static wire::Reply revoke_message(uint32_t region) {
  wire::Reply r{};
  r.kind = static_cast<uint8_t>(wire::ReplyKind::kRevoke);
  r.id = region;
  return r;
}

void Listener::send_pending_revokes(Conn* c) {
  std::vector<uint32_t> regions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    regions.swap(c->revokes_to_send);
  }
  for (uint32_t region : regions) reply(c, revoke_message(region), "", nullptr, 0);
}

bool Listener::revoke(uint32_t region, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                         std::chrono::duration<double>(timeout_s));
  std::unique_lock<std::mutex> lock(mu_);
  for (Conn* c : conns_) {
    if (!c->ready) continue;  // still in its handshakes: it can get no grant for a retired region
    // Every peer hears of it (its sessions turn dead); those with a grant drop it first.
    c->granted.erase(region);
    c->revoking.insert(region);
    // Never block here on one peer: a connection busy sending (maybe to a peer that stopped
    // reading) gets the message from its own thread once it is free.
    bool sent = false;
    if (c->send_mu.try_lock()) {
      std::lock_guard<std::mutex> send_lock(c->send_mu, std::adopt_lock);
      wire::Reply r = revoke_message(region);
      ssize_t k = ::send(c->fd, &r, sizeof(r), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (k == static_cast<ssize_t>(sizeof(r)))
        sent = true;
      else if (k > 0)
        ::shutdown(c->fd, SHUT_RDWR);  // a torn message: the connection is unusable
    }
    if (!sent) c->revokes_to_send.push_back(region);
  }
  bool confirmed = cv_.wait_until(lock, deadline, [&] {
    for (Conn* c : conns_)
      if (c->revoking.count(region)) return false;
    return true;
  });
  if (!confirmed)
    for (Conn* c : conns_)
      if (c->revoking.count(region)) {
        MORI_LOG(kWarn, "IO",
                 "engine '%s': peer '%s' did not confirm the deregistration of region %u within %.1f s "
                 "(MORI_IO_TIMEOUT_MS): disconnected",
                 engine_.key().c_str(), c->peer_key.c_str(), region, timeout_s);
        c->revoking.erase(region);
        ::shutdown(c->fd, SHUT_RDWR);  // its thread fails at once and lets the region go
      }
  return confirmed;
}

}  // namespace mori::io
