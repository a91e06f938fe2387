// SPDX-License-Identifier: MIT
#include "src/peer.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>

#include "mori/core/auth.h"
#include "mori/core/dial.h"
#include "mori/core/log.h"
#include "mori/core/socket.h"
#include "mori/core/status.h"
#include "mori/core/thread_name.h"
#include "src/backends/ucx_backend.h"
#include "mori/io/direct_copy.h"
#include "src/engine_impl.h"
#include "src/send_message.h"
#include "src/socket_poll.h"

namespace mori::io {

// ---------------------------------------------------------------------------------------------
// Transfer

void Transfer::piece_done(StatusCode code, const std::string& message) {
  if (is_failure(code)) {
    std::lock_guard<std::mutex> lock(mu);
    if (failure == StatusCode::SUCCESS) {
      failure = code;
      why = message;
    }
  }
  if (outstanding.fetch_sub(1) == 1) peer->finished(this);
}

// ---------------------------------------------------------------------------------------------
// Lane

// ---------------------------------------------------------------------------------------------
// LaneDriver

bool LaneDriver::drive(const StatusState& s, std::chrono::steady_clock::time_point deadline) {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return lane_ != nullptr && lane_->drive(s, deadline);
}

void LaneDriver::nudge() {
  std::shared_lock<std::shared_mutex> lock(mu_);
  if (lane_ != nullptr) lane_->nudge_receiver();
}

void LaneDriver::detach() {
  std::unique_lock<std::shared_mutex> lock(mu_);
  lane_ = nullptr;
}

// ---------------------------------------------------------------------------------------------
// Lane

// How long the receiving thread leaves the socket to waiters after one drove: a caller that
// posts and waits in a loop comes back within microseconds, and the thread stepping in and
// out of poll() each time would cost a wake-up per transfer.
constexpr auto kLinger = std::chrono::microseconds(500);

Lane::Lane(Peer& peer, int index, UniqueFd fd)
    : peer_(peer),
      index_(index),
      fd_(std::move(fd)),
      reader_(fd_.get(), 256 * 1024),
      driver_(std::make_shared<LaneDriver>(this)) {
  kick_fd_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!kick_fd_) raise_errno("eventfd");
  double timeout = peer_.engine().settings().timeout_s;
  net::set_timeouts(fd_.get(), timeout);
  net::set_liveness(fd_.get(), timeout);
  int buf = static_cast<int>(kSendBuffer);
  setsockopt(fd_.get(), SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  setsockopt(fd_.get(), SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
  tx_ = std::thread([this] { tx_loop(); });
  rx_ = std::thread([this] { rx_loop(); });
  name_thread(tx_, "mori-io-tx");
  name_thread(rx_, "mori-io-rx");
}

Lane::~Lane() {
  stopping_.store(true);
  fail("closed by this engine (engine closing or peer deregistered)");
  driver_->detach();  // a waiter reading now sees the shut-down socket and leaves
  q_cv_.notify_all();
  if (tx_.joinable()) tx_.join();
  if (rx_.joinable()) rx_.join();
  fd_.reset();
  kick_fd_.reset();
}

char* Lane::staging(std::unique_ptr<gpu::HostBuffer>& buf, size_t n) {
  if (!buf || buf->size() < n) buf = std::make_unique<gpu::HostBuffer>(std::max<size_t>(n, 1 << 20));
  return buf->data();
}

bool Lane::expects_reply(const Piece& p) {
  auto op = static_cast<wire::Op>(p.req.op);
  return op == wire::Op::kWrite || op == wire::Op::kRead || op == wire::Op::kGrant;
}

static void fail_piece(Lane::Piece& p, const std::string& why) {
  if (p.transfer) p.transfer->piece_done(StatusCode::ERR_RDMA_OP, why);
  if (p.on_reply) p.on_reply(StatusCode::ERR_RDMA_OP, why, {});
}

void Lane::post(std::vector<Piece> pieces, bool driven, bool poll_reply) {
  if (pieces.empty()) return;
  size_t payload = 0;
  bool replies = false;
  for (const auto& p : pieces) {
    if (static_cast<wire::Op>(p.req.op) == wire::Op::kWrite) payload += p.req.length;
    replies = replies || expects_reply(p);
  }
  if (replies && !driven) wake_receiver(poll_reply);
  std::unique_lock<std::mutex> lock(q_mu_);
  if (broken_.load()) {
    lock.unlock();
    for (auto& p : pieces) fail_piece(p, peer_.name() + ": connection lost");
    return;
  }
  bool send_here = !sending_ && queue_.empty();
  if (send_here && payload > peer_.engine().settings().inline_bytes) {
    // Larger than MORI_IO_INLINE_BYTES: only when nothing is in flight either. Every byte
    // sent before was then received by the target, the kernel takes up to kSendBuffer at
    // once, and the caller pays the copy the sending thread would have paid, without the
    // hand-off. With requests in flight the send could wait for the peer: the thread sends.
    std::lock_guard<std::mutex> pl(p_mu_);
    send_here = driven && payload <= kSendBuffer && pending_.empty();
  }
  if (send_here) {
    // Idle lane: send from this thread (no hand-off latency).
    sending_ = true;
    lock.unlock();
    send_pieces(pieces);
    lock.lock();
    sending_ = false;
    if (!queue_.empty()) q_cv_.notify_all();
    return;
  }
  for (auto& p : pieces) queue_.push_back(std::move(p));
  q_cv_.notify_all();
}

bool Lane::idle() {
  std::lock_guard<std::mutex> lock(q_mu_);
  if (sending_ || !queue_.empty()) return false;
  std::lock_guard<std::mutex> pl(p_mu_);
  return pending_.empty();
}

void Lane::tx_loop() {
  constexpr size_t kMaxBatch = 64;
  while (true) {
    std::vector<Piece> batch;
    {
      std::unique_lock<std::mutex> lock(q_mu_);
      q_cv_.wait(lock, [&] { return stopping_.load() || (!queue_.empty() && !sending_); });
      if (stopping_.load()) return;
      size_t bytes = 0;
      while (!queue_.empty() && batch.size() < kMaxBatch && bytes < (4u << 20)) {
        bytes += queue_.front().req.length;
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      sending_ = true;
    }
    send_pieces(batch);
    std::lock_guard<std::mutex> lock(q_mu_);
    sending_ = false;
    q_cv_.notify_all();
  }
}

void Lane::send_pieces(std::vector<Piece>& batch) {
  std::vector<iovec> iov;
  iov.reserve(2 * batch.size());
  std::vector<wire::Request> headers;
  headers.reserve(batch.size());
  auto flush = [&] {
    if (iov.empty()) return;
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = iov.size();
    send_message(fd_.get(), msg, peer_.engine().settings().send_halves_upto, [&](int err) {
      if (err == EAGAIN || err == EWOULDBLOCK)
        raise(Status::kTimeout, "%s accepted no data for %.1f s", peer_.name().c_str(),
              peer_.engine().settings().timeout_s);
      errno = err;
      raise_errno("send to %s", peer_.name().c_str());
    });
    iov.clear();
  };
  size_t reached = 0;  // pieces before this one are registered as pending (or need no reply)
  try {
    for (; reached < batch.size(); ++reached) {
      auto& p = batch[reached];
      if (broken_.load()) raise(Status::kRemote, "%s: connection lost", peer_.name().c_str());
      bool write = static_cast<wire::Op>(p.req.op) == wire::Op::kWrite;
      if (write && p.gpu) {
        // GPU source: stage through host memory, one piece at a time.
        flush();
        std::string err = gpu::copy_to_host(staging(tx_staging_, p.req.length), p.local, p.req.length, p.device);
        if (!err.empty()) raise(Status::kTransport, "%s", err.c_str());
      }
      if (expects_reply(p)) {
        std::lock_guard<std::mutex> lock(p_mu_);
        if (pending_.empty()) last_progress_ = net::now();
        pending_.push_back(p);  // before the bytes leave: the reply may come at once
      }
      headers.push_back(p.req);
      iov.push_back({&headers.back(), sizeof(wire::Request)});
      if (write && p.gpu) {
        iov.push_back({tx_staging_->data(), p.req.length});
        ++reached;
        flush();
        --reached;
        continue;
      }
      if (write && p.req.length) iov.push_back({p.local, p.req.length});
      if (iov.size() >= 512) flush();
    }
    flush();
  } catch (const std::exception& e) {
    // Pieces never registered as pending are failed here, the rest by fail().
    std::string why = naming(e.what());
    for (size_t i = reached; i < batch.size(); ++i) fail_piece(batch[i], why);
    fail(why);
  }
}

void Lane::wake_receiver(bool poll) {
  {
    std::lock_guard<std::mutex> lock(park_mu_);
    handoff_ = true;
    handoff_polls_ = handoff_polls_ || poll;
  }
  park_cv_.notify_one();
}

void Lane::nudge_receiver() {
  // A nudge that just misses the thread going to linger is not lost for long: a polling
  // caller nudges again on its next look.
  if (rx_lingering_.load(std::memory_order_relaxed)) wake_receiver();
}

bool Lane::rx_may_read() {
  std::unique_lock<std::mutex> lock(park_mu_);
  while (!stopping_.load() && !broken_.load()) {
    if (wanting_.load() > 0) {
      rx_awaits_waiter_ = true;
      park_cv_.wait_for(lock, std::chrono::milliseconds(100));
      rx_awaits_waiter_ = false;
    } else if (!handoff_ && std::chrono::steady_clock::now() < linger_until_) {
      rx_lingering_.store(true, std::memory_order_relaxed);
      park_cv_.wait_until(lock, linger_until_);
      rx_lingering_.store(false, std::memory_order_relaxed);
    } else {
      rx_handed_ = handoff_ && handoff_polls_;
      handoff_ = handoff_polls_ = false;
      return true;
    }
  }
  return false;
}

void Lane::read_reply() {
  bool large_read;
  {
    std::lock_guard<std::mutex> lock(p_mu_);
    large_read = !pending_.empty() && static_cast<wire::Op>(pending_.front().req.op) == wire::Op::kRead &&
                 pending_.front().req.length >= SocketReader::kDirectBytes;
  }
  wire::Reply r;
  // Before a large read's payload, take the header alone so the payload is received into
  // the destination rather than half into the reader's buffer and copied.
  if (!(large_read ? reader_.read_header(&r, sizeof(r)) : reader_.read(&r, sizeof(r))))
    raise(Status::kRemote, "%s closed the connection", peer_.name().c_str());
  handle_reply(r, reader_);
}

bool Lane::poll_reply_or_waiter(std::chrono::microseconds window) {
  if (window.count() <= 0) return false;
  SpinTicket ticket(socket_spin_budget());
  if (!ticket) return false;
  bool readable = false;
  spin_until(
      [&] {
        if (wanting_.load(std::memory_order_relaxed) > 0) return true;
        pollfd p{fd_.get(), POLLIN, 0};
        readable = ::poll(&p, 1, 0) > 0;
        return readable;
      },
      std::chrono::steady_clock::now() + window, 1);
  return readable;
}

void Lane::rx_loop() {
  const double timeout = peer_.engine().settings().timeout_s;
  // MORI_IO_TCP_POLL_US: handed the reply of a striped transfer's piece that no waiter reads
  // (Lane::post's poll_reply), the thread polls for it before it sleeps in poll(): it comes
  // within a round trip, and a 256 KiB striped write waited 8-9 us longer for the wake-up of a
  // thread asleep (docs/io.md, Round 9). Other replies are waited for asleep, as before.
  const auto window = std::chrono::microseconds(peer_.engine().settings().poll_us);
  try {
    while (rx_may_read()) {
      std::unique_lock<std::mutex> token(read_mu_);
      if (!reader_.buffered()) {
        rx_polling_.store(true);
        if (wanting_.load() > 0) {  // a waiter came (it saw no poll to interrupt): let it read
          rx_polling_.store(false);
          continue;
        }
        if (rx_handed_ && poll_reply_or_waiter(window)) {
          rx_polling_.store(false);
          read_reply();
          continue;
        }
        if (wanting_.load() > 0) {  // came while the thread polled
          rx_polling_.store(false);
          continue;
        }
        pollfd pfd[2] = {{fd_.get(), POLLIN, 0}, {kick_fd_.get(), POLLIN, 0}};
        int rc = poll(pfd, 2, 100);
        rx_polling_.store(false);
        if (rc < 0 && errno != EINTR) raise_errno("poll");
        if (rc > 0 && (pfd[1].revents & POLLIN)) {
          uint64_t kicks;
          (void)!::read(kick_fd_.get(), &kicks, sizeof(kicks));
        }
        if (rc <= 0 || !pfd[0].revents) {
          std::lock_guard<std::mutex> lock(p_mu_);
          if (!pending_.empty() && net::now() - last_progress_ > timeout)
            raise(Status::kTimeout, "%s answered nothing for %.1f s (MORI_IO_TIMEOUT_MS)", peer_.name().c_str(),
                  timeout);
          continue;
        }
      }
      read_reply();
    }
  } catch (const std::exception& e) {
    if (!stopping_.load()) MORI_LOG(kInfo, "IO", "lane %d to %s: %s", index_, peer_.name().c_str(), e.what());
    fail(e.what());
  }
}

bool Lane::drive(const StatusState& s, std::chrono::steady_clock::time_point deadline) {
  if (broken_.load()) return false;
  wanting_.fetch_add(1);
  if (rx_polling_.load()) {
    uint64_t one = 1;
    (void)!::write(kick_fd_.get(), &one, sizeof(one));
  }
  std::unique_lock<std::mutex> token(read_mu_);
  wanting_.fetch_sub(1);
  const double timeout = peer_.engine().settings().timeout_s;
  // A deadline at least MORI_IO_TIMEOUT_MS away is waited for as no deadline is: asleep in
  // recv(), whose SO_RCVTIMEO (that timeout) ends the wait first. Only a nearer deadline needs a
  // poll() before each recv(), one system call more on the reply's path (WaitFor's usual case:
  // UMBP's located reads wait within UMBP_CALL_TIMEOUT_MS, 30 s).
  const auto recv_bound =
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout));
  const bool no_deadline = deadline == std::chrono::steady_clock::time_point::max();
  // MORI_IO_TCP_POLL_US: poll for the reply before sleeping in the kernel for it.
  const auto window = std::chrono::microseconds(peer_.engine().settings().poll_us);
  try {
    while (!s.settled() && !broken_.load() && !stopping_.load()) {
      {
        std::lock_guard<std::mutex> lock(p_mu_);
        if (pending_.empty()) break;  // the rest comes over other lanes (or is not sent yet)
      }
      const bool far = no_deadline || deadline - std::chrono::steady_clock::now() >= recv_bound;
      if (!reader_.buffered() && !poll_readable(fd_.get(), window) && !far) {
        auto left = deadline - std::chrono::steady_clock::now();
        if (left <= std::chrono::steady_clock::duration::zero()) break;
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(left).count() + 1;
        pollfd pfd{fd_.get(), POLLIN, 0};
        int rc = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(100, ms)));
        if (rc < 0 && errno != EINTR) raise_errno("poll");
        if (rc <= 0) {
          std::lock_guard<std::mutex> lock(p_mu_);
          if (!pending_.empty() && net::now() - last_progress_ > timeout)
            raise(Status::kTimeout, "%s answered nothing for %.1f s (MORI_IO_TIMEOUT_MS)", peer_.name().c_str(),
                  timeout);
          continue;
        }
      }
      try {
        read_reply();  // blocks in recv (SO_RCVTIMEO is MORI_IO_TIMEOUT_MS)
      } catch (const Error&) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
          raise(Status::kTimeout, "%s answered nothing for %.1f s (MORI_IO_TIMEOUT_MS)", peer_.name().c_str(), timeout);
        throw;
      }
    }
  } catch (const std::exception& e) {
    if (!stopping_.load()) MORI_LOG(kInfo, "IO", "lane %d to %s: %s", index_, peer_.name().c_str(), e.what());
    fail(e.what());
  }
  bool more;
  {
    std::lock_guard<std::mutex> lock(p_mu_);
    more = !pending_.empty() || !s.settled();
  }
  bool wake;
  {
    std::lock_guard<std::mutex> lock(park_mu_);
    linger_until_ = std::chrono::steady_clock::now() + kLinger;
    if (more) handoff_ = true;  // work nobody waits on here: the thread reads it at once
    // A receiving thread that saw this waiter coming waits for it to leave: woken, it lingers
    // (or reads at once) rather than sleep out its 100 ms while replies that no waiter reads
    // pile up. One lingering already is left alone (a wake-up per transfer cost 8 B reads 2-3 us).
    wake = more || rx_awaits_waiter_;
  }
  token.unlock();
  if (wake) park_cv_.notify_one();
  // The rest of the transfer comes over other lanes, read by their threads within microseconds
  // of this one's (StatusState::poll_for_rest): polled for a while, it saves the waiter a
  // wake-up (MORI_IO_TCP_POLL_US).
  if (s.poll_for_rest() && !s.settled() && window.count() > 0) {
    SpinTicket ticket(socket_spin_budget());
    if (ticket) spin_until([&] { return s.settled(); }, std::min(deadline, std::chrono::steady_clock::now() + window));
  }
  return true;
}

