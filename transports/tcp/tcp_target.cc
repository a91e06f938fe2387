// SPDX-License-Identifier: MIT
#include "transports/tcp/tcp_target.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "mori/core/log.h"
#include "mori/core/socket.h"
#include "mori/core/status.h"
#include "mori/transports/transport.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/socket_reader.h"

namespace mori::tcp {
namespace {

bool secrets_equal(const uint8_t* a, const uint8_t* b, size_t n) {
  uint8_t diff = 0;  // constant time: do not leak how many bytes matched
  for (size_t i = 0; i < n; ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

std::string peer_address(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  char buf[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &addr.sin_addr, buf, sizeof(buf));
  return std::string(buf) + ":" + std::to_string(ntohs(addr.sin_port));
}

void send_iov(int fd, iovec* iov, int count) {
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = static_cast<size_t>(count);
  while (msg.msg_iovlen > 0) {
    ssize_t k = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR) continue;
      raise_errno("tcp send");
    }
    net::advance_iov(msg, static_cast<size_t>(k));
  }
}

void send_reply(int fd, const Request& rq, ReplyStatus status, uint64_t value = 0, const void* data = nullptr,
                size_t length = 0) {
  Reply r{};
  r.status = static_cast<uint8_t>(status);
  r.op = rq.op;
  r.length = static_cast<uint32_t>(length);
  r.seq = rq.seq;
  r.value = value;
  iovec iov[2] = {{&r, sizeof(r)}, {const_cast<void*>(data), length}};
  send_iov(fd, iov, length ? 2 : 1);
}

// Logs the refusal on the target and sends it back to the initiator.
void send_error(int fd, const Request& rq, ReplyStatus status, std::string text) {
  MORI_LOG(kWarn, "TCP", "%s", text.c_str());
  if (text.size() > kMaxErrorText) text.resize(kMaxErrorText);
  send_reply(fd, rq, status, 0, text.data(), text.size());
}

bool is_fetching(AmoOp op) {
  switch (op) {
    case AmoOp::kFetch:
    case AmoOp::kSwap:
    case AmoOp::kCompareSwap:
    case AmoOp::kFetchAdd:
    case AmoOp::kFetchAnd:
    case AmoOp::kFetchOr:
    case AmoOp::kFetchXor:
      return true;
    default:
      return false;
  }
}

}  // namespace

TcpTarget::TcpTarget(Options options)
    : opt_(std::move(options)), primary_live_(opt_.n_pes, 0), said_bye_(opt_.n_pes, 0) {
  listen_fd_ = net::listen_tcp(opt_.bind_ip, 0, &port_);
  acceptor_ = std::thread([this] { accept_loop(); });
}

TcpTarget::~TcpTarget() { stop(); }

void TcpTarget::stop() {
  if (stopping_.exchange(true)) return;
  ::shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
  if (acceptor_.joinable()) acceptor_.join();
  net::close_fd(listen_fd_);
  regions_cv_.notify_all();
  std::list<Conn> conns;
  {
    std::lock_guard<std::mutex> lock(conns_mu_);
    for (Conn& c : conns_) ::shutdown(c.fd, SHUT_RDWR);  // wakes blocked recv()/send()
    conns.splice(conns.end(), conns_);
  }
  for (Conn& c : conns) {
    if (c.thread.joinable()) c.thread.join();
    net::close_fd(c.fd);
  }
}

void TcpTarget::expose(const MemRegion& region) {
  {
    std::unique_lock<std::shared_mutex> lock(regions_mu_);
    regions_[static_cast<uint32_t>(region.id)] = Exposed{region.local_base, region.size, region.kind};
  }
  regions_cv_.notify_all();
}

bool TcpTarget::finalized(int pe) const {
  std::lock_guard<std::mutex> lock(conns_mu_);
  return pe >= 0 && pe < opt_.n_pes && said_bye_[pe];
}

void TcpTarget::accept_loop() {
  // Each PE legitimately opens one connection; the slack covers auxiliary clients.
  const size_t max_conns = static_cast<size_t>(4 * opt_.n_pes + 16);
  while (!stopping_.load()) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (stopping_.load()) return;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      MORI_LOG(kError, "TCP", "PE %d: tcp listener failed: %s", opt_.my_pe, std::strerror(errno));
      return;
    }
    net::set_nodelay(fd);
    net::set_liveness(fd, opt_.timeout_s);
    std::lock_guard<std::mutex> lock(conns_mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {  // reap finished connections
      if (it->done.load()) {
        it->thread.join();
        net::close_fd(it->fd);
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
    if (conns_.size() >= max_conns) {
      MORI_LOG(kWarn, "TCP", "PE %d: dropping a connection from %s: already %zu connections", opt_.my_pe,
               peer_address(fd).c_str(), conns_.size());
      HelloReply r{};
      r.status = static_cast<uint8_t>(HelloStatus::kBusy);
      r.pe = opt_.my_pe;
      ::send(fd, &r, sizeof(r), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::close(fd);
      continue;
    }
    Conn& c = conns_.emplace_back();
    c.fd = fd;
    c.thread = std::thread([this, &c] { serve(&c); });
  }
}

int TcpTarget::handshake(int fd, bool* primary) {
  Hello h{};
  // A stranger gets a few seconds to introduce itself.
  double deadline = net::now() + std::min(10.0, opt_.timeout_s);
  if (!net::recv_all(fd, &h, sizeof(h), deadline)) return -1;
  HelloReply reply{};
  reply.pe = opt_.my_pe;
  reply.max_chunk = kMaxChunk;
  HelloStatus status = HelloStatus::kOk;
  *primary = (h.flags & kHelloPrimary) != 0;
  if (std::memcmp(h.magic, kHelloMagic, sizeof(kHelloMagic)) != 0 ||
      !secrets_equal(h.secret, opt_.secret.data(), opt_.secret.size())) {
    status = HelloStatus::kRefused;
  } else if (h.version != kProtocolVersion) {
    status = HelloStatus::kBadVersion;
  } else if (h.to_pe != opt_.my_pe || h.from_pe < 0 || h.from_pe >= opt_.n_pes || h.from_pe == opt_.my_pe) {
    status = HelloStatus::kWrongPe;
  } else if (*primary) {
    std::lock_guard<std::mutex> lock(conns_mu_);
    if (primary_live_[h.from_pe]) status = HelloStatus::kDuplicate;
    else primary_live_[h.from_pe] = 1;
  }
  reply.status = static_cast<uint8_t>(status);
  net::send_all(fd, &reply, sizeof(reply));
  if (status != HelloStatus::kOk) {
    const char* why = status == HelloStatus::kRefused      ? "it did not present the job secret"
                      : status == HelloStatus::kBadVersion ? "protocol version mismatch"
                      : status == HelloStatus::kWrongPe    ? "it named the wrong PEs"
                                                           : "that PE is already connected";
    MORI_LOG(kWarn, "TCP", "PE %d refused a tcp connection from %s (claiming PE %d): %s", opt_.my_pe,
             peer_address(fd).c_str(), h.from_pe, why);
    return -1;
  }
  return h.from_pe;
}

void TcpTarget::serve(Conn* conn) {
  int fd = conn->fd;
  int peer = -1;
  bool primary = false, bye = false;
  std::string why = "its connection closed without a goodbye";
  try {
    peer = handshake(fd, &primary);
    if (peer >= 0) {
      SocketReader in(fd);
      Request rq;
      while (!stopping_.load() && !bye) {
        if (!in.read(&rq, sizeof(rq))) break;
        if (!handle(fd, in, rq, peer, &bye)) break;
      }
    }
  } catch (const std::exception& e) {
    why = e.what();  // e.g. "tcp recv: Connection timed out" once keepalive gives up on a silent host
    if (!stopping_.load())
      MORI_LOG(kDebug, "TCP", "PE %d: connection from PE %d ended: %s", opt_.my_pe, peer, e.what());
  }
  if (peer >= 0 && primary) mark_gone(peer, bye, why);
  ::shutdown(fd, SHUT_RDWR);  // closed by the reaper or stop(), which also join this thread
  conn->done.store(true);
}

void TcpTarget::mark_gone(int pe, bool said_bye, const std::string& why) {
  std::lock_guard<std::mutex> lock(conns_mu_);
  primary_live_[pe] = 0;
  if (said_bye) said_bye_[pe] = 1;
  if (said_bye_[pe] || stopping_.load()) return;
  int expected = -1;
  if (first_dead_.compare_exchange_strong(expected, pe))
    MORI_LOG(kWarn, "TCP", "PE %d: lost PE %d (%s)", opt_.my_pe, pe, why.c_str());
}

char* TcpTarget::locate(uint32_t region, uint64_t offset, uint64_t length, int peer, const char* what,
                        ReplyStatus* status, std::string* error) {
  std::shared_lock<std::shared_mutex> lock(regions_mu_);
  auto it = regions_.find(region);
  if (it == regions_.end() && !regions_.empty() && region == regions_.rbegin()->first + 1) {
    // The next region of a collective registration may still be on its way here
    // while a faster peer already writes into it: give it a moment.
    regions_cv_.wait_for(lock, std::chrono::seconds(2), [&] { return regions_.count(region) || stopping_.load(); });
    it = regions_.find(region);
  }
  if (it == regions_.end()) {
    *status = ReplyStatus::kBadRegion;
    *error = format("PE %d refused %s from PE %d: no symmetric region %u is registered", opt_.my_pe, what, peer,
                    region);
    return nullptr;
  }
  const Exposed& r = it->second;
  if (r.kind != MemKind::kHost) {
    *status = ReplyStatus::kBadRegion;
    *error = format("PE %d refused %s from PE %d: region %u is device memory, which the tcp transport cannot reach",
                    opt_.my_pe, what, peer, region);
    return nullptr;
  }
  if (offset > r.size || length > r.size - offset) {
    *status = ReplyStatus::kOutOfBounds;
    *error = format("PE %d refused %s from PE %d: %llu bytes at offset %llu are outside region %u (%zu bytes)",
                    opt_.my_pe, what, peer, static_cast<unsigned long long>(length),
                    static_cast<unsigned long long>(offset), region, r.size);
    return nullptr;
  }
  return r.base + offset;
}

bool TcpTarget::handle(int fd, SocketReader& in, const Request& rq, int peer, bool* bye) {
  ReplyStatus status = ReplyStatus::kOk;
  std::string error;
  const auto op = static_cast<Op>(rq.op);
  switch (op) {
    case Op::kPut:
    case Op::kPutSignal: {
      const char* what = op == Op::kPut ? "a put" : "a put_signal";
      if (rq.length > kMaxChunk) {
        send_error(fd, rq, ReplyStatus::kTooLarge,
                   format("PE %d refused %s of %llu bytes from PE %d: requests carry at most %zu bytes", opt_.my_pe,
                          what, static_cast<unsigned long long>(rq.length), peer, kMaxChunk));
        return false;  // cannot trust the framing any more
      }
      char* dst = locate(rq.region, rq.offset, rq.length, peer, what, &status, &error);
      char* sig = nullptr;
      if (dst && op == Op::kPutSignal) {
        if (rq.aux > static_cast<uint8_t>(SignalOp::kAdd)) {
          status = ReplyStatus::kBadRequest;
          error = format("PE %d refused a put_signal from PE %d: unknown signal op %d", opt_.my_pe, peer, rq.aux);
        } else if ((sig = locate(rq.signal_region, rq.signal_offset, 8, peer, "a put_signal's signal", &status,
                                 &error)) != nullptr &&
                   reinterpret_cast<uintptr_t>(sig) % 8) {
          status = ReplyStatus::kBadRequest;
          error = format("PE %d refused a put_signal from PE %d: signal offset %llu is not 8-byte aligned",
                         opt_.my_pe, peer, static_cast<unsigned long long>(rq.signal_offset));
          sig = nullptr;
        }
      }
      if (!dst || (op == Op::kPutSignal && !sig)) {
        in.skip(rq.length);
        send_error(fd, rq, status, error);
        return true;
      }
      if (rq.length && !in.read(dst, rq.length)) raise(Status::kRemote, "connection closed before the payload");
      if (sig) {
        // Release ordering publishes the payload to whoever acquires the signal.
        apply_amo(sig, rq.aux == static_cast<uint8_t>(SignalOp::kSet) ? AmoOp::kSet : AmoOp::kAdd, 8, rq.operand, 0);
      } else {
        std::atomic_thread_fence(std::memory_order_release);
      }
      if (opt_.on_write) {
        opt_.on_write(rq.region, rq.offset, rq.length);
        if (sig) opt_.on_write(rq.signal_region, rq.signal_offset, 8);
      }
      if (rq.flags & kFlagAck) send_reply(fd, rq, ReplyStatus::kOk);
      return true;
    }
    case Op::kGet: {
      if (rq.length > kMaxChunk) {
        send_error(fd, rq, ReplyStatus::kTooLarge,
                   format("PE %d refused a get of %llu bytes from PE %d: requests carry at most %zu bytes", opt_.my_pe,
                          static_cast<unsigned long long>(rq.length), peer, kMaxChunk));
        return false;
      }
      char* src = locate(rq.region, rq.offset, rq.length, peer, "a get", &status, &error);
      if (!src) {
        send_error(fd, rq, status, error);
        return true;
      }
      std::atomic_thread_fence(std::memory_order_acquire);
      send_reply(fd, rq, ReplyStatus::kOk, 0, src, rq.length);
      return true;
    }
    case Op::kAmo: {
      auto amo = static_cast<AmoOp>(rq.aux);
      if ((rq.width != 4 && rq.width != 8) || rq.aux > static_cast<uint8_t>(AmoOp::kFetchXor)) {
        status = ReplyStatus::kBadRequest;
        error = format("PE %d refused an atomic from PE %d: op %d of width %d is not an atomic MORI knows", opt_.my_pe,
                       peer, rq.aux, rq.width);
      } else if (char* addr = locate(rq.region, rq.offset, rq.width, peer, "an atomic", &status, &error)) {
        if (reinterpret_cast<uintptr_t>(addr) % rq.width) {
          status = ReplyStatus::kBadRequest;
          error = format("PE %d refused a %d-byte atomic from PE %d at unaligned offset %llu", opt_.my_pe, rq.width,
                         peer, static_cast<unsigned long long>(rq.offset));
        } else {
          uint64_t old = apply_amo(addr, amo, rq.width, rq.operand, rq.compare);
          if (amo != AmoOp::kFetch && opt_.on_write) opt_.on_write(rq.region, rq.offset, rq.width);
          if (is_fetching(amo) || (rq.flags & kFlagAck)) send_reply(fd, rq, ReplyStatus::kOk, old);
          return true;
        }
      }
      send_error(fd, rq, status, error);
      return true;
    }
    case Op::kFlush:
      send_reply(fd, rq, ReplyStatus::kOk);
      return true;
    case Op::kBye:
      *bye = true;
      return true;
  }
  send_error(fd, rq, ReplyStatus::kBadRequest,
             format("PE %d refused a request from PE %d: unknown op %d", opt_.my_pe, peer, rq.op));
  return false;  // unknown framing: the connection cannot continue
}

}  // namespace mori::tcp
