// SPDX-License-Identifier: MIT
// The initiator's side of one remote engine: its connections (lanes), the transfers in
// flight to it (completed in submission order), and the direct-access grants it gave us.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "mori/core/socket_reader.h"
#include "mori/core/unique_fd.h"
#include "mori/io/arrival_observer.h"
#include "mori/io/transfer_status.h"
#include "mori/io/types.h"
#include "src/gpu_memory.h"
#include "src/registry.h"
#include "src/wire.h"

namespace mori::io {

class EngineImpl;
class Lane;
class Peer;

// A waiter's way into one lane, held weakly by the statuses of transfers that went over it
// alone. It outlives its lane (a status may be waited for later); the lane detaches it.
class LaneDriver : public StatusDriver {
 public:
  explicit LaneDriver(Lane* lane) : lane_(lane) {}
  bool drive(const StatusState& s, std::chrono::steady_clock::time_point deadline) override;
  void nudge() override;
  void detach();  // waits for drives in progress

 private:
  std::shared_mutex mu_;
  Lane* lane_;
};

// One transfer as the engine sees it: pieces in flight, the first error, and the local
// regions it keeps registered until it is done.
struct Transfer {
  std::shared_ptr<StatusState> status;
  std::atomic<int> outstanding{1};  // +1 held by the submitter until every piece is posted
  std::mutex mu;
  StatusCode failure = StatusCode::SUCCESS;
  std::string why;
  std::vector<RegionUse> holds;
  uint64_t uid = 0;
  bool notify = false;
  bool finished = false;       // guarded by the peer's order lock
  std::shared_ptr<Peer> peer;  // kept alive until the transfer is reported
  // A read's observer (Engine::transfer): told of host-memory bytes as the lanes receive them.
  std::shared_ptr<ArrivalObserver> observer;

  void add_pieces(int n) { outstanding.fetch_add(n); }
  // A piece ended (SUCCESS or an error); the last one hands the transfer to its peer.
  void piece_done(StatusCode code, const std::string& message = "");
};

// Same-host direct access to one remote region, valid until the target revokes it.
struct Grant {
  uint64_t pid = 0, addr = 0, size = 0;
  uint64_t region_key = 0;  // the key the target accepted when it granted access
  std::shared_mutex mu;     // shared while copying; the revocation takes it exclusively
  bool revoked = false;
};

class Lane {
 public:
  struct Piece {
    wire::Request req{};
    char* local = nullptr;  // write source / read destination
    bool gpu = false;
    int device = -1;
    std::shared_ptr<Transfer> transfer;  // null for control messages
    // Control replies (grants): status, message and payload.
    std::function<void(StatusCode, const std::string&, const std::vector<char>&)> on_reply;
  };

  Lane(Peer& peer, int index, UniqueFd fd);
  ~Lane();
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;

  // Sends the pieces in order, from the caller's thread when the lane is idle (below), else
  // through the lane's sending thread. `driven`: the transfer's waiter reads this lane's
  // replies itself (its status's driver, Lane::drive), and a payload above MORI_IO_INLINE_BYTES
  // may go from the caller's thread. Otherwise the payload goes through the thread (the caller
  // has other lanes to feed first) and the receiving thread is woken for the replies, even
  // where it lingers after a waiter: nobody else will read them.
  // poll_reply: the reply comes within a round trip and is the transfer's last on this lane (a
  // striped transfer of one piece per lane): the receiving thread polls for it before sleeping.
  void post(std::vector<Piece> pieces, bool driven = false, bool poll_reply = false);
  // The socket's send buffer: a post this large finds room in the kernel at once when the
  // connection has nothing in flight, so sending it costs the caller the copy alone.
  static constexpr size_t kSendBuffer = 4u << 20;
  bool broken() const { return broken_.load(); }
  // Nothing queued, being sent or waiting for its reply: a transfer posted now has the lane to
  // itself (a hint: another caller may post the next moment).
  bool idle();
  // What a waiter for a transfer on this lane alone drives (see LaneDriver).
  std::shared_ptr<StatusDriver> driver() const { return driver_; }
  // Reads replies on the waiter's thread until `s` settles, nothing is pending here or
  // `deadline` passes; the receiving thread stays out of the way meanwhile.
  bool drive(const StatusState& s, std::chrono::steady_clock::time_point deadline);
  // A caller polls a status of this lane's: a receiving thread lingering after a waiter reads
  // at once (cheap when it does not linger: a polling loop calls this every time round).
  void nudge_receiver();
  // Closes the lane and fails everything queued or in flight on it.
  void fail(const std::string& why);