void Lane::handle_reply(const wire::Reply& r, SocketReader& reader) {
  if (r.message_len > wire::kMaxMessage) raise(Status::kRemote, "%s sent a malformed reply", peer_.name().c_str());
  std::string message(r.message_len, '\0');
  if (r.message_len && !reader.read(message.data(), message.size()))
    raise(Status::kRemote, "%s closed the connection", peer_.name().c_str());
  if (static_cast<wire::ReplyKind>(r.kind) == wire::ReplyKind::kRevoke) {
    peer_.revoke(static_cast<uint32_t>(r.id), *this);
    return;
  }
  if (static_cast<wire::ReplyKind>(r.kind) != wire::ReplyKind::kReply)
    raise(Status::kRemote, "%s sent an unknown reply kind %u", peer_.name().c_str(), r.kind);
  Piece p;
  {
    std::lock_guard<std::mutex> lock(p_mu_);
    if (pending_.empty() || pending_.front().req.id != r.id)
      raise(Status::kRemote, "%s answered a request we did not send", peer_.name().c_str());
    p = std::move(pending_.front());
    pending_.pop_front();
    last_progress_ = net::now();
  }
  try {
    complete(p, r, std::move(message), reader);
  } catch (const std::exception& e) {
    // The piece left pending_ above, so fail() will not see it: fail it here, or its
    // transfer (and every later one to this peer, completed in order) never ends.
    fail_piece(p, naming(e.what()));
    throw;
  }
}

