// SPDX-License-Identifier: MIT
// Through UCX (UCP): RDMA where UCX finds verbs (InfiniBand, RoCE), its tcp and
// shared-memory transports otherwise. One context and worker per PE with a progress
// thread (UcpWorker); worker addresses and every region's packed rkey are exchanged
// once through the bootstrap.
//
// Ordering: UCP does not order operations on an endpoint, so fence() is a worker
// fence, put_signal fences between the data and the signal, and quiet() flushes the
// worker. Liveness: endpoints use peer error handling (a killed peer fails its
// requests), and a ping/pong heartbeat on an active-message id finds a peer that is
// silent (a link down sends no reset) within the timeout.
//
// Where an endpoint has no hardware RMA and atomics (only am lanes: UCX's tcp and
// shared-memory transports), UCP would emulate them in software and answer each one on the
// sender's endpoint from inside UCX, which is a fatal error (an abort) once that endpoint
// failed: a survivor of a PE killed mid put stream aborted (issue 29 item 2). To such a peer
// this transport sends the tcp transport's requests (tcp_protocol.h) over active messages of
// its own; the target checks them as the tcp target does (tcp::RegionTable), applies them and
// answers with an active message whose failure is an ordinary error status. Every request is
// answered: quiet and fence wait for the answers (remote completion), blocking gets and
// fetching atomics for theirs. Where the lanes include rma and amo (RDMA hardware), UCP's RMA
// is used as before.
#pragma once

#if MORI_HAVE_UCX_HEADERS

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mori/core/bootstrap.h"
#include "mori/core/topology.h"
#include "mori/transports/transport.h"
#include "mori/transports/ucx/ucp_library.h"
#include "mori/transports/ucx/ucp_worker.h"
#include "tcp/tcp_target.h"

namespace mori {

class UcxTransport : public Transport, private Progress {
 public:
  // Collective over `bootstrap` (every PE calls it; PEs without ucx peers pass none).
  // Returns nullptr on every PE when no PE has ucx peers. `on_progress` runs after UCX
  // progress did something (remote data may have landed: wake local waiters).
  static std::unique_ptr<UcxTransport> create(Bootstrap& bootstrap, const ucx::Ucp& api,
                                              const std::vector<int>& ucx_peers, double timeout_s,
                                              std::function<void()> on_progress);
  ~UcxTransport() override;

  const char* name() const override { return "ucx"; }

  void connect_region(MemRegion& region, int pe) override;
  void disconnect_region(MemRegion& region, int pe) override;
  void expose_region(const MemRegion& region) override;
  void* direct_ptr(int pe, RemoteRef r) override { return nullptr; }

  void put(int pe, RemoteRef dst, const void* src, size_t n, bool nbi) override;
  void get(int pe, void* dst, RemoteRef src, size_t n, bool nbi) override;
  uint64_t atomic(int pe, RemoteRef target, AmoOp op, int width, uint64_t operand, uint64_t compare) override;
  void put_signal(int pe, RemoteRef dst, const void* src, size_t n, RemoteRef signal, uint64_t value, SignalOp op,
                  bool nbi) override;
  void notify(int pe, RemoteRef dst, const void* src, size_t n, RemoteRef signal, uint64_t value, SignalOp op) override;
  void fence(int pe) override;
  void quiet() override;
  // Whether operations to `pe` travel as MORI's requests over active messages (no hardware
  // RMA lane to it) rather than as UCP RMA.
  bool uses_active_messages(int pe) const { return pe >= 0 && pe < n_pes_ && am_rma_[pe]; }

  int dead_peer() const override;
  Progress* progress() override { return this; }
  bool has_progress_thread() const override { return true; }
  // "ucx " + the UCX transports/devices of the endpoint to `pe` and their roles, e.g.
  // "ucx tcp/eth0: am am_bw keepalive wireup" (wires the endpoint up first), and where its
  // RMA goes as MORI requests over active messages, says so.
  std::string endpoint(int pe) const override;

