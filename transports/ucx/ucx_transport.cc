// SPDX-License-Identifier: MIT
#include "ucx/ucx_transport.h"

#if MORI_HAVE_UCX_HEADERS

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>

#include "mori/core/log.h"
#include "mori/core/status.h"
#include "mori/transports/ucx/ucp_report.h"

namespace mori {

namespace {

constexpr unsigned kHeartbeatAm = 0x4d4f;  // "MO"
constexpr unsigned kRequestAm = 0x4d50;    // MORI's RMA requests where UCX has no RMA lane
constexpr unsigned kAnswerAm = 0x4d51;     // their answers
enum HeartbeatKind : int32_t { kPing = 0, kPong = 1, kBye = 2 };

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Variable-length allgather: every PE's blob, by PE.
std::vector<std::string> allgather_blobs(Bootstrap& b, const std::string& mine) {
  auto sizes = b.allgather_values(static_cast<uint64_t>(mine.size()));
  size_t width = *std::max_element(sizes.begin(), sizes.end());
  std::string padded = mine;
  padded.resize(width);
  std::string all(width * sizes.size(), '\0');
  if (width) b.allgather(padded.data(), all.data(), width);
  std::vector<std::string> out(sizes.size());
  for (size_t pe = 0; pe < sizes.size(); ++pe) out[pe] = all.substr(pe * width, sizes[pe]);
  return out;
}

bool ucx_tls_may_use_shared_memory() {
  const char* tls = getenv("UCX_TLS");
  if (!tls || !*tls || tls[0] == '^') return true;
  std::string list = std::string(",") + tls + ",";
  for (const char* name : {"all", "sm", "shm", "mm", "posix", "sysv"})
    if (list.find(std::string(",") + name + ",") != std::string::npos) return true;
  return false;
}

ucp_atomic_op_t ucp_op(AmoOp op) {
  switch (op) {
    case AmoOp::kFetch:
    case AmoOp::kAdd:
    case AmoOp::kFetchAdd: return UCP_ATOMIC_OP_ADD;
    case AmoOp::kSet:
    case AmoOp::kSwap: return UCP_ATOMIC_OP_SWAP;
    case AmoOp::kCompareSwap: return UCP_ATOMIC_OP_CSWAP;
    case AmoOp::kAnd:
    case AmoOp::kFetchAnd: return UCP_ATOMIC_OP_AND;
    case AmoOp::kOr:
    case AmoOp::kFetchOr: return UCP_ATOMIC_OP_OR;
    case AmoOp::kXor:
    case AmoOp::kFetchXor: return UCP_ATOMIC_OP_XOR;
  }
  return UCP_ATOMIC_OP_LAST;
}

}  // namespace

UcxTransport::UcxTransport(Bootstrap& bootstrap, const ucx::Ucp& api, int my_pe, int n_pes, double timeout_s)
    : bootstrap_(bootstrap),
      api_(api),
      my_pe_(my_pe),
      n_pes_(n_pes),
      timeout_s_(timeout_s),
      eps_(n_pes, nullptr),
      error_args_(n_pes),
      ep_status_(new std::atomic<int>[n_pes]),
      last_heard_ns_(new std::atomic<int64_t>[n_pes]),
      finalized_(new std::atomic<bool>[n_pes]),
      lost_at_ns_(new std::atomic<int64_t>[n_pes]),
      am_rma_(n_pes, 0),
      exposed_(my_pe),
      am_in_flight_(new std::atomic<int64_t>[n_pes]) {
  int64_t t = now_ns();
  for (int pe = 0; pe < n_pes; ++pe) {
    ep_status_[pe].store(UCS_OK);
    last_heard_ns_[pe].store(t);
    finalized_[pe].store(false);
    lost_at_ns_[pe].store(0);
    am_in_flight_[pe].store(0);
    error_args_[pe] = {this, pe};
  }
  ping_[0] = pong_[0] = my_pe;
  ping_[1] = kPing;
  pong_[1] = kPong;
}

std::unique_ptr<UcxTransport> UcxTransport::create(Bootstrap& bootstrap, const ucx::Ucp& api,
                                                   const std::vector<int>& ucx_peers, double timeout_s,
                                                   std::function<void()> on_progress) {
  int me = bootstrap.rank(), n = bootstrap.size();
  std::unique_ptr<UcxTransport> t(new UcxTransport(bootstrap, api, me, n, timeout_s));
  ucx::UcpWorker::Options o;
  o.owner = "shmem PE " + std::to_string(me);
  o.features = UCP_FEATURE_RMA | UCP_FEATURE_AMO32 | UCP_FEATURE_AMO64 | UCP_FEATURE_AM;
  o.config = {
      // No memory-type detection: MORI says which memory a region is, and the cache's
      // malloc/mmap hooks have broken other runtimes' finalize here (Open MPI oshmem).
      {"MEMTYPE_CACHE", "n"},
      // Two threads take the worker lock (a caller and the progress thread): one that finds
      // it held sleeps instead of spinning on a holder that the scheduler preempted.
      {"USE_MT_MUTEX", "y"},
  };
  // Shared-memory transports only take part with peer error handling when told to (set
  // only when UCX_TLS may select them: UCX warns about settings nothing used).
  if (ucx_tls_may_use_shared_memory()) o.config.emplace_back("MM_ERROR_HANDLING", "y");
  UcxTransport* self = t.get();
  o.on_progress = std::move(on_progress);
  // Heartbeat often enough that a silent peer is found within the timeout.
  o.periodic_s = std::clamp(timeout_s / 4, 0.05, 1.0);
  o.periodic = [self] { self->heartbeat(); };
  t->worker_ = std::make_unique<ucx::UcpWorker>(api, std::move(o));

  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG |
                  UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  hp.id = kHeartbeatAm;
  hp.cb = &UcxTransport::on_am;
  hp.arg = self;
  hp.flags = UCP_AM_FLAG_WHOLE_MSG;
  ucx::check(api, api.worker_set_am_recv_handler(t->worker_->worker(), &hp), "ucp_worker_set_am_recv_handler");
  for (auto [id, cb] : {std::pair{kRequestAm, &UcxTransport::on_am_request}, {kAnswerAm, &UcxTransport::on_am_reply}}) {
    hp.id = id;
    hp.cb = cb;
    ucx::check(api, api.worker_set_am_recv_handler(t->worker_->worker(), &hp), "ucp_worker_set_am_recv_handler");
  }

  auto addresses = allgather_blobs(bootstrap, t->worker_->address());
  for (int pe : ucx_peers) {
    ucp_ep_params_t ep{};
    ep.field_mask =
        UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(addresses.at(pe).data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &UcxTransport::on_ep_error;
    ep.err_handler.arg = &t->error_args_[pe];
    ucs_status_t s = api.ep_create(t->worker_->worker(), &ep, &t->eps_.at(pe));
    if (s != UCS_OK)
      raise(Status::kUnavailable, "PE %d: no UCX transport reaches PE %d: %s (UCX_TLS=%s)", me, pe,
            api.status_string(s), getenv("UCX_TLS") ? getenv("UCX_TLS") : "all");
    // The lanes are chosen at creation from the peer's address. Without both an rma and an
    // amo lane UCP would emulate RMA or atomics in software (the abort of issue 29 item 2):
    // use ours. (An rma_bw lane alone serves only rendezvous: UCX's tcp has one at times.)
    bool rma = false, amo = false;
    for (const auto& lane : ucx::endpoint_lanes(api, t->eps_[pe]))
      for (const auto& role : lane.roles) {
        rma |= role == "rma";
        amo |= role == "amo";
      }
    t->am_rma_[pe] = !(rma && amo);
    MORI_LOG(kDebug, "UCX", "PE %d -> PE %d: %s", me, pe,
             t->am_rma_[pe] ? "MORI requests over active messages (no hardware RMA and atomics)" : "UCP RMA");
  }
  t->worker_->start();
  MORI_LOG(kInfo, "UCX", "PE %d: UCX %s (%s), %zu ucx peers", me, api.version.c_str(), api.path.c_str(),
           ucx_peers.size());
  return t;
}

UcxTransport::~UcxTransport() {
  exposed_.stop();
  worker_->stop();
  for (auto* list : {&posted_amos_, &notices_}) {
    for (auto& a : *list) {
      ucs_status_t s = worker_->wait(a.request, std::min(timeout_s_, 2.0));
      if (s == UCS_ERR_TIMED_OUT || s == UCS_ERR_CANCELED) worker_->release(a.request);
    }
    list->clear();
  }
  // Goodbyes first, so peers do not take our silence for a death.
  int32_t bye[2] = {my_pe_, kBye};
  std::vector<ucs_status_ptr_t> pending;
  for (int pe = 0; pe < n_pes_; ++pe) {
    if (!eps_[pe] || peer_lost(pe)) continue;
    ucp_request_param_t p{};
    pending.push_back(api_.am_send_nbx(eps_[pe], kHeartbeatAm, bye, sizeof(bye), nullptr, 0, &p));
  }
  for (auto r : pending) {
    ucs_status_t s = worker_->wait(r, std::min(timeout_s_, 2.0));
    if (s == UCS_ERR_TIMED_OUT || s == UCS_ERR_CANCELED) worker_->release(r);
  }
  {
    std::lock_guard<std::mutex> lock(regions_mu_);
    for (auto& r : regions_) {
      if (!r) continue;
      for (auto& k : r->rkeys) {
        if (k) api_.rkey_destroy(k);
        k = nullptr;
      }
    }
  }
  close_endpoints();
  // Registrations last: destroying the worker purges what the endpoints still hold, UCX's own
  // requests for a peer's half-served operation included, and those use them.
  worker_->destroy_worker();
  std::lock_guard<std::mutex> lock(regions_mu_);
  for (auto& r : regions_)
    if (r && r->memh) api_.mem_unmap(worker_->context(), r->memh);
  regions_.clear();
}

void UcxTransport::close_endpoints() {
  for (int pe = 0; pe < n_pes_; ++pe) {
    if (!eps_[pe]) continue;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    // A lost peer cannot take part in a flush: force-close it.
    p.flags = peer_lost(pe) ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t r = api_.ep_close_nbx(eps_[pe], &p);
    ucs_status_t s = worker_->wait(r, std::min(timeout_s_, 2.0));
    if (s == UCS_ERR_TIMED_OUT) worker_->release(r);
    eps_[pe] = nullptr;
  }
}

ucs_status_t UcxTransport::on_am(void* arg, const void* header, size_t header_length, void*, size_t,
                                 const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxTransport*>(arg);
  if (header_length != sizeof(int32_t) * 2) return UCS_OK;
  int32_t h[2];
  std::memcpy(h, header, sizeof(h));
  int pe = h[0];
  if (pe < 0 || pe >= self->n_pes_) return UCS_OK;
  switch (h[1]) {
    case kPing:
      if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) {
        ucp_request_param_t p{};
        ucs_status_ptr_t r =
            self->api_.am_send_nbx(param->reply_ep, kHeartbeatAm, self->pong_, sizeof(self->pong_), nullptr, 0, &p);
        if (r && !UCS_PTR_IS_ERR(r)) self->api_.request_free(r);
      }
      break;
    case kPong: self->last_heard_ns_[pe].store(now_ns(), std::memory_order_relaxed); break;
    case kBye: self->finalized_[pe].store(true, std::memory_order_release); break;
  }
  return UCS_OK;
}

void UcxTransport::on_ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* a = static_cast<PeerError*>(arg);
  int64_t never = 0;
  a->self->lost_at_ns_[a->pe].compare_exchange_strong(never, now_ns());
  a->self->ep_status_[a->pe].store(status, std::memory_order_release);
  if (!a->self->finalized_[a->pe].load(std::memory_order_acquire))
    MORI_LOG(kWarn, "UCX", "PE %d: the UCX endpoint to PE %d failed: %s", a->self->my_pe_, a->pe,
             a->self->api_.status_string(status));
}