void Lane::complete(Piece& p, const wire::Reply& r, std::string message, SocketReader& reader) {
  auto status = static_cast<StatusCode>(r.status);
  auto op = static_cast<wire::Op>(p.req.op);
  if (status == StatusCode::SUCCESS && op == wire::Op::kRead) {
    if (r.length != p.req.length)
      raise(Status::kRemote, "%s sent a read reply of the wrong length", peer_.name().c_str());
    if (p.gpu) {
      char* buf = staging(rx_staging_, r.length);
      if (!reader.read(buf, r.length)) raise(Status::kRemote, "%s closed the connection", peer_.name().c_str());
      std::string err = gpu::copy_to_device(p.local, buf, r.length, p.device);
      if (!err.empty()) status = StatusCode::ERR_GPU_OP, message = err;
    } else if (r.length) {
      // As the target's write payloads (listener.cc): segments taken as they arrive, each
      // shown to the read's observer while the next is on its way.
      ArrivalObserver* observer = p.transfer ? p.transfer->observer.get() : nullptr;
      SocketReader::Landed landed;
      if (observer) landed = [observer](const char* at, size_t n) { observer->landed(at, n); };
      const SocketReader::Landed* seen = observer ? &landed : nullptr;
      size_t got = reader.buffered() ? 0
                                     : recv_polling(fd_.get(), p.local, r.length,
                                                    std::chrono::microseconds(peer_.engine().settings().poll_us), seen);
      if (got < r.length && !reader.read(p.local + got, r.length - got, seen))
        raise(Status::kRemote, "%s closed the connection", peer_.name().c_str());
    }
  } else if (op == wire::Op::kGrant) {
    if (r.length > 4096) raise(Status::kRemote, "%s sent a malformed grant", peer_.name().c_str());
    std::vector<char> payload(r.length);
    if (r.length && !reader.read(payload.data(), payload.size()))
      raise(Status::kRemote, "%s closed the connection", peer_.name().c_str());
    auto on_reply = std::move(p.on_reply);  // answered: a later failure must not answer again
    on_reply(status, message, payload);
    return;
  } else if (r.length) {
    raise(Status::kRemote, "%s sent an unexpected payload", peer_.name().c_str());
  }
  if (is_failure(status) && message.empty()) message = "refused by " + peer_.name();
  if (auto t = std::move(p.transfer)) t->piece_done(status, is_failure(status) ? peer_.name() + ": " + message : "");
}