 private:
  // Progress: a waiting PE drives the worker itself (peers' emulated RMA lands meanwhile).
  bool poll() override { return worker_->progress() != 0; }
  void begin_polling() override { worker_->begin_polling(); }
  void end_polling(bool will_sleep) override { worker_->end_polling(will_sleep); }
  void set_crowded(bool crowded) override { worker_->set_spin_while_busy(!crowded); }

  struct Region {
    ucp_mem_h memh = nullptr;
    std::vector<std::string> packed;  // every PE's packed rkey ("" where UCX cannot reach it)
    std::vector<ucp_rkey_h> rkeys;    // unpacked for our peers
  };
  struct PeerError {  // the error handler's argument
    UcxTransport* self;
    int pe;
  };

  UcxTransport(Bootstrap& bootstrap, const ucx::Ucp& api, int my_pe, int n_pes, double timeout_s);
  void heartbeat();
  static ucs_status_t on_am(void* arg, const void* header, size_t header_length, void* data, size_t length,
                            const ucp_am_recv_param_t* param);
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);

  // An error of a request to `pe` (-1: any peer) that did not complete with `s`: the lost PE
  // named where there is one.
  [[noreturn]] void raise_failed(ucs_status_t s, int pe, const char* what);

  // Requests over active messages (see the top of this file).
  struct AmHeader {
    tcp::Request rq;
    int32_t from_pe;
    uint32_t pad;
  };
  // A payload up to this size travels inside the active message's header: one contiguous
  // message for UCX to copy, instead of a header and a payload. (A first measurement that
  // seemed to show separate payloads ~1.5 ms slower over UCX's tcp was noise of the loaded VM:
  // repeated runs of either form spread from 0.1 to 1.6 ms per operation.)
  static constexpr size_t kInlineBytes = 256;
  struct AmPending {  // a request awaiting its answer
    // The header (and an inline payload): UCP reads it until the send completes, which the
    // answer proves.
    alignas(8) char wire[sizeof(AmHeader) + kInlineBytes];
    int pe = -1;
    char* dst = nullptr;   // a get's destination
    size_t length = 0;     // and its length
    bool counted = false;  // quiet and fence wait for it
    bool waited = false;   // its caller waits and raises its error; else the error waits for quiet
    std::atomic<bool> done{false};
    uint64_t value = 0;  // a fetching atomic's old value
    uint8_t status = 0;  // tcp::ReplyStatus
    std::string error;
  };
  static ucs_status_t on_am_request(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                    const ucp_am_recv_param_t* param);
  static ucs_status_t on_am_reply(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                  const ucp_am_recv_param_t* param);
  void serve_am(const AmHeader& h, const void* data, size_t length);
  void am_answer(int pe, const tcp::Request& rq, tcp::ReplyStatus status, uint64_t value, const void* data,
                 size_t length);
  // Sends `rq` (+ `payload` of rq.length bytes) to `pe`. `pending`: registered for its answer
  // (nullptr: nobody needs one, and the send is waited for here). `wait_local`: returns once
  // `payload` may be reused.
  void am_send(int pe, tcp::Request rq, const void* payload, const std::shared_ptr<AmPending>& pending, bool wait_local,
               const char* what);
  std::shared_ptr<AmPending> am_pending(int pe, bool counted, bool waited, char* dst = nullptr);
  void am_await(AmPending& p, const char* what);
  // Waits for every counted request's answer (quiet, fence); raises refusals nobody waited for.
  void am_complete(const char* what);
  void am_put(int pe, RemoteRef dst, const void* src, size_t n, bool nbi);
  void am_get(int pe, void* dst, RemoteRef src, size_t n, bool nbi);
  uint64_t am_atomic(int pe, RemoteRef target, AmoOp op, int width, uint64_t operand, uint64_t compare);
  // put_signal (`answered`) and notify (not answered, not waited for by quiet).
  void am_put_signal(int pe, RemoteRef dst, const void* src, size_t n, RemoteRef signal, uint64_t value, SignalOp op,
                     bool answered, bool nbi, const char* what);