void UcxTransport::heartbeat() {
  for (int pe = 0; pe < n_pes_; ++pe) {
    if (!eps_[pe] || peer_lost(pe) || finalized_[pe].load(std::memory_order_acquire)) continue;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_REPLY;
    ucs_status_ptr_t r = api_.am_send_nbx(eps_[pe], kHeartbeatAm, ping_, sizeof(ping_), nullptr, 0, &p);
    if (r && !UCS_PTR_IS_ERR(r)) api_.request_free(r);
  }
}

bool UcxTransport::peer_lost(int pe) const {
  if (finalized_[pe].load(std::memory_order_acquire)) return false;
  if (ep_status_[pe].load(std::memory_order_acquire) != UCS_OK) return true;
  if (!eps_[pe] || std::isinf(timeout_s_)) return false;
  return static_cast<double>(now_ns() - last_heard_ns_[pe].load(std::memory_order_relaxed)) * 1e-9 > timeout_s_;
}

int UcxTransport::dead_peer() const {
  // The PE lost first: a survivor that failed on it and left is lost second.
  int first = -1;
  int64_t first_at = 0;
  for (int pe = 0; pe < n_pes_; ++pe) {
    if (pe == my_pe_ || !peer_lost(pe)) continue;
    int64_t at = lost_at_ns_[pe].load(std::memory_order_acquire);
    if (at == 0) at = last_heard_ns_[pe].load(std::memory_order_relaxed) + static_cast<int64_t>(timeout_s_ * 1e9);
    if (first < 0 || at < first_at) {
      first = pe;
      first_at = at;
    }
  }
  return first;
}