std::string Lane::naming(const std::string& why) const {
  // Socket-level errors ("tcp recv: Connection reset by peer") do not say whom they lost.
  return why.find(peer_.name()) == std::string::npos ? peer_.name() + ": " + why : why;
}

void Lane::fail(const std::string& reason) {
  const std::string why = naming(reason);
  broken_.store(true);
  ::shutdown(fd_.get(), SHUT_RDWR);
  std::deque<Piece> queued, pending;
  {
    std::lock_guard<std::mutex> lock(q_mu_);
    queued.swap(queue_);
  }
  {
    std::lock_guard<std::mutex> lock(p_mu_);
    pending.swap(pending_);
  }
  q_cv_.notify_all();
  {
    std::lock_guard<std::mutex> lock(park_mu_);  // the receiving thread may be parked
  }
  park_cv_.notify_all();
  peer_.drop_grants();  // the target may have cut us off for not confirming a deregistration
  for (auto& p : pending) fail_piece(p, why);
  for (auto& p : queued) fail_piece(p, why);
}

// ---------------------------------------------------------------------------------------------
// Peer

Peer::Peer(EngineImpl& engine, EngineDesc desc) : engine_(engine), desc_(std::move(desc)) {}

Peer::~Peer() { close(); }

void Peer::close() {
  std::vector<std::unique_ptr<Lane>> lanes;
  {
    std::lock_guard<std::mutex> lock(lanes_mu_);
    closed_ = true;
    lanes.swap(lanes_);
  }
  lanes.clear();  // outside the lock: failing pieces calls back into notify_lane()
}