  ucp_ep_h ep(int pe, const char* what) const;
  ucp_rkey_h rkey(int pe, const RemoteRef& r, const char* what);
  uint64_t remote_address(int pe, const RemoteRef& r) const;
  // Waits for `request` of an operation to `pe` (-1: any peer); throws naming the PE.
  void finish(ucs_status_ptr_t request, int pe, const char* what);
  bool peer_lost(int pe) const;
  void close_endpoints();

  Bootstrap& bootstrap_;  // the runtime's; outlives its transports
  const ucx::Ucp& api_;
  int my_pe_, n_pes_;
  double timeout_s_;
  std::unique_ptr<ucx::UcpWorker> worker_;
  std::vector<ucp_ep_h> eps_;  // by PE; null for PEs not reached over ucx
  std::vector<PeerError> error_args_;
  std::unique_ptr<std::atomic<int>[]> ep_status_;          // UCS_OK until the endpoint fails
  std::unique_ptr<std::atomic<int64_t>[]> last_heard_ns_;  // a pong from the PE (steady clock)
  std::unique_ptr<std::atomic<bool>[]> finalized_;         // said goodbye
  std::unique_ptr<std::atomic<int64_t>[]> lost_at_ns_;     // when its endpoint failed (0: it did not)
  std::mutex regions_mu_;
  std::vector<std::unique_ptr<Region>> regions_;  // by region id
  // Operations that may not yet be applied at the target (puts, nbi gets), counted; quiet
  // flushes only when some were posted since the last flush.
  std::atomic<uint64_t> unflushed_{0}, flushed_{0};
  // AMOs whose result nobody reads, posted with a reply (their request completes once the
  // target applied them) and not waited for: quiet waits for these instead of a flush, which
  // costs a round trip of its own (a barrier's quiet found its last AMO long complete).
  // Non-blocking gets go here too: a flush alone does not always wait for them (see get()).
  struct PostedAmo {
    ucs_status_ptr_t request;
    int pe;
    const char* what;
  };
  std::mutex posted_mu_;
  std::deque<PostedAmo> posted_amos_;  // in posting order
  std::deque<PostedAmo> notices_;      // notify()'s signals: reaped as they complete, not by quiet
  // put_signal's and notify's common part: the data (if any), a fence (after data, or always
  // when `fence`), the signal's AMO; the two requests, not waited for.
  std::pair<ucs_status_ptr_t, ucs_status_ptr_t> post_put_signal(int pe, RemoteRef dst, const void* src, size_t n,
                                                                RemoteRef signal, const uint64_t& value, SignalOp op,
                                                                bool fence, const char* what);
  void post_amo(ucs_status_ptr_t request, int pe, const char* what, std::deque<PostedAmo>& list);
  void post_amo(ucs_status_ptr_t request, int pe, const char* what) { post_amo(request, pe, what, posted_amos_); }
  void wait_posted_amos();
  std::vector<uint8_t> am_rma_;  // by PE: requests go over active messages (see the top)
  tcp::RegionTable exposed_;     // what peers' requests over active messages may touch
  std::mutex am_mu_;
  std::unordered_map<uint64_t, std::shared_ptr<AmPending>> am_pending_;  // by request seq
  std::vector<std::string> am_errors_;                                   // refusals nobody waited for
  std::atomic<uint64_t> am_seq_{0};
  std::unique_ptr<std::atomic<int64_t>[]> am_in_flight_;  // by PE: counted requests unanswered
  std::atomic<int64_t> am_in_flight_total_{0};
  uint64_t sink_ = 0;          // reply buffer of AMOs whose old value nobody reads
  int32_t ping_[2], pong_[2];  // heartbeat headers: (this PE, kind)
};

}  // namespace mori

#endif  // MORI_HAVE_UCX_HEADERS