void UcxTransport::expose_region(const MemRegion& region) {
  {
    std::lock_guard<std::mutex> lock(regions_mu_);
    if (region.id < static_cast<int>(regions_.size()) && regions_[region.id]) return;
  }
  auto r = std::make_unique<Region>();
  bool device = region.kind == MemKind::kDevice;
  bool reachable = !device || (worker_->memory_types() & (1ull << UCS_MEMORY_TYPE_CUDA));
  std::string mine;
  if (!reachable) {
    MORI_LOG(kInfo, "UCX",
             "PE %d: region %d is GPU memory and UCX %s reports no CUDA memory support: it stays on the existing "
             "path (the cuda transport within a node)",
             my_pe_, region.id, api_.version.c_str());
  } else if (region.size > 0) {
    ucp_mem_map_params_t mp{};
    mp.field_mask =
        UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    mp.address = region.local_base;
    mp.length = region.size;
    mp.memory_type = device ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
    ucx::check(api_, api_.mem_map(worker_->context(), &mp, &r->memh), "ucp_mem_map of a symmetric region");
    void* buf = nullptr;
    size_t len = 0;
    ucx::check(api_, api_.rkey_pack(worker_->context(), r->memh, &buf, &len), "ucp_rkey_pack");
    mine.assign(static_cast<const char*>(buf), len);
    api_.rkey_buffer_release(buf);
  }
  if (region.kind == MemKind::kHost) exposed_.expose(region);  // for requests over active messages
  // Collective: the runtime exposes every region on every PE in the same order.
  r->packed = allgather_blobs(bootstrap_, mine);
  r->rkeys.assign(n_pes_, nullptr);
  std::lock_guard<std::mutex> lock(regions_mu_);
  if (region.id >= static_cast<int>(regions_.size())) regions_.resize(region.id + 1);
  regions_[region.id] = std::move(r);
}

void UcxTransport::connect_region(MemRegion& region, int pe) {
  std::lock_guard<std::mutex> lock(regions_mu_);
  Region* r = region.id < static_cast<int>(regions_.size()) ? regions_[region.id].get() : nullptr;
  if (!r) raise(Status::kInternal, "ucx: region %d connected before it was exposed", region.id);
  if (r->rkeys[pe] || r->packed.at(pe).empty() || !eps_.at(pe)) return;
  ucx::check(api_, api_.ep_rkey_unpack(eps_[pe], r->packed[pe].data(), &r->rkeys[pe]), "ucp_ep_rkey_unpack");
}

void UcxTransport::disconnect_region(MemRegion& region, int pe) {
  std::lock_guard<std::mutex> lock(regions_mu_);
  Region* r = region.id < static_cast<int>(regions_.size()) ? regions_[region.id].get() : nullptr;
  if (r && r->rkeys.at(pe)) {
    api_.rkey_destroy(r->rkeys[pe]);
    r->rkeys[pe] = nullptr;
  }
}

ucp_ep_h UcxTransport::ep(int pe, const char* what) const {
  ucp_ep_h e = pe >= 0 && pe < n_pes_ ? eps_[pe] : nullptr;
  if (!e) raise(Status::kInternal, "%s: PE %d is not a ucx peer of PE %d", what, pe, my_pe_);
  int s = ep_status_[pe].load(std::memory_order_acquire);
  if (s != UCS_OK)
    raise(Status::kRemote, "PE %d: %s to PE %d failed: PE %d exited or dropped its connection earlier (UCX: %s)",
          my_pe_, what, pe, pe, api_.status_string(static_cast<ucs_status_t>(s)));
  return e;
}