std::string Peer::name() const {
  return format("engine '%s' at %s:%u", desc_.key.c_str(), desc_.host.c_str(), desc_.port);
}

// The engine's hello after authentication: name ourselves, and prove it when the peer holds
// our descriptor. A refusal is final (auth::Refused), a broken exchange is dialled again.
static void greet(const EngineImpl& engine, int fd, double deadline) {
  wire::Hello hello{wire::kVersion, static_cast<uint32_t>(engine.key().size())};
  net::send_all(fd, &hello, sizeof(hello));
  net::send_all(fd, engine.key().data(), engine.key().size());
  wire::HelloReply reply{};
  if (!net::recv_all(fd, &reply, sizeof(reply), deadline))
    raise(Status::kRemote, "closed the connection after our hello");
  switch (static_cast<wire::HelloStatus>(reply.status)) {
    case wire::HelloStatus::kAccepted: return;
    case wire::HelloStatus::kProveIdentity: {
      // It holds our descriptor: prove we are the engine we named (our own secret).
      const std::string& mine = engine.desc().secret;
      if (!auth::server_handshake(fd, mine.data(), mine.size(), wire::kIdentityLabel, deadline))
        throw auth::Refused(
            format("it did not accept our proof of being engine '%s': it holds another descriptor "
                   "of that engine (register this engine's current EngineDesc there)",
                   engine.key().c_str()));
      return;
    }
    case wire::HelloStatus::kTooManyPeer:
      throw auth::Refused(
          format("it refused the connection: it serves %u connections of engine '%s' already "
                 "(MORI_IO_MAX_CONNECTIONS_PER_PEER there)",
                 reply.limit, engine.key().c_str()));
    case wire::HelloStatus::kTooManyTotal:
      throw auth::Refused(
          format("it refused the connection: it serves %u connections already "
                 "(MORI_IO_MAX_CONNECTIONS there)",
                 reply.limit));
    default: raise(Status::kRemote, "refused our hello");
  }
}

