// SPDX-License-Identifier: MIT
#include "tcp/tcp_channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "mori/core/auth.h"
#include "mori/core/dial.h"
#include "mori/core/log.h"
#include "mori/core/socket.h"
#include "mori/core/status.h"

namespace mori::tcp {
namespace {

// Text for a failed socket call; a reset or broken pipe means the peer process went away.
std::string io_error(const char* call, int err) {
  std::string text = std::string(call) + ": " + std::strerror(err);
  if (err == ECONNRESET || err == EPIPE) text += " (the peer exited or dropped the connection)";
  return text;
}

const char* hello_refusal(HelloStatus s) {
  switch (s) {
    case HelloStatus::kRefused: return "it did not understand our hello (mixed MORI installs?)";
    case HelloStatus::kWrongPe: return "it is not the PE we expected (stale address?)";
    case HelloStatus::kDuplicate: return "it already has a connection from this PE";
    case HelloStatus::kBadVersion: return "it speaks another tcp protocol version (mixed MORI installs?)";
    case HelloStatus::kBusy: return "it has too many connections";
    default: return "unknown refusal";
  }
}

}  // namespace

TcpChannel::TcpChannel(int my_pe, int peer, const std::string& ip, int port, const JobSecret& secret, double timeout_s,
                       uint32_t hello_flags)
    : my_pe_(my_pe), peer_(peer), address_(ip + ":" + std::to_string(port)), timeout_s_(timeout_s), rbuf_(64 * 1024) {
  const double deadline = net::now() + timeout_s;
  Hello h{};
  std::memcpy(h.magic, kHelloMagic, sizeof(h.magic));
  h.from_pe = my_pe;
  h.to_pe = peer;
  h.flags = hello_flags;
  h.version = kProtocolVersion;
  HelloReply reply{};
  net::DialOptions o;
  o.host = ip;
  o.port = port;
  o.secret = secret.data();
  o.secret_len = secret.size();
  o.label = kAuthLabel;
  o.deadline = deadline;
  o.liveness_s = timeout_s;
  try {
    fd_ = net::dial(o);
  } catch (const auth::Refused& e) {
    raise(Status::kRemote, "PE %d: PE %d at %s refused the tcp connection: %s (is the peer part of another job?)",
          my_pe, peer, address_.c_str(), e.what());
  } catch (const net::DialError& e) {
    if (e.reached())
      raise(Status::kRemote, "PE %d: tcp handshake with PE %d at %s failed: %s", my_pe, peer, address_.c_str(),
            e.what());
    raise(e.status(),
          "PE %d cannot reach PE %d over tcp at %s: %s (set MORI_SOCKET_IFNAME to an interface the hosts share)", my_pe,
          peer, address_.c_str(), e.what());
  } catch (const Error& e) {
    raise(e.status(),
          "PE %d cannot reach PE %d over tcp at %s: %s (set MORI_SOCKET_IFNAME to an interface the hosts share)", my_pe,
          peer, address_.c_str(), e.what());
  }
  try {
    net::send_all(fd_.get(), &h, sizeof(h));
    if (!net::recv_all(fd_.get(), &reply, sizeof(reply), deadline))
      raise(Status::kRemote, "the connection closed during the handshake");
  } catch (const Error& e) {
    fd_.reset();
    raise(Status::kRemote, "PE %d: tcp handshake with PE %d at %s failed: %s", my_pe, peer, address_.c_str(), e.what());
  }
  if (reply.status != static_cast<uint8_t>(HelloStatus::kOk)) {
    fd_.reset();
    raise(Status::kRemote, "PE %d: PE %d at %s refused the tcp connection: %s", my_pe, peer, address_.c_str(),
          hello_refusal(static_cast<HelloStatus>(reply.status)));
  }
  if (reply.max_chunk < kMaxChunk) {
    fd_.reset();
    raise(Status::kRemote, "PE %d: PE %d accepts only %llu-byte requests (mixed MORI installs?)", my_pe, peer,
          static_cast<unsigned long long>(reply.max_chunk));
  }
  // From here on the calling thread multiplexes sends and replies itself.
  fcntl(fd_.get(), F_SETFL, fcntl(fd_.get(), F_GETFL) | O_NONBLOCK);
  last_progress_ = net::now();
}

TcpChannel::~TcpChannel() { close(false); }

void TcpChannel::close(bool say_bye) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!fd_) return;
  if (say_bye && !failed()) {
    Request rq{};
    rq.op = static_cast<uint8_t>(Op::kBye);
    rq.seq = next_seq_++;
    // Everything before was flushed by finalize's barrier, so the buffer has room.
    pollfd p{fd_.get(), POLLOUT, 0};
    if (poll(&p, 1, 1000) > 0) (void)::send(fd_.get(), &rq, sizeof(rq), MSG_NOSIGNAL);
  }
  ::shutdown(fd_.get(), SHUT_RDWR);
  fd_.reset();
}