ucp_rkey_h UcxTransport::rkey(int pe, const RemoteRef& r, const char* what) {
  std::lock_guard<std::mutex> lock(regions_mu_);
  const MemRegion& region = *r.region;
  Region* st = region.id < static_cast<int>(regions_.size()) ? regions_[region.id].get() : nullptr;
  ucp_rkey_h k = st ? st->rkeys.at(pe) : nullptr;
  if (!k) {
    if (region.kind == MemKind::kDevice)
      raise(Status::kUnavailable, "%s to PE %d: region %d is GPU memory, and UCX %s here has no CUDA memory support",
            what, pe, region.id, api_.version.c_str());
    raise(Status::kInternal, "%s to PE %d: region %d is not connected over ucx", what, pe, region.id);
  }
  return k;
}

uint64_t UcxTransport::remote_address(int pe, const RemoteRef& r) const {
  return r.region->remote_bases.at(pe) + r.offset;
}

void UcxTransport::finish(ucs_status_ptr_t request, int pe, const char* what) {
  ucs_status_t s = worker_->wait(request, timeout_s_, [this, pe] {
    if (pe >= 0) return peer_lost(pe);
    return dead_peer() >= 0;
  });
  if (s == UCS_OK) return;
  if (s == UCS_ERR_TIMED_OUT || s == UCS_ERR_CANCELED) worker_->release(request);
  raise_failed(s, pe, what);
}

void UcxTransport::raise_failed(ucs_status_t s, int pe, const char* what) {
  int lost = pe >= 0 ? pe : dead_peer();
  if (s == UCS_ERR_TIMED_OUT) {
    if (lost < 0) lost = pe;
    raise(Status::kTimeout, "PE %d: %s%s%s over ucx did not complete within %.1f s (MORI_BOOTSTRAP_TIMEOUT)%s", my_pe_,
          what, lost >= 0 ? " to PE " : "", lost >= 0 ? std::to_string(lost).c_str() : "", timeout_s_,
          lost >= 0 ? (" (lost PE " + std::to_string(lost) + ")").c_str() : "");
  }
  if (lost >= 0 && s == UCS_ERR_CANCELED) {
    int es = ep_status_[lost].load();
    raise(Status::kRemote, "PE %d: %s to PE %d over ucx failed: PE %d exited or dropped its connection (UCX: %s)",
          my_pe_, what, lost, lost,
          es != UCS_OK ? api_.status_string(static_cast<ucs_status_t>(es)) : "silent beyond the timeout");
  }
  if (lost >= 0)
    raise(Status::kRemote, "PE %d: %s to PE %d over ucx failed: PE %d exited or dropped its connection (UCX: %s)",
          my_pe_, what, lost, lost, api_.status_string(s));
  raise(Status::kTransport, "PE %d: %s over ucx failed: %s", my_pe_, what, api_.status_string(s));
}

// ---- requests over active messages (see ucx_transport.h) ----

ucs_status_t UcxTransport::on_am_request(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                         const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxTransport*>(arg);
  // Sent eagerly (UCP_AM_SEND_FLAG_EAGER): a rendezvous one is not ours.
  if (header_length < sizeof(AmHeader) || header_length > sizeof(AmHeader) + kInlineBytes ||
      (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV))
    return UCS_OK;
  AmHeader h;
  std::memcpy(&h, header, sizeof(h));
  if (h.from_pe < 0 || h.from_pe >= self->n_pes_ || !self->eps_[h.from_pe]) return UCS_OK;
  if (header_length > sizeof(AmHeader)) {  // an inline payload (kInlineBytes)
    if (length) return UCS_OK;             // not both
    data = const_cast<char*>(static_cast<const char*>(header) + sizeof(AmHeader));
    length = header_length - sizeof(AmHeader);
  }
  self->serve_am(h, data, length);
  return UCS_OK;  // UCP keeps no data of ours
}

void UcxTransport::serve_am(const AmHeader& h, const void* data, size_t length) {
  const tcp::Request& rq = h.rq;
  const int peer = h.from_pe;
  const auto op = static_cast<tcp::Op>(rq.op);
  const bool carries = op == tcp::Op::kPut || op == tcp::Op::kPutSignal;
  std::string refused;
  if ((carries && length != rq.length) || (!carries && length != 0))
    refused = format("PE %d refused a request from PE %d: %zu bytes came with a request for %llu", my_pe_, peer, length,
                     static_cast<unsigned long long>(rq.length));
  else if ((carries || op == tcp::Op::kGet) && rq.length > tcp::kMaxChunk)
    refused = format("PE %d refused a request of %llu bytes from PE %d: requests carry at most %zu bytes", my_pe_,
                     static_cast<unsigned long long>(rq.length), peer, tcp::kMaxChunk);
  if (!refused.empty()) {
    MORI_LOG(kWarn, "UCX", "%s", refused.c_str());
    am_answer(peer, rq, tcp::ReplyStatus::kBadRequest, 0, refused.data(), refused.size());
    return;
  }
  tcp::RegionTable::Located at = exposed_.locate(rq, peer);  // the tcp target's checks
  if (!at.data) {
    MORI_LOG(kWarn, "UCX", "%s", at.error.c_str());
    at.error.resize(std::min(at.error.size(), tcp::kMaxErrorText));
    am_answer(peer, rq, at.status, 0, at.error.data(), at.error.size());
    return;
  }
  switch (op) {
    case tcp::Op::kPut:
    case tcp::Op::kPutSignal:
      if (length) std::memcpy(at.data, data, length);
      tcp::RegionTable::apply(at, rq);
      if (rq.flags & tcp::kFlagAck) am_answer(peer, rq, tcp::ReplyStatus::kOk, 0, nullptr, 0);
      return;
    case tcp::Op::kGet:
      std::atomic_thread_fence(std::memory_order_acquire);
      am_answer(peer, rq, tcp::ReplyStatus::kOk, 0, at.data, rq.length);
      return;
    default: {  // kAmo (locate() refuses every other op)
      uint64_t old = tcp::RegionTable::apply(at, rq);
      if (tcp::is_fetching(static_cast<AmoOp>(rq.aux)) || (rq.flags & tcp::kFlagAck))
        am_answer(peer, rq, tcp::ReplyStatus::kOk, old, nullptr, 0);
    }
  }
}