static UniqueFd dial(const EngineImpl& engine, const EngineDesc& desc) {
  if (desc.port == 0)
    raise(Status::kInvalidUsage, "engine '%s' has no listening port (create a backend there first)", desc.key.c_str());
  net::DialOptions o;
  o.host = desc.host;
  o.port = static_cast<int>(desc.port);
  o.secret = desc.secret.data();
  o.secret_len = desc.secret.size();
  o.label = wire::kAuthLabel;
  o.deadline = net::now() + engine.settings().connect_timeout_s;
  o.retry_pause_s = 0.02;
  // An engine listens before its descriptor exists, so a refusal means it is gone: fail the
  // transfer now rather than after MORI_IO_CP_TIMEOUT_MS.
  o.retry_refused = false;
  o.greet = [&engine](int fd, double deadline) { greet(engine, fd, deadline); };
  try {
    return net::dial(o);
  } catch (const auth::Refused& e) {  // a definite no: wrong secret, or too many connections
    raise(Status::kRemote, "engine '%s' at %s:%u: %s", desc.key.c_str(), desc.host.c_str(), desc.port, e.what());
  } catch (const Error& e) {
    raise(e.status() == Status::kTimeout ? Status::kTimeout : Status::kRemote, "engine '%s' at %s:%u: %s",
          desc.key.c_str(), desc.host.c_str(), desc.port, e.what());
  }
}