 private:
  std::string naming(const std::string& why) const;  // `why`, prefixed with the peer's name
  static bool expects_reply(const Piece& p);
  void tx_loop();
  void rx_loop();
  // The receiving thread waits here while waiters read for themselves (and for kLinger after
  // the last one, which likely comes back soon); false when the lane stops.
  bool rx_may_read();
  // Ends the receiving thread's wait in rx_may_read: replies are coming that no waiter reads
  // (poll: soon enough to poll for, Lane::post's poll_reply).
  void wake_receiver(bool poll = false);
  void read_reply();
  // Polls the socket for `window` (MORI_IO_TCP_POLL_US), holding read_mu_: true when a reply is
  // there to read; false when the window passed, the process's pollers were all busy, or a
  // waiter came (it reads next).
  bool poll_reply_or_waiter(std::chrono::microseconds window);
  void send_pieces(std::vector<Piece>& batch);
  void handle_reply(const wire::Reply& r, SocketReader& reader);
  // Receives the answered piece's payload and completes it (throws if the connection fails).
  void complete(Piece& p, const wire::Reply& r, std::string message, SocketReader& reader);

  Peer& peer_;
  int index_;
  UniqueFd fd_;
  std::atomic<bool> broken_{false};
  std::atomic<bool> stopping_{false};

  std::mutex q_mu_;
  std::condition_variable q_cv_;
  std::deque<Piece> queue_;
  bool sending_ = false;

  std::mutex p_mu_;
  std::deque<Piece> pending_;
  double last_progress_ = 0;

  // Replies are read by whoever holds read_mu_: the receiving thread, or a waiter driving
  // its own transfer (no hand-off to wake it). A waiter announces itself in wanting_ and,
  // when the thread sits in poll(), wakes it through kick_fd_ (an eventfd).
  SocketReader reader_;
  std::mutex read_mu_;
  std::atomic<int> wanting_{0};
  std::atomic<bool> rx_polling_{false};
  UniqueFd kick_fd_;
  std::mutex park_mu_;
  std::condition_variable park_cv_;
  std::chrono::steady_clock::time_point linger_until_{};  // park_mu_
  bool handoff_ = false;                                  // park_mu_: a waiter left work it does not wait for
  bool handoff_polls_ = false;                            // park_mu_: ... and its reply is to be polled for
  bool rx_handed_ = false;                 // the receiving thread's: rx_may_read returned for such a hand-off
  bool rx_awaits_waiter_ = false;          // park_mu_: the thread waits for a waiter to leave
  std::atomic<bool> rx_lingering_{false};  // the thread waits out kLinger
  std::shared_ptr<LaneDriver> driver_;

  // Host bounce buffer for GPU memory (pinned when CUDA is there), grown on demand.
  // tx and rx each have their own: they run at the same time.
  static char* staging(std::unique_ptr<gpu::HostBuffer>& buf, size_t n);
  std::unique_ptr<gpu::HostBuffer> tx_staging_, rx_staging_;
  std::thread tx_, rx_;
};

class Peer {
 public:
  Peer(EngineImpl& engine, EngineDesc desc);
  ~Peer();

  const EngineDesc& desc() const { return desc_; }
  EngineImpl& engine() { return engine_; }
  std::string name() const;  // "engine 'key' at host:port"

  // The peer's lanes, dialled on first use and redialled when broken. Throws on failure.
  std::vector<Lane*> lanes();
  // Lane 0 if it is up (never dials: called from completion threads).
  Lane* notify_lane();
  // A transfer to this peer starts: completions are reported in this order.
  void track(const std::shared_ptr<Transfer>& t);
  void finished(Transfer* t);
  // Closes the lanes (joining their threads) and fails what is in flight over them; later
  // lanes() calls throw. Called by the engine on its own thread before it lets the peer go:
  // a lane thread may otherwise drop the last reference (through a finished transfer) and
  // destroy, and so join, itself.
  void close();

  // Direct access (same host). nullptr when not possible (then the pair goes over tcp).
  std::shared_ptr<Grant> grant(const MemoryDesc& remote);
  void revoke(uint32_t region, Lane& from);
  // Forgets every grant (a connection to the peer broke: it may have revoked them).
  void drop_grants();
  bool remote_revoked(uint32_t region);

 private:
  EngineImpl& engine_;
  EngineDesc desc_;
  std::mutex lanes_mu_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  bool closed_ = false;  // guarded by lanes_mu_

  std::mutex order_mu_;
  std::deque<std::shared_ptr<Transfer>> order_;

  std::mutex grants_mu_;
  std::map<uint32_t, std::shared_ptr<Grant>> grants_;
  std::map<uint32_t, bool> revoked_;
  bool direct_refused_ = false;  // the probe failed once: this peer is not reachable directly
};

}  // namespace mori::io