void UcxTransport::am_answer(int pe, const tcp::Request& rq, tcp::ReplyStatus status, uint64_t value, const void* data,
                             size_t length) {
  // An endpoint that failed gets no answer: the requester is gone (sending on it would only
  // fail, with an error status: our own active message, not UCP's software RMA).
  if (ep_status_[pe].load(std::memory_order_acquire) != UCS_OK) return;
  // The header must live until the send completes: the completion callback frees it.
  struct Answer {
    const ucx::Ucp* api;
    tcp::Reply reply;
    char inline_data[kInlineBytes];  // a small payload travels in the header (see kInlineBytes)
  };
  auto* a = new Answer;
  a->api = &api_;
  tcp::Reply* reply = &a->reply;
  *reply = tcp::Reply{};
  reply->status = static_cast<uint8_t>(status);
  reply->op = rq.op;
  reply->length = static_cast<uint32_t>(length);
  reply->seq = rq.seq;
  reply->value = value;
  const bool inline_data = length <= kInlineBytes;
  if (inline_data && length) std::memcpy(a->inline_data, data, length);
  static_assert(offsetof(Answer, inline_data) == offsetof(Answer, reply) + sizeof(tcp::Reply));
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.flags = UCP_AM_SEND_FLAG_EAGER;
  p.user_data = a;
  p.cb.send = [](void* request, ucs_status_t, void* user_data) {
    auto* done = static_cast<Answer*>(user_data);
    done->api->request_free(request);
    delete done;
  };
  ucs_status_ptr_t r = inline_data
                           ? api_.am_send_nbx(eps_[pe], kAnswerAm, reply, sizeof(*reply) + length, nullptr, 0, &p)
                           : api_.am_send_nbx(eps_[pe], kAnswerAm, reply, sizeof(*reply), data, length, &p);
  if (r == nullptr || UCS_PTR_IS_ERR(r)) delete a;  // done at once, or failed (the peer is gone): no callback
}

ucs_status_t UcxTransport::on_am_reply(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                       const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxTransport*>(arg);
  if (header_length < sizeof(tcp::Reply) || header_length > sizeof(tcp::Reply) + kInlineBytes ||
      (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV))
    return UCS_OK;
  tcp::Reply r;
  std::memcpy(&r, header, sizeof(r));
  if (header_length > sizeof(tcp::Reply)) {  // an inline payload (kInlineBytes)
    if (length) return UCS_OK;
    data = const_cast<char*>(static_cast<const char*>(header) + sizeof(tcp::Reply));
    length = header_length - sizeof(tcp::Reply);
  }
  std::shared_ptr<AmPending> p;
  {
    std::lock_guard<std::mutex> lock(self->am_mu_);
    auto it = self->am_pending_.find(r.seq);
    if (it != self->am_pending_.end()) {
      p = std::move(it->second);
      self->am_pending_.erase(it);
    }
    if (r.status != static_cast<uint8_t>(tcp::ReplyStatus::kOk) && (!p || !p->waited))
      self->am_errors_.push_back(length ? std::string(static_cast<const char*>(data), length)
                                        : format("a request was refused (status %d)", r.status));
  }
  if (!p) return UCS_OK;  // a notify's refusal: recorded above
  if (r.status == static_cast<uint8_t>(tcp::ReplyStatus::kOk)) {
    if (p->dst && length == p->length) {
      std::memcpy(p->dst, data, length);
    } else if (p->dst) {
      p->status = static_cast<uint8_t>(tcp::ReplyStatus::kBadRequest);
      p->error = format("PE %d answered a get of %llu bytes with %zu", p->pe,
                        static_cast<unsigned long long>(p->length), length);
    }
    p->value = r.value;
  } else {
    p->status = r.status;
    p->error.assign(static_cast<const char*>(data), length);
  }
  if (p->counted) {
    self->am_in_flight_[p->pe].fetch_sub(1, std::memory_order_relaxed);
    self->am_in_flight_total_.fetch_sub(1, std::memory_order_release);
  }
  p->done.store(true, std::memory_order_release);
  return UCS_OK;
}

std::shared_ptr<UcxTransport::AmPending> UcxTransport::am_pending(int pe, bool counted, bool waited, char* dst) {
  auto p = std::make_shared<AmPending>();
  p->pe = pe;
  p->counted = counted;
  p->waited = waited;
  p->dst = dst;
  return p;
}