std::vector<Lane*> Peer::lanes() {
  std::vector<std::unique_ptr<Lane>> dead;  // destroyed after the lock: their threads may call us
  std::vector<Lane*> out;
  {
    std::lock_guard<std::mutex> lock(lanes_mu_);
    if (closed_) raise(Status::kInvalidUsage, "%s: it was deregistered or its engine closed", name().c_str());
    size_t n = static_cast<size_t>(std::max(1, engine_.lanes_));
    if (lanes_.size() < n) lanes_.resize(n);
    for (size_t i = 0; i < lanes_.size(); ++i) {
      if (lanes_[i] && !lanes_[i]->broken()) continue;
      if (lanes_[i]) dead.push_back(std::move(lanes_[i]));
      lanes_[i] = std::make_unique<Lane>(*this, static_cast<int>(i), dial(engine_, desc_));
    }
    for (auto& l : lanes_) out.push_back(l.get());
  }
  return out;
}

Lane* Peer::notify_lane() {
  std::lock_guard<std::mutex> lock(lanes_mu_);
  if (lanes_.empty() || !lanes_[0] || lanes_[0]->broken()) return nullptr;
  return lanes_[0].get();
}

void Peer::track(const std::shared_ptr<Transfer>& t) {
  std::lock_guard<std::mutex> lock(order_mu_);
  order_.push_back(t);
}

void Peer::finished(Transfer* t) {
  std::vector<std::shared_ptr<Transfer>> done;
  {
    std::lock_guard<std::mutex> lock(order_mu_);
    t->finished = true;
    while (!order_.empty() && order_.front()->finished) {
      done.push_back(std::move(order_.front()));
      order_.pop_front();
    }
  }
  for (auto& d : done) {
    d->holds.clear();  // local regions may be deregistered once the caller sees the status
    if (d->failure != StatusCode::SUCCESS) {
      d->status->update(d->failure, d->why);
      continue;
    }
    d->status->update(StatusCode::SUCCESS);  // the data is in place: the caller need not wait for the notice
    if (d->notify) {
      // Over the authenticated connection on every backend (UCX too: an active message
      // could name any sender), after the data (a UCX write's flush completed).
      if (Lane* lane = notify_lane()) {
        Lane::Piece p;
        p.req.op = static_cast<uint8_t>(wire::Op::kNotify);
        p.req.aux = d->uid;
        std::vector<Lane::Piece> one;
        one.push_back(std::move(p));
        lane->post(std::move(one));
      } else {
        MORI_LOG(kWarn, "IO", "no connection to %s for the notification of transfer %llu", name().c_str(),
                 static_cast<unsigned long long>(d->uid));
      }
    }
  }
}