std::string TcpChannel::failure() const { return failed() ? failure_ : std::string(); }

void TcpChannel::fail(const std::string& why) {
  if (!failed()) {
    failure_ = why;
    failed_.store(true, std::memory_order_release);
  }
  raise(Status::kRemote, "PE %d: tcp connection to PE %d (%s) failed: %s", my_pe_, peer_, address_.c_str(),
        failure_.c_str());
}

void TcpChannel::check_usable() {
  if (!fd_) raise(Status::kInvalidUsage, "PE %d: tcp connection to PE %d is closed", my_pe_, peer_);
  if (failed())
    raise(Status::kRemote, "PE %d: tcp connection to PE %d (%s) failed earlier: %s", my_pe_, peer_, address_.c_str(),
          failure_.c_str());
}

// ---------------------------------------------------------------- sending

uint64_t TcpChannel::send_request(Request& rq, const void* payload, size_t n, bool expect_reply, char* dst,
                                  uint64_t* value) {
  check_usable();
  rq.seq = next_seq_++;
  rq.length = rq.op == static_cast<uint8_t>(Op::kGet) ? rq.length : n;
  if (expect_reply) {
    pending_.push_back(Pending{rq.seq, static_cast<Op>(rq.op), dst, static_cast<size_t>(rq.length), value});
    last_replied_ = rq.seq;
  } else {
    last_unacked_ = rq.seq;
  }
  iovec iov[2] = {{&rq, sizeof(rq)}, {const_cast<void*>(payload), n}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = n ? 2 : 1;
  while (msg.msg_iovlen > 0) {
    ssize_t k = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        wait_io(true);
        continue;
      }
      fail(io_error("send", errno));
    }
    last_progress_ = net::now();
    net::advance_iov(msg, static_cast<size_t>(k));
  }
  return rq.seq;
}

void TcpChannel::wait_io(bool want_write) {
  pollfd p{fd_.get(), static_cast<short>(POLLIN | (want_write ? POLLOUT : 0)), 0};
  int rc = ::poll(&p, 1, 100);
  if (rc < 0) {
    if (errno == EINTR) return;
    fail(io_error("poll", errno));
  }
  if (rc > 0 && (p.revents & (POLLIN | POLLERR | POLLHUP))) {
    read_replies();
    return;
  }
  if (rc > 0 && (p.revents & POLLOUT)) return;
  if (net::now() - last_progress_ > timeout_s_)
    fail(format(
        "no progress for %.0f s (the peer or its host stopped responding; MORI_BOOTSTRAP_TIMEOUT sets this limit)",
        timeout_s_));
}

// ---------------------------------------------------------------- replies

bool TcpChannel::fill_buffer() {
  if (rpos_ == rend_) {
    rpos_ = rend_ = 0;
  } else if (rend_ == rbuf_.size()) {
    std::memmove(rbuf_.data(), rbuf_.data() + rpos_, rend_ - rpos_);
    rend_ -= rpos_;
    rpos_ = 0;
  }
  while (true) {
    ssize_t k = ::recv(fd_.get(), rbuf_.data() + rend_, rbuf_.size() - rend_, 0);
    if (k > 0) {
      rend_ += static_cast<size_t>(k);
      last_progress_ = net::now();
      return true;
    }
    if (k == 0) fail("the peer closed the connection (it exited or finalized)");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    fail(io_error("recv", errno));
  }
}

