// SPDX-License-Identifier: MIT
#include "tcp/tcp_target.h"

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

#include "mori/core/auth.h"
#include "mori/core/log.h"
#include "mori/core/socket.h"
#include "mori/core/status.h"
#include "mori/transports/transport.h"
#include "shm/shm_transport.h"

namespace mori::tcp {
namespace {

// Strangers waiting to authenticate at once; more evict the oldest (see net::Acceptor).
constexpr size_t kMaxPending = 64;

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

}  // namespace

bool is_fetching(AmoOp op) {
  switch (op) {
    case AmoOp::kFetch:
    case AmoOp::kSwap:
    case AmoOp::kCompareSwap:
    case AmoOp::kFetchAdd:
    case AmoOp::kFetchAnd:
    case AmoOp::kFetchOr:
    case AmoOp::kFetchXor: return true;
    default: return false;
  }
}

void RegionTable::expose(const MemRegion& region) {
  {
    std::unique_lock<std::shared_mutex> lock(mu_);
    regions_[static_cast<uint32_t>(region.id)] = Exposed{region.local_base, region.size, region.kind};
  }
  cv_.notify_all();
}

void RegionTable::stop() {
  {
    std::unique_lock<std::shared_mutex> lock(mu_);
    stopping_.store(true);
  }
  cv_.notify_all();
}

char* RegionTable::find(uint32_t region, uint64_t offset, uint64_t length, int peer, const char* what, Located* at) {
  std::shared_lock<std::shared_mutex> lock(mu_);
  auto it = regions_.find(region);
  if (it == regions_.end() && !regions_.empty() && region == regions_.rbegin()->first + 1) {
    // The next region of a collective registration may still be on its way here
    // while a faster peer already writes into it: give it a moment.
    cv_.wait_for(lock, std::chrono::seconds(2), [&] { return regions_.count(region) || stopping_.load(); });
    it = regions_.find(region);
  }
  if (it == regions_.end()) {
    at->status = ReplyStatus::kBadRegion;
    at->error = format("PE %d refused %s from PE %d: no symmetric region %u is registered", my_pe_, what, peer, region);
    return nullptr;
  }
  const Exposed& r = it->second;
  if (r.kind != MemKind::kHost) {
    at->status = ReplyStatus::kBadRegion;
    at->error = format("PE %d refused %s from PE %d: region %u is device memory, which this transport cannot reach",
                       my_pe_, what, peer, region);
    return nullptr;
  }
  if (offset > r.size || length > r.size - offset) {
    at->status = ReplyStatus::kOutOfBounds;
    at->error =
        format("PE %d refused %s from PE %d: %llu bytes at offset %llu are outside region %u (%zu bytes)", my_pe_, what,
               peer, static_cast<unsigned long long>(length), static_cast<unsigned long long>(offset), region, r.size);
    return nullptr;
  }
  return r.base + offset;
}

RegionTable::Located RegionTable::locate(const Request& rq, int peer) {
  Located at;
  switch (static_cast<Op>(rq.op)) {
    case Op::kPut: at.data = find(rq.region, rq.offset, rq.length, peer, "a put", &at); break;
    case Op::kPutSignal:
      if (rq.aux > static_cast<uint8_t>(SignalOp::kAdd)) {
        at.status = ReplyStatus::kBadRequest;
        at.error = format("PE %d refused a put_signal from PE %d: unknown signal op %d", my_pe_, peer, rq.aux);
      } else if (char* dst = find(rq.region, rq.offset, rq.length, peer, "a put_signal", &at)) {
        char* sig = find(rq.signal_region, rq.signal_offset, 8, peer, "a put_signal's signal", &at);
        if (sig && reinterpret_cast<uintptr_t>(sig) % 8) {
          at.status = ReplyStatus::kBadRequest;
          at.error = format("PE %d refused a put_signal from PE %d: signal offset %llu is not 8-byte aligned", my_pe_,
                            peer, static_cast<unsigned long long>(rq.signal_offset));
        } else if (sig) {
          at.data = dst;
          at.signal = sig;
        }
      }
      break;
    case Op::kGet: at.data = find(rq.region, rq.offset, rq.length, peer, "a get", &at); break;
    case Op::kAmo:
      if ((rq.width != 4 && rq.width != 8) || rq.aux > static_cast<uint8_t>(AmoOp::kFetchXor)) {
        at.status = ReplyStatus::kBadRequest;
        at.error = format("PE %d refused an atomic from PE %d: op %d of width %d is not an atomic MORI knows", my_pe_,
                          peer, rq.aux, rq.width);
      } else if (char* addr = find(rq.region, rq.offset, rq.width, peer, "an atomic", &at)) {
        if (reinterpret_cast<uintptr_t>(addr) % rq.width) {
          at.status = ReplyStatus::kBadRequest;
          at.error = format("PE %d refused a %d-byte atomic from PE %d at unaligned offset %llu", my_pe_, rq.width,
                            peer, static_cast<unsigned long long>(rq.offset));
        } else {
          at.data = addr;
        }
      }
      break;
    default:
      at.status = ReplyStatus::kBadRequest;
      at.error = format("PE %d refused a request from PE %d: unknown op %d", my_pe_, peer, rq.op);
  }
  return at;
}

uint64_t RegionTable::apply(const Located& at, const Request& rq) {
  switch (static_cast<Op>(rq.op)) {
    case Op::kAmo: return apply_amo(at.data, static_cast<AmoOp>(rq.aux), rq.width, rq.operand, rq.compare);
    case Op::kPut:
    case Op::kPutSignal:
      if (at.signal)
        // Release ordering publishes the payload to whoever acquires the signal.
        apply_amo(at.signal, rq.aux == static_cast<uint8_t>(SignalOp::kSet) ? AmoOp::kSet : AmoOp::kAdd, 8, rq.operand,
                  0);
      else
        std::atomic_thread_fence(std::memory_order_release);
      return 0;
    default: return 0;
  }
}

TcpTarget::TcpTarget(Options options)
    : opt_(std::move(options)), regions_(opt_.my_pe), primary_live_(opt_.n_pes, 0), said_bye_(opt_.n_pes, 0) {
  UniqueFd listen_fd = net::listen_tcp(opt_.bind_ip, 0, &port_);
  net::Acceptor::Options o;
  o.service = format("PE %d's tcp target", opt_.my_pe);
  o.subsys = "TCP";
  o.max_pending = kMaxPending;
  o.pending_lifetime_s = std::min(10.0, opt_.timeout_s) + 1;  // a backstop: handshake() gives up first
  acceptor_ =
      std::make_unique<net::Acceptor>(std::move(listen_fd), std::move(o), [this](net::Connection& c) { serve(c); });
}

TcpTarget::~TcpTarget() { stop(); }

void TcpTarget::stop() {
  if (stopping_.exchange(true)) return;
  regions_.stop();
  acceptor_->stop();  // shuts every connection down and joins its thread
}

void TcpTarget::expose(const MemRegion& region) { regions_.expose(region); }

bool TcpTarget::finalized(int pe) const {
  std::lock_guard<std::mutex> lock(peers_mu_);
  return pe >= 0 && pe < opt_.n_pes && said_bye_[pe];
}

int TcpTarget::handshake(net::Connection& conn, bool* primary) {
  const int fd = conn.fd();
  // A stranger gets a few seconds to prove it holds the job secret.
  double deadline = net::now() + std::min(10.0, opt_.timeout_s);
  if (!auth::server_handshake(fd, opt_.secret.data(), opt_.secret.size(), kAuthLabel, deadline)) {
    if (!conn.evicted())
      MORI_LOG_LIMITED(refusals_log_, kWarn, "TCP",
                       "PE %d refused a tcp connection from %s: it could not prove it holds the job secret", opt_.my_pe,
                       conn.peer().c_str());
    return -1;
  }
  if (!conn.admit()) return -1;
  Hello h{};
  if (!net::recv_all(fd, &h, sizeof(h), deadline)) return -1;
  HelloReply reply{};
  reply.pe = opt_.my_pe;
  reply.max_chunk = kMaxChunk;
  HelloStatus status = HelloStatus::kOk;
  *primary = (h.flags & kHelloPrimary) != 0;
  // Each PE legitimately opens one connection; the slack covers auxiliary clients.
  const size_t max_conns = static_cast<size_t>(4 * opt_.n_pes + 16);
  {
    std::lock_guard<std::mutex> lock(peers_mu_);
    if (std::memcmp(h.magic, kHelloMagic, sizeof(kHelloMagic)) != 0) {
      status = HelloStatus::kRefused;
    } else if (h.version != kProtocolVersion) {
      status = HelloStatus::kBadVersion;
    } else if (h.to_pe != opt_.my_pe || h.from_pe < 0 || h.from_pe >= opt_.n_pes || h.from_pe == opt_.my_pe) {
      status = HelloStatus::kWrongPe;
    } else if (authenticated_ >= max_conns) {
      status = HelloStatus::kBusy;
    } else if (*primary && primary_live_[h.from_pe]) {
      status = HelloStatus::kDuplicate;
    } else {
      if (*primary) primary_live_[h.from_pe] = 1;
      ++authenticated_;
    }
  }
  reply.status = static_cast<uint8_t>(status);
  net::send_all(fd, &reply, sizeof(reply));
  if (status != HelloStatus::kOk) {
    const char* why = status == HelloStatus::kRefused      ? "its hello is not a MORI tcp hello"
                      : status == HelloStatus::kBadVersion ? "protocol version mismatch"
                      : status == HelloStatus::kWrongPe    ? "it named the wrong PEs"
                      : status == HelloStatus::kBusy       ? "too many connections"
                                                           : "that PE is already connected";
    MORI_LOG_LIMITED(refusals_log_, kWarn, "TCP", "PE %d refused a tcp connection from %s (claiming PE %d): %s",
                     opt_.my_pe, conn.peer().c_str(), h.from_pe, why);
    return -1;
  }
  return h.from_pe;
}

void TcpTarget::serve(net::Connection& conn) {
  const int fd = conn.fd();
  net::set_liveness(fd, opt_.timeout_s);
  int peer = -1;
  bool primary = false, bye = false;
  std::string why = "its connection closed without a goodbye";
  try {
    peer = handshake(conn, &primary);
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
  if (peer >= 0) {
    {
      std::lock_guard<std::mutex> lock(peers_mu_);
      --authenticated_;
    }
    if (primary) mark_gone(peer, bye, why);
  }
}

void TcpTarget::mark_gone(int pe, bool said_bye, const std::string& why) {
  std::lock_guard<std::mutex> lock(peers_mu_);
  primary_live_[pe] = 0;
  if (said_bye) said_bye_[pe] = 1;
  if (said_bye_[pe] || stopping_.load()) return;
  int expected = -1;
  if (first_dead_.compare_exchange_strong(expected, pe))
    MORI_LOG(kWarn, "TCP", "PE %d: lost PE %d (%s)", opt_.my_pe, pe, why.c_str());
}

bool TcpTarget::handle(int fd, SocketReader& in, const Request& rq, int peer, bool* bye) {
  const auto op = static_cast<Op>(rq.op);
  if (op == Op::kFlush) {
    send_reply(fd, rq, ReplyStatus::kOk);
    return true;
  }
  if (op == Op::kBye) {
    *bye = true;
    return true;
  }
  const bool carries = op == Op::kPut || op == Op::kPutSignal;  // a payload follows the request
  if ((carries || op == Op::kGet) && rq.length > kMaxChunk) {
    send_error(fd, rq, ReplyStatus::kTooLarge,
               format("PE %d refused a request of %llu bytes from PE %d: requests carry at most %zu bytes", opt_.my_pe,
                      static_cast<unsigned long long>(rq.length), peer, kMaxChunk));
    return false;  // cannot trust the framing any more
  }
  RegionTable::Located at = regions_.locate(rq, peer);
  if (!at.data) {
    if (carries) in.skip(rq.length);
    send_error(fd, rq, at.status, at.error);
    // An unknown op has unknown framing: the connection cannot continue.
    return op == Op::kPut || op == Op::kPutSignal || op == Op::kGet || op == Op::kAmo;
  }
  switch (op) {
    case Op::kPut:
    case Op::kPutSignal:
      if (rq.length && !in.read(at.data, rq.length)) raise(Status::kRemote, "connection closed before the payload");
      RegionTable::apply(at, rq);
      if (opt_.on_write) {
        opt_.on_write(rq.region, rq.offset, rq.length);
        if (at.signal) opt_.on_write(rq.signal_region, rq.signal_offset, 8);
      }
      if (rq.flags & kFlagAck) send_reply(fd, rq, ReplyStatus::kOk);
      return true;
    case Op::kGet:
      std::atomic_thread_fence(std::memory_order_acquire);
      send_reply(fd, rq, ReplyStatus::kOk, 0, at.data, rq.length);
      return true;
    default: {  // Op::kAmo (locate() refuses every other op)
      auto amo = static_cast<AmoOp>(rq.aux);
      uint64_t old = RegionTable::apply(at, rq);
      if (amo != AmoOp::kFetch && opt_.on_write) opt_.on_write(rq.region, rq.offset, rq.width);
      if (is_fetching(amo) || (rq.flags & kFlagAck)) send_reply(fd, rq, ReplyStatus::kOk, old);
      return true;
    }
  }
}

}  // namespace mori::tcp