std::shared_ptr<Grant> Peer::grant(const MemoryDesc& remote) {
  {
    std::lock_guard<std::mutex> lock(grants_mu_);
    if (direct_refused_) return nullptr;
    auto it = grants_.find(remote.id);
    if (it != grants_.end()) {
      // The target checked the key once, when it granted access; every later request is
      // checked against it here, as the target checks every tcp request.
      if (!auth::equal(&it->second->region_key, &remote.region_key, sizeof(remote.region_key)))
        raise(Status::kInvalidArgument, "%s: wrong key for memory region %u", name().c_str(), remote.id);
      return it->second;
    }
  }
  Lane* lane = lanes().front();
  auto promise = std::make_shared<std::promise<std::pair<StatusCode, std::vector<char>>>>();
  auto future = promise->get_future();
  Lane::Piece p;
  p.req.op = static_cast<uint8_t>(wire::Op::kGrant);
  p.req.region = remote.id;
  p.req.region_key = remote.region_key;
  p.req.id = engine_.next_request_id();
  p.on_reply = [promise](StatusCode c, const std::string&, const std::vector<char>& payload) {
    promise->set_value({c, payload});
  };
  std::vector<Lane::Piece> one;
  one.push_back(std::move(p));
  lane->post(std::move(one));
  if (future.wait_for(std::chrono::duration<double>(engine_.settings().timeout_s)) != std::future_status::ready)
    return nullptr;
  auto [code, payload] = future.get();
  if (code != StatusCode::SUCCESS || payload.size() != sizeof(wire::GrantReply)) return nullptr;
  wire::GrantReply reply;
  std::memcpy(&reply, payload.data(), sizeof(reply));
  // Prove that we see the target's memory: read its token where it says it is.
  uint8_t token[sizeof(reply.token)] = {};
  DirectSegment probe{reinterpret_cast<char*>(token), reply.token_addr, sizeof(token)};
  std::string err = direct_copy(true, static_cast<pid_t>(reply.pid), &probe, 1);
  std::lock_guard<std::mutex> lock(grants_mu_);
  if (!err.empty() || std::memcmp(token, reply.token, sizeof(token)) != 0) {
    direct_refused_ = true;
    MORI_LOG(kInfo, "IO", "%s is on this host but not reachable directly (%s); its CPU memory goes over tcp",
             name().c_str(), err.empty() ? "token mismatch" : err.c_str());
    return nullptr;
  }
  auto g = std::make_shared<Grant>();
  g->pid = reply.pid;
  g->addr = reply.addr;
  g->size = reply.size;
  g->region_key = remote.region_key;  // the key the target accepted
  grants_[remote.id] = g;
  revoked_.erase(remote.id);
  return g;
}

void Peer::revoke(uint32_t region, Lane& from) {
  std::shared_ptr<Grant> g;
  {
    std::lock_guard<std::mutex> lock(grants_mu_);
    auto it = grants_.find(region);
    if (it != grants_.end()) {
      g = it->second;
      grants_.erase(it);
    }
    revoked_[region] = true;
  }
  if (g) {
    std::unique_lock<std::shared_mutex> wait_for_copies(g->mu);
    g->revoked = true;
  }
  // Our operations on the region in flight over a backend (UCX) must end before the target unmaps it.
  if (!engine_.quiesce(desc_.key, region, engine_.settings().timeout_s))
    MORI_LOG(kWarn, "IO", "%s deregisters region %u while UCX operations on it are still in flight", name().c_str(),
             region);
  Lane::Piece ack;
  ack.req.op = static_cast<uint8_t>(wire::Op::kRevokeAck);
  ack.req.aux = region;
  std::vector<Lane::Piece> one;
  one.push_back(std::move(ack));
  from.post(std::move(one));
}

void Peer::drop_grants() {
  std::lock_guard<std::mutex> lock(grants_mu_);
  grants_.clear();  // copies in flight keep theirs; later transfers ask again
}

bool Peer::remote_revoked(uint32_t region) {
  std::lock_guard<std::mutex> lock(grants_mu_);
  auto it = revoked_.find(region);
  return it != revoked_.end() && it->second;
}

}  // namespace mori::io