void TcpChannel::complete_front() {
  completed_ = pending_.front().seq;
  pending_.pop_front();
  phase_ = Phase::kHeader;
}

void TcpChannel::parse_header() {
  std::memcpy(&cur_, rbuf_.data() + rpos_, sizeof(cur_));
  rpos_ += sizeof(cur_);
  cur_got_ = 0;
  if (cur_.status != static_cast<uint8_t>(ReplyStatus::kOk)) {
    if (cur_.length > kMaxErrorText) fail("protocol error: oversized error reply");
    if (!pending_.empty() && cur_.seq > pending_.front().seq) fail("protocol error: error reply out of order");
    cur_text_.clear();
    phase_ = Phase::kText;
    if (cur_.length == 0) finish_error();
    return;
  }
  if (pending_.empty() || pending_.front().seq != cur_.seq)
    fail(format("protocol error: unexpected reply to request %llu", static_cast<unsigned long long>(cur_.seq)));
  Pending& p = pending_.front();
  if (p.op == Op::kGet) {
    if (cur_.length != p.length) fail("protocol error: get reply of the wrong length");
    phase_ = Phase::kData;
    if (p.length == 0) complete_front();
    return;
  }
  if (cur_.length != 0) fail("protocol error: unexpected reply payload");
  if (p.value) *p.value = cur_.value;
  complete_front();
}

void TcpChannel::finish_error() {
  errors_.push_back(cur_text_.empty() ? format("PE %d refused a request (status %d)", peer_, cur_.status) : cur_text_);
  phase_ = Phase::kHeader;
  if (!pending_.empty() && pending_.front().seq == cur_.seq) complete_front();
}

bool TcpChannel::read_replies() {
  bool any = false;
  while (true) {
    if (phase_ == Phase::kData) {
      Pending& p = pending_.front();
      if (rpos_ < rend_) {
        size_t take = std::min(p.length - cur_got_, rend_ - rpos_);
        std::memcpy(p.dst + cur_got_, rbuf_.data() + rpos_, take);
        rpos_ += take;
        cur_got_ += take;
      } else {
        // Straight from the kernel into the caller's buffer.
        ssize_t k = ::recv(fd_.get(), p.dst + cur_got_, p.length - cur_got_, 0);
        if (k == 0) fail("the peer closed the connection (it exited or finalized)");
        if (k < 0) {
          if (errno == EINTR) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) return any;
          fail(io_error("recv", errno));
        }
        cur_got_ += static_cast<size_t>(k);
        last_progress_ = net::now();
        any = true;
      }
      if (cur_got_ == p.length) complete_front();
      continue;
    }
    if (phase_ == Phase::kText) {
      if (rpos_ < rend_) {
        size_t take = std::min<size_t>(cur_.length - cur_got_, rend_ - rpos_);
        cur_text_.append(rbuf_.data() + rpos_, take);
        rpos_ += take;
        cur_got_ += take;
        if (cur_got_ == cur_.length) finish_error();
        continue;
      }
    } else if (rend_ - rpos_ >= sizeof(Reply)) {
      parse_header();
      continue;
    }
    if (!fill_buffer()) return any;
    any = true;
  }
}

void TcpChannel::raise_deferred_errors() {
  if (errors_.empty()) return;
  std::string all = errors_.front();
  if (errors_.size() > 1) all += format(" (and %zu more refused requests)", errors_.size() - 1);
  errors_.clear();
  raise(Status::kRemote, "%s", all.c_str());
}

void TcpChannel::wait_for(uint64_t seq) {
  while (completed_ < seq) {
    check_usable();
    if (!read_replies()) wait_io(false);
  }
  raise_deferred_errors();
}

// ---------------------------------------------------------------- operations