void UcxTransport::am_send(int pe, tcp::Request rq, const void* payload, const std::shared_ptr<AmPending>& pending,
                           bool wait_local, const char* what) {
  ucp_ep_h e = ep(pe, what);
  rq.seq = am_seq_.fetch_add(1, std::memory_order_relaxed) + 1;
  const bool carries =
      rq.op == static_cast<uint8_t>(tcp::Op::kPut) || rq.op == static_cast<uint8_t>(tcp::Op::kPutSignal);
  const size_t n = carries ? rq.length : 0;
  const size_t inline_n = n <= kInlineBytes ? n : 0;  // see kInlineBytes
  alignas(8) char local[sizeof(AmHeader) + kInlineBytes];
  char* wire = pending ? pending->wire : local;
  AmHeader h{rq, my_pe_, 0};
  std::memcpy(wire, &h, sizeof(h));
  if (inline_n) std::memcpy(wire + sizeof(h), payload, inline_n);
  if (pending) {
    std::lock_guard<std::mutex> lock(am_mu_);
    am_pending_[rq.seq] = pending;  // before the send: the answer may come first
    if (pending->counted) {
      am_in_flight_[pe].fetch_add(1, std::memory_order_relaxed);
      am_in_flight_total_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_EAGER;  // no rendezvous: the handler gets the whole request
  ucs_status_ptr_t r = inline_n || n == 0 ? api_.am_send_nbx(e, kRequestAm, wire, sizeof(h) + inline_n, nullptr, 0, &p)
                                          : api_.am_send_nbx(e, kRequestAm, wire, sizeof(h), payload, n, &p);
  if (UCS_PTR_IS_ERR(r)) {
    if (pending) {
      std::lock_guard<std::mutex> lock(am_mu_);
      if (am_pending_.erase(rq.seq) && pending->counted) {
        am_in_flight_[pe].fetch_sub(1, std::memory_order_relaxed);
        am_in_flight_total_.fetch_sub(1, std::memory_order_relaxed);
      }
    }
    raise_failed(UCS_PTR_STATUS(r), pe, what);
  }
  // The header stays alive until the send completes: on this stack (waited for here) or in
  // `pending` (its answer proves the target received all of it).
  if (wait_local || !pending)
    finish(r, pe, what);
  else if (r)
    api_.request_free(r);
}

void UcxTransport::am_await(AmPending& p, const char* what) {
  ucs_status_t s = worker_->wait_for([&p] { return p.done.load(std::memory_order_acquire); }, timeout_s_,
                                     [this, &p] { return peer_lost(p.pe); });
  if (s != UCS_OK) raise_failed(s, p.pe, what);
  if (p.status != static_cast<uint8_t>(tcp::ReplyStatus::kOk)) raise(Status::kRemote, "%s", p.error.c_str());
}

void UcxTransport::am_complete(const char* what) {
  if (am_in_flight_total_.load(std::memory_order_acquire) > 0) {
    int lost = -1;
    ucs_status_t s =
        worker_->wait_for([this] { return am_in_flight_total_.load(std::memory_order_acquire) <= 0; }, timeout_s_,
                          [this, &lost] {
                            for (int pe = 0; pe < n_pes_; ++pe)
                              if (am_in_flight_[pe].load(std::memory_order_relaxed) > 0 && peer_lost(pe)) {
                                lost = pe;
                                return true;
                              }
                            return false;
                          });
    if (s != UCS_OK) {
      if (lost < 0)
        for (int pe = 0; pe < n_pes_ && lost < 0; ++pe)
          if (am_in_flight_[pe].load(std::memory_order_relaxed) > 0) lost = pe;
      raise_failed(s, lost, what);
    }
  }
  std::vector<std::string> errors;
  {
    std::lock_guard<std::mutex> lock(am_mu_);
    errors.swap(am_errors_);
  }
  if (errors.empty()) return;
  std::string all = errors.front();
  if (errors.size() > 1) all += format(" (and %zu more refused requests)", errors.size() - 1);
  raise(Status::kRemote, "%s", all.c_str());
}

namespace {

tcp::Request am_request(tcp::Op op, const RemoteRef& r, size_t offset, size_t n) {
  tcp::Request rq{};
  rq.op = static_cast<uint8_t>(op);
  rq.region = static_cast<uint32_t>(r.region->id);
  rq.offset = r.offset + offset;
  rq.length = n;
  return rq;
}

}  // namespace

void UcxTransport::am_put(int pe, RemoteRef dst, const void* src, size_t n, bool nbi) {
  // In pieces of at most the tcp transport's chunk: the target holds a whole request in memory.
  for (size_t off = 0; off < n; off += tcp::kMaxChunk) {
    size_t len = std::min(n - off, tcp::kMaxChunk);
    tcp::Request rq = am_request(tcp::Op::kPut, dst, off, len);
    rq.flags = tcp::kFlagAck;  // quiet waits for the answer
    am_send(pe, rq, static_cast<const char*>(src) + off, am_pending(pe, true, false), !nbi, "shmem_put");
  }
}

void UcxTransport::am_get(int pe, void* dst, RemoteRef src, size_t n, bool nbi) {
  std::vector<std::shared_ptr<AmPending>> mine;
  for (size_t off = 0; off < n; off += tcp::kMaxChunk) {
    size_t len = std::min(n - off, tcp::kMaxChunk);
    auto p = am_pending(pe, nbi, !nbi, static_cast<char*>(dst) + off);
    p->length = len;
    am_send(pe, am_request(tcp::Op::kGet, src, off, len), nullptr, p, false, "shmem_get");
    if (!nbi) mine.push_back(std::move(p));
  }
  for (auto& p : mine) am_await(*p, "shmem_get");
}

uint64_t UcxTransport::am_atomic(int pe, RemoteRef target, AmoOp op, int width, uint64_t operand, uint64_t compare) {
  tcp::Request rq = am_request(tcp::Op::kAmo, target, 0, 0);
  rq.aux = static_cast<uint8_t>(op);
  rq.width = static_cast<uint8_t>(width);
  rq.operand = operand;
  rq.compare = compare;
  const bool fetching = tcp::is_fetching(op);
  if (!fetching) rq.flags = tcp::kFlagAck;  // quiet waits for the answer
  auto p = am_pending(pe, !fetching, fetching);
  am_send(pe, rq, nullptr, p, false, amo_name(op));
  if (!fetching) return 0;
  am_await(*p, amo_name(op));
  return width == 4 ? static_cast<uint32_t>(p->value) : p->value;
}

void UcxTransport::am_put_signal(int pe, RemoteRef dst, const void* src, size_t n, RemoteRef signal, uint64_t value,
                                 SignalOp op, bool answered, bool nbi, const char* what) {
  // All but the last piece as puts, answered before the signal's piece leaves: active
  // messages are not ordered, and the signal must not overtake its data.
  size_t last = n > tcp::kMaxChunk ? (n - 1) / tcp::kMaxChunk * tcp::kMaxChunk : 0;
  if (last) {
    std::vector<std::shared_ptr<AmPending>> pieces;
    for (size_t off = 0; off < last; off += tcp::kMaxChunk) {
      tcp::Request rq = am_request(tcp::Op::kPut, dst, off, tcp::kMaxChunk);
      rq.flags = tcp::kFlagAck;
      pieces.push_back(am_pending(pe, false, true));
      am_send(pe, rq, static_cast<const char*>(src) + off, pieces.back(), false, what);
    }
    for (auto& p : pieces) am_await(*p, what);
  }
  tcp::Request rq = am_request(tcp::Op::kPutSignal, dst, last, n - last);
  rq.aux = static_cast<uint8_t>(op);
  rq.operand = value;
  rq.signal_region = static_cast<uint32_t>(signal.region->id);
  rq.signal_offset = signal.offset;
  const char* data = n ? static_cast<const char*>(src) + last : nullptr;  // notify's src may be null
  if (!answered) {  // notify: the receiver's wait for the signal proves delivery
    am_send(pe, rq, data, nullptr, true, what);
    return;
  }
  rq.flags = tcp::kFlagAck;
  am_send(pe, rq, data, am_pending(pe, true, false), !nbi, what);
}

void UcxTransport::put(int pe, RemoteRef dst, const void* src, size_t n, bool nbi) {
  if (n == 0) return;
  worker_->note_call();
  if (uses_active_messages(pe)) return am_put(pe, dst, src, n, nbi);
  ucp_ep_h e = ep(pe, "shmem_put");
  ucp_rkey_h k = rkey(pe, dst, "shmem_put");
  ucp_request_param_t p{};
  unflushed_.fetch_add(1, std::memory_order_relaxed);
  ucs_status_ptr_t r = api_.put_nbx(e, src, n, remote_address(pe, dst), k, &p);
  if (nbi && !UCS_PTR_IS_ERR(r)) {
    if (r) api_.request_free(r);  // completes at quiet (worker flush)
    return;
  }
  finish(r, pe, "shmem_put");
}

void UcxTransport::get(int pe, void* dst, RemoteRef src, size_t n, bool nbi) {
  if (n == 0) return;
  worker_->note_call();
  if (uses_active_messages(pe)) return am_get(pe, dst, src, n, nbi);
  ucp_ep_h e = ep(pe, "shmem_get");
  ucp_rkey_h k = rkey(pe, src, "shmem_get");
  ucp_request_param_t p{};
  ucs_status_ptr_t r = api_.get_nbx(e, dst, n, remote_address(pe, src), k, &p);
  if (nbi && !UCS_PTR_IS_ERR(r)) {
    // Quiet waits for the request itself: UCX 1.13's worker flush can return before a large
    // get (served by the target's worker in fragments over UCX_TLS=sm) has landed.
    post_amo(r, pe, "shmem_get_nbi");
    return;
  }
  finish(r, pe, "shmem_get");
}

uint64_t UcxTransport::atomic(int pe, RemoteRef target, AmoOp op, int width, uint64_t operand, uint64_t compare) {
  if (width != 4 && width != 8) raise(Status::kInvalidArgument, "shmem_atomic: width %d (4 or 8 bytes)", width);
  worker_->note_call();
  if (uses_active_messages(pe)) return am_atomic(pe, target, op, width, operand, compare);
  ucp_ep_h e = ep(pe, amo_name(op));
  ucp_rkey_h k = rkey(pe, target, amo_name(op));
  // Operand and reply in the word's width; UCP reads the operand when the call is made.
  // Fetch is an add of 0, set a swap whose old value is dropped: UCP has every other op.
  uint64_t value = op == AmoOp::kFetch ? 0 : op == AmoOp::kCompareSwap ? compare : operand;
  uint64_t reply = op == AmoOp::kCompareSwap ? operand : 0;  // CSWAP: the new value goes in the reply buffer
  uint32_t value32 = static_cast<uint32_t>(value), reply32 = static_cast<uint32_t>(reply);
  const bool wanted =
      op != AmoOp::kAdd && op != AmoOp::kAnd && op != AmoOp::kOr && op != AmoOp::kXor && op != AmoOp::kSet;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
  p.datatype = ucp_dt_make_contig(width);
  // Every op gets a reply buffer: one whose result nobody reads replies into sink_, so that
  // its request says when the target applied it (see posted_amos_).
  p.reply_buffer = !wanted      ? static_cast<void*>(&sink_)
                   : width == 4 ? static_cast<void*>(&reply32)
                                : static_cast<void*>(&reply);
  const void* buf = width == 4 ? static_cast<const void*>(&value32) : static_cast<const void*>(&value);
  ucs_status_ptr_t r = api_.atomic_op_nbx(e, ucp_op(op), buf, 1, remote_address(pe, target), k, &p);
  if (!wanted) {
    post_amo(r, pe, amo_name(op));
    return 0;
  }
  finish(r, pe, amo_name(op));
  return width == 4 ? reply32 : reply;
}

void UcxTransport::post_amo(ucs_status_ptr_t request, int pe, const char* what, std::deque<PostedAmo>& list) {
  if (request == nullptr) return;  // applied already
  if (UCS_PTR_IS_ERR(request)) finish(request, pe, what);
  PostedAmo failed{nullptr, -1, nullptr};
  {
    std::lock_guard<std::mutex> lock(posted_mu_);
    // Reap the oldest while they are complete (replies come back about in order), so that a
    // long run of AMOs without a quiet stays bounded at about what is in flight.
    while (!list.empty()) {
      PostedAmo& a = list.front();
      ucs_status_t s = api_.request_check_status(a.request);
      if (s == UCS_INPROGRESS) break;
      if (s == UCS_OK) {
        api_.request_free(a.request);
      } else if (!failed.request) {
        failed = a;
      } else {
        api_.request_free(a.request);
      }
      list.pop_front();
    }
    list.push_back({request, pe, what});
  }
  if (failed.request) finish(failed.request, failed.pe, failed.what);  // completed: frees it, raises its error
}

void UcxTransport::wait_posted_amos() {
  std::deque<PostedAmo> mine;
  {
    std::lock_guard<std::mutex> lock(posted_mu_);
    mine.swap(posted_amos_);
  }
  for (size_t i = 0; i < mine.size(); ++i) {
    try {
      finish(mine[i].request, mine[i].pe, mine[i].what);
    } catch (...) {
      for (size_t j = i + 1; j < mine.size(); ++j) worker_->release(mine[j].request);
      throw;
    }
  }
}

std::pair<ucs_status_ptr_t, ucs_status_ptr_t> UcxTransport::post_put_signal(int pe, RemoteRef dst, const void* src,
                                                                            size_t n, RemoteRef signal,
                                                                            const uint64_t& value, SignalOp op,
                                                                            bool fence, const char* what) {
  worker_->note_call();
  ucp_ep_h e = ep(pe, what);
  ucs_status_ptr_t data = nullptr;
  if (n) {
    ucp_request_param_t p{};
    data = api_.put_nbx(e, src, n, remote_address(pe, dst), rkey(pe, dst, what), &p);
    if (UCS_PTR_IS_ERR(data)) finish(data, pe, what);
  }
  // The signal must not overtake the data: UCP orders nothing on its own.
  if (n || fence) ucx::check(api_, api_.worker_fence(worker_->worker()), "ucp_worker_fence");
  ucp_request_param_t a{};
  a.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
  a.datatype = ucp_dt_make_contig(8);
  if (op == SignalOp::kSet) {  // UCP's swap needs a reply buffer; nobody reads it (concurrent writes are harmless)
    a.op_attr_mask |= UCP_OP_ATTR_FIELD_REPLY_BUFFER;
    a.reply_buffer = &sink_;
  }
  // UCP reads the operand when the call is made.
  ucs_status_ptr_t sig = api_.atomic_op_nbx(e, op == SignalOp::kSet ? UCP_ATOMIC_OP_SWAP : UCP_ATOMIC_OP_ADD, &value, 1,
                                            remote_address(pe, signal), rkey(pe, signal, what), &a);
  return {data, sig};
}

void UcxTransport::put_signal(int pe, RemoteRef dst, const void* src, size_t n, RemoteRef signal, uint64_t value,
                              SignalOp op, bool nbi) {
  if (uses_active_messages(pe)) {
    worker_->note_call();
    return am_put_signal(pe, dst, src, n, signal, value, op, true, nbi, "shmem_put_signal");
  }
  unflushed_.fetch_add(1, std::memory_order_relaxed);
  auto [data, sig] = post_put_signal(pe, dst, src, n, signal, value, op, true, "shmem_put_signal");
  if (nbi) {
    for (auto r : {data, sig}) {
      if (UCS_PTR_IS_ERR(r)) finish(r, pe, "shmem_put_signal_nbi");
      if (r) api_.request_free(r);
    }
    return;
  }
  // Blocking means the source may be reused, not that the signal arrived: the signal's
  // request (its reply says the target applied it) is quiet's to wait for, as for other
  // AMOs nobody reads (a round trip per put_signal made each collective message one).
  finish(data, pe, "shmem_put_signal");
  post_amo(sig, pe, "shmem_put_signal");
}

void UcxTransport::notify(int pe, RemoteRef dst, const void* src, size_t n, RemoteRef signal, uint64_t value,
                          SignalOp op) {
  // Neither counted for quiet's flush nor waited for by quiet: the receiver sees the data once
  // it sees the signal. The data's request still ends before return (src may be reused).
  if (uses_active_messages(pe)) {
    worker_->note_call();
    return am_put_signal(pe, dst, src, n, signal, value, op, false, false, "shmem_notify");
  }
  auto [data, sig] = post_put_signal(pe, dst, src, n, signal, value, op, false, "shmem_notify");
  finish(data, pe, "shmem_notify");
  post_amo(sig, pe, "shmem_notify", notices_);
}

void UcxTransport::fence(int) {
  // Requests over active messages are not ordered: a fence waits for their answers.
  am_complete("shmem_fence");
  ucx::check(api_, api_.worker_fence(worker_->worker()), "ucp_worker_fence");
}

void UcxTransport::quiet() {
  am_complete("shmem_quiet");
  wait_posted_amos();
  // Nothing posted since the last flush that could still be in flight: skip the round trip
  // (barriers quiet every transport, most of them idle).
  uint64_t posted = unflushed_.load(std::memory_order_acquire);
  if (posted != flushed_.load(std::memory_order_acquire)) {
    ucp_request_param_t p{};
    finish(api_.worker_flush_nbx(worker_->worker(), &p), -1, "shmem_quiet");
    uint64_t before = flushed_.load(std::memory_order_relaxed);
    while (before < posted && !flushed_.compare_exchange_weak(before, posted)) {
    }
  }
  int dead = dead_peer();
  if (dead >= 0)
    raise(Status::kRemote, "PE %d: shmem_quiet failed: PE %d exited or dropped its connection (ucx transport)", my_pe_,
          dead);
}

std::string UcxTransport::endpoint(int pe) const {
  ucp_ep_h e = pe >= 0 && pe < n_pes_ ? eps_[pe] : nullptr;
  if (!e) return "";
  // Lanes exist once the endpoint is wired up: a flush completes the wireup.
  ucp_request_param_t p{};
  ucs_status_t s = worker_->wait(api_.ep_flush_nbx(e, &p), timeout_s_);
  if (s != UCS_OK) return std::string("ucx (endpoint not wired up: ") + api_.status_string(s) + ")";
  return "ucx " + ucx::describe_lanes(ucx::endpoint_lanes(api_, e)) +
         (am_rma_[pe] ? " (RMA as MORI requests over am: no rma and amo lanes)" : "");
}

}  // namespace mori

#endif  // MORI_HAVE_UCX_HEADERS