void TcpChannel::put(uint32_t region, uint64_t offset, const void* src, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  const char* p = static_cast<const char*>(src);
  for (size_t done = 0; done < n;) {
    size_t len = std::min(kMaxChunk, n - done);
    Request rq{};
    rq.op = static_cast<uint8_t>(Op::kPut);
    rq.region = region;
    rq.offset = offset + done;
    send_request(rq, p + done, len, false);
    done += len;
  }
  // A put is complete (src reusable) once the kernel holds the bytes; remote
  // completion is quiet's business. Refusals of earlier requests surface here.
  if (!errors_.empty()) raise_deferred_errors();
}

void TcpChannel::get(uint32_t region, uint64_t offset, void* dst, size_t n, bool nbi) {
  std::lock_guard<std::mutex> lock(mu_);
  char* out = static_cast<char*>(dst);
  uint64_t last = 0;
  // All chunk requests go out back to back; the replies stream in behind them.
  for (size_t done = 0; done < n;) {
    size_t len = std::min(kMaxChunk, n - done);
    Request rq{};
    rq.op = static_cast<uint8_t>(Op::kGet);
    rq.region = region;
    rq.offset = offset + done;
    rq.length = len;
    last = send_request(rq, nullptr, 0, true, out + done);
    done += len;
  }
  if (!nbi) wait_for(last);
}

uint64_t TcpChannel::atomic(uint32_t region, uint64_t offset, AmoOp op, int width, uint64_t operand, uint64_t compare) {
  std::lock_guard<std::mutex> lock(mu_);
  Request rq{};
  rq.op = static_cast<uint8_t>(Op::kAmo);
  rq.aux = static_cast<uint8_t>(op);
  rq.width = static_cast<uint8_t>(width);
  rq.region = region;
  rq.offset = offset;
  rq.operand = operand;
  rq.compare = compare;
  bool fetching = op == AmoOp::kFetch || op == AmoOp::kSwap || op == AmoOp::kCompareSwap || op == AmoOp::kFetchAdd ||
                  op == AmoOp::kFetchAnd || op == AmoOp::kFetchOr || op == AmoOp::kFetchXor;
  if (!fetching) {
    send_request(rq, nullptr, 0, false);
    if (!errors_.empty()) raise_deferred_errors();
    return 0;
  }
  uint64_t old = 0;
  uint64_t seq = send_request(rq, nullptr, 0, true, nullptr, &old);
  wait_for(seq);
  return old;
}

void TcpChannel::put_signal(uint32_t region, uint64_t offset, const void* src, size_t n, uint32_t signal_region,
                            uint64_t signal_offset, uint64_t value, SignalOp op) {
  std::lock_guard<std::mutex> lock(mu_);
  const char* p = static_cast<const char*>(src);
  // Leading chunks are plain puts; the last one carries the signal. The target
  // applies requests in order, so the signal lands after every byte.
  size_t done = 0;
  while (n - done > kMaxChunk) {
    Request rq{};
    rq.op = static_cast<uint8_t>(Op::kPut);
    rq.region = region;
    rq.offset = offset + done;
    send_request(rq, p + done, kMaxChunk, false);
    done += kMaxChunk;
  }
  Request rq{};
  rq.op = static_cast<uint8_t>(Op::kPutSignal);
  rq.aux = static_cast<uint8_t>(op);
  rq.region = region;
  rq.offset = offset + done;
  rq.signal_region = signal_region;
  rq.signal_offset = signal_offset;
  rq.operand = value;
  send_request(rq, p + done, n - done, false);
  if (!errors_.empty()) raise_deferred_errors();
}

void TcpChannel::quiet_start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!fd_ || failed()) return;  // quiet_finish reports it
  // A reply to any later request also proves the earlier unacknowledged ones applied.
  if (last_unacked_ > last_replied_) {
    Request rq{};
    rq.op = static_cast<uint8_t>(Op::kFlush);
    send_request(rq, nullptr, 0, true);
  }
}

void TcpChannel::quiet_finish() {
  std::lock_guard<std::mutex> lock(mu_);
  check_usable();
  if (last_unacked_ > last_replied_) {  // quiet_start could not send (another thread raced in)
    Request rq{};
    rq.op = static_cast<uint8_t>(Op::kFlush);
    send_request(rq, nullptr, 0, true);
  }
  wait_for(last_replied_);
}

}  // namespace mori::tcp
