// SPDX-License-Identifier: MIT
#include "src/backends/ucx_backend.h"

#include <dirent.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "mori/core/log.h"
#include "mori/core/socket.h"
#include "mori/core/status.h"
#include "mori/transports/ucx/ucp_library.h"
#include "mori/transports/ucx/ucp_report.h"
#include "mori/transports/ucx/ucp_worker.h"
#include "src/engine_impl.h"
#include "src/peer.h"

namespace mori::io {

#if MORI_HAVE_UCX_HEADERS

namespace {

// What an engine's context asks UCX for (the worker adds UCP_FEATURE_WAKEUP).
constexpr uint64_t kFeatures = UCP_FEATURE_RMA | UCP_FEATURE_AM;
// How often endpoints with work in flight are checked for silence (MORI_IO_TIMEOUT_MS).
constexpr double kStallCheckS = 0.05;
// With work in flight the worker's thread keeps progressing this long after the last
// completion (not every UCX transport signals completions on the event fd, e.g. large
// shared-memory puts), then sleeps in steps of kInFlightSleepS.
constexpr double kBusyAfterProgressS = 0.005;
constexpr double kInFlightSleepS = 0.001;

}  // namespace

static bool rdma_devices_present() {
  DIR* d = opendir("/sys/class/infiniband");
  if (!d) return false;
  bool any = false;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') any = true;
  closedir(d);
  return any;
}

static void fill_report(UcxReport* r, const ucx::Ucp& u, std::vector<std::string> resources) {
  r->loaded = true;
  r->version = u.version;
  r->resources = std::move(resources);  // the transport's reading of UCX's report
  r->rdma = false;
  for (const auto& res : r->resources) r->rdma = r->rdma || ucx::is_rdma_resource(res);
}

const UcxReport& ucx_report() {
  static UcxReport report;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string why;
    const ucx::Ucp* u = ucx::load(&why);
    if (!u) {
      report.why = why;
      return;
    }
    try {
      fill_report(&report, *u, ucx::probe_resources(*u, kFeatures | UCP_FEATURE_WAKEUP));
    } catch (const std::exception& e) {
      report.why = e.what();
    }
  });
  return report;
}

bool ucx_should_serve_rdma(std::string* why) {
  if (!rdma_devices_present()) {
    *why = "no RDMA device (/sys/class/infiniband is empty)";
    return false;
  }
  const UcxReport& r = ucx_report();
  if (!r.loaded) {
    *why = "UCX is not available: " + r.why;
    return false;
  }
  if (!r.rdma) {
    std::string list;
    for (const auto& res : r.resources) list += (list.empty() ? "" : ", ") + res;
    *why = "UCX " + r.version + " reports no RDMA transport (" + list + ")";
    return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// The UCP objects, touched only on the worker's thread.

struct UcxOp;

struct UcxEndpoint {
  std::string key, name, address;
  ucp_ep_h ep = nullptr;
  bool peer_errors = true;  // UCX reports a dead peer (not over shared memory: sysv/posix lack it)
  std::set<UcxOp*> ops;     // in flight, for failing them ourselves when UCX cannot
  bool failed = false;
  std::string why;      // set when the endpoint failed or stalled: every later error says it
  int outstanding = 0;  // operations in flight
  double last_progress = 0;
  void* close_request = nullptr;
  bool closed = false;
  std::map<std::pair<uint32_t, uint64_t>, ucp_rkey_h> rkeys;  // (region id, region key)
};

struct UcxState {
  const ucx::Ucp* u = nullptr;
  ucp_context_h ctx = nullptr;    // the worker's
  ucp_worker_h worker = nullptr;  // the worker's
  bool closing = false;           // the engine goes: posts are refused
  std::map<std::string, std::shared_ptr<UcxEndpoint>> eps;
  std::vector<std::shared_ptr<UcxEndpoint>> closing_eps;  // closed, until UCX is done with them
  std::map<uint32_t, ucp_mem_h> mems;
  // Peer error handling needs a network transport: UCX 1.13's shared-memory ones lack it
  // (asking anyway fails the endpoint and prints an error).
  bool peer_errors = true;
  // Last: destroyed (its thread stopped) before what that thread touches.
  std::unique_ptr<ucx::UcpWorker> progress;
};

struct UcxOp {
  UcxBackend* backend;
  const ucx::Ucp* u;
  std::shared_ptr<UcxEndpoint> ep;
  std::shared_ptr<Transfer> transfer;
  uint32_t region;
  const char* what;
  bool settled = false;  // its transfer heard of it already (failed by a stall)
};

namespace {

// Reports the operation to its transfer (once).
void settle_op(UcxOp* op, ucs_status_t s) {
  if (op->settled) return;
  op->settled = true;
  UcxEndpoint& ep = *op->ep;
  --ep.outstanding;
  ep.last_progress = net::now();
  // The transfer hears first: a deregistration waiting in quiesce() acknowledges once the use count
  // drops, and its caller may then look at this transfer's status.
  if (s == UCS_OK) {
    op->transfer->piece_done(StatusCode::SUCCESS);
  } else {
    std::string why =
        !ep.why.empty() ? ep.why : format("%s: %s failed: %s", ep.name.c_str(), op->what, op->u->status_string(s));
    op->transfer->piece_done(StatusCode::ERR_RDMA_OP, why);
  }
  op->backend->end_remote_use(ep.key, op->region);
}

void finish_op(UcxOp* op, ucs_status_t s) {
  settle_op(op, s);
  op->ep->ops.erase(op);
  delete op;
}

void op_callback(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<UcxOp*>(user_data);
  const ucx::Ucp* u = op->u;
  finish_op(op, status);
  u->request_free(request);
}

// An operation that UCX may finish at once (NULL), fail at once (error pointer) or later.
void settle(UcxOp* op, ucs_status_ptr_t r) {
  if (r == nullptr)
    finish_op(op, UCS_OK);
  else if (UCS_PTR_IS_ERR(r))
    finish_op(op, UCS_PTR_STATUS(r));
}

void ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* ep = static_cast<UcxEndpoint*>(arg);
  ep->failed = true;
  if (ep->why.empty())
    ep->why = format("%s: the UCX endpoint failed (%d: the peer died or the link broke)", ep->name.c_str(),
                     static_cast<int>(status));
}

}  // namespace

static void close_endpoint(UcxState& st, const std::shared_ptr<UcxEndpoint>& ep, const std::string& why) {
  ep->failed = true;
  if (ep->why.empty()) ep->why = why;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  // Force fails what is in flight (with our message); UCX allows it only with peer error
  // handling. Without, we fail the operations ourselves and let UCX close gracefully.
  p.flags = ep->peer_errors ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  if (!ep->peer_errors) {
    std::vector<UcxOp*> ops(ep->ops.begin(), ep->ops.end());
    for (UcxOp* op : ops) settle_op(op, UCS_ERR_CANCELED);
  }
  ucs_status_ptr_t r = st.u->ep_close_nbx(ep->ep, &p);
  if (UCS_PTR_IS_PTR(r))
    ep->close_request = r;
  else
    ep->closed = true;
  st.closing_eps.push_back(ep);
}

// Endpoints closed earlier: once UCX is done with them their rkeys go too.
static void reap(UcxState& st) {
  for (auto it = st.eps.begin(); it != st.eps.end();) {
    if (it->second->failed) {
      close_endpoint(st, it->second, "");
      it = st.eps.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = st.closing_eps.begin(); it != st.closing_eps.end();) {
    UcxEndpoint& ep = **it;
    if (ep.close_request && st.u->request_check_status(ep.close_request) != UCS_INPROGRESS) {
      st.u->request_free(ep.close_request);
      ep.close_request = nullptr;
      ep.closed = true;
    }
    if (ep.closed) {
      for (auto& [k, rkey] : ep.rkeys) st.u->rkey_destroy(rkey);
      ep.rkeys.clear();
      it = st.closing_eps.erase(it);
    } else {
      ++it;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// UcxBackend

UcxBackend::UcxBackend(EngineImpl& engine) : engine_(engine), state_(std::make_unique<UcxState>()) {
  std::string why;
  const ucx::Ucp* u = ucx::load(&why);
  if (!u) raise(Status::kInvalidUsage, "UCX cannot be loaded: %s", why.c_str());
  UcxState& st = *state_;
  st.u = u;
  ucx::UcpWorker::Options o;
  o.owner = "io engine '" + engine.key() + "'";
  o.features = kFeatures;
  o.periodic = [this] { check_stalls(); };
  o.periodic_s = kStallCheckS;
  o.max_sleep_s = [this] { return max_sleep_s(); };
  st.progress = std::make_unique<ucx::UcpWorker>(*u, std::move(o));
  st.ctx = st.progress->context();
  st.worker = st.progress->worker();
  address_ = st.progress->address();
  fill_report(&report_, *u, ucx::context_resources(*u, st.ctx));
  // Peer error handling needs a network transport: UCX 1.13's shared-memory ones lack it.
  st.peer_errors = false;
  for (const auto& r : report_.resources) {
    std::string tl = r.substr(0, r.find('/'));
    if (tl != "self" && tl != "sysv" && tl != "posix" && tl != "cma" && tl != "knem" && tl != "xpmem")
      st.peer_errors = true;
  }
  st.progress->start();
}

UcxBackend::~UcxBackend() {
  UcxState& st = *state_;
  const ucx::Ucp& u = *st.u;
  // Closing: peers' transfers underway are served and ours finish where they can, within 2 s;
  // whatever is left then fails, naming the reason.
  st.progress->call([&] {
    st.closing = true;
    double deadline = net::now() + 2.0;
    // What peers asked of this engine first: UCX answers their gets and acknowledges their puts
    // itself, from requests of this worker, and a worker destroyed with those in flight leaves
    // them unreturned (UCX warns of each at exit) and the peers' transfers failed for nothing.
    // So the worker is progressed until it has been idle for a moment (or the deadline), then
    // flushed for our own operations.
    constexpr double kIdleS = 0.02;
    for (double idle_since = net::now(); net::now() < deadline && net::now() - idle_since < kIdleS;)
      if (st.progress->progress() != 0) idle_since = net::now();
    ucp_request_param_t fp{};
    ucs_status_ptr_t flush = u.worker_flush_nbx(st.worker, &fp);
    if (UCS_PTR_IS_PTR(flush)) {
      while (u.request_check_status(flush) == UCS_INPROGRESS && net::now() < deadline) st.progress->progress();
      if (u.request_check_status(flush) == UCS_INPROGRESS) u.request_cancel(st.worker, flush);
      u.request_free(flush);
    }
    for (auto& [key, ep] : st.eps)
      close_endpoint(st, ep, format("%s: engine '%s' is closing", ep->name.c_str(), engine_.key().c_str()));
    st.eps.clear();
    deadline = std::max(deadline, net::now() + 0.5);
    while (!st.closing_eps.empty() && net::now() < deadline) {
      st.progress->progress();
      reap(st);
    }
  });
  // The worker goes before the registrations: destroying it purges UCX's own requests for
  // peers' transfers still half served, and those use our registrations (unmapped first, a
  // target dropped under a peer's reads crashed in ucp_worker_destroy).
  st.progress->destroy_worker();
  for (auto& [id, memh] : st.mems) u.mem_unmap(st.ctx, memh);
  st.mems.clear();
}

void UcxBackend::check_stalls() {
  UcxState& st = *state_;
  double timeout = engine_.settings().timeout_s, t = net::now();
  for (auto& [key, ep] : st.eps)
    if (!ep->failed && ep->outstanding > 0 && t - ep->last_progress > timeout) {
      ep->failed = true;
      ep->why = format("%s answered nothing for %.1f s (MORI_IO_TIMEOUT_MS)", ep->name.c_str(), timeout);
      MORI_LOG(kInfo, "IO", "%s", ep->why.c_str());
    }
  reap(st);
}

double UcxBackend::max_sleep_s() const {
  const UcxState& st = *state_;
  bool waiting = false;
  double latest = 0;
  for (auto& [key, ep] : st.eps)
    if (ep->outstanding > 0) {
      waiting = true;
      latest = std::max(latest, ep->last_progress);
    }
  if (waiting) return net::now() - latest < kBusyAfterProgressS ? 0 : kInFlightSleepS;
  return st.closing_eps.empty() ? -1 : kStallCheckS;
}

// The endpoint to `peer` (made on first use; a failed or changed one is replaced).
static std::shared_ptr<UcxEndpoint> endpoint(UcxState& st, Peer& peer) {
  const EngineDesc& d = peer.desc();
  auto it = st.eps.find(d.key);
  if (it != st.eps.end()) {
    if (!it->second->failed && it->second->address == d.ucx_address) return it->second;
    close_endpoint(st, it->second, "");
    st.eps.erase(it);
  }
  if (d.ucx_address.empty())
    raise(Status::kInvalidUsage, "%s has no UCX worker address (its RDMA backend is not on UCX)", peer.name().c_str());
  auto ep = std::make_shared<UcxEndpoint>();
  ep->key = d.key;
  ep->name = peer.name();
  ep->address = d.ucx_address;
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  if (st.peer_errors) p.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep->peer_errors = st.peer_errors;
  p.address = reinterpret_cast<const ucp_address_t*>(ep->address.data());
  p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  p.err_handler.cb = ep_error;
  p.err_handler.arg = ep.get();
  ucs_status_t s = st.u->ep_create(st.worker, &p, &ep->ep);
  if (s == UCS_ERR_UNREACHABLE && ep->peer_errors) {
    // Shared-memory transports have no peer failure handling in UCX: a dead or stopped
    // peer is then found by MORI_IO_TIMEOUT_MS alone.
    p.field_mask &= ~(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER);
    ep->peer_errors = false;
    s = st.u->ep_create(st.worker, &p, &ep->ep);
  }
  if (s == UCS_OK && !ep->peer_errors)
    MORI_LOG(kInfo, "IO",
             "%s: the UCX transports in use have no peer failure detection; a dead peer is found "
             "by MORI_IO_TIMEOUT_MS",
             peer.name().c_str());
  if (s != UCS_OK) raise(Status::kRemote, "%s: ucp_ep_create: %s", peer.name().c_str(), st.u->status_string(s));
  st.eps[d.key] = ep;
  return ep;
}

static ucp_rkey_h remote_key(UcxState& st, UcxEndpoint& ep, uint32_t region, uint64_t region_key,
                             const std::string& packed) {
  auto k = std::make_pair(region, region_key);
  auto it = ep.rkeys.find(k);
  if (it != ep.rkeys.end()) return it->second;
  ucp_rkey_h rkey = nullptr;
  ucs_status_t s = st.u->ep_rkey_unpack(ep.ep, packed.data(), &rkey);
  if (s != UCS_OK)
    raise(Status::kInvalidArgument, "remote memory region %u: its UCX rkey does not unpack (%s)", region,
          st.u->status_string(s));
  ep.rkeys[k] = rkey;
  return rkey;
}

bool UcxBackend::can_move(const MemoryDesc& local, const MemoryDesc& remote, Peer& peer, bool) {
  return local.loc == MemoryLocationType::CPU && remote.loc == MemoryLocationType::CPU && !remote.ucx_rkey.empty() &&
         !peer.desc().ucx_address.empty();
}

void UcxBackend::on_register(MemoryDesc& desc) {
  if (desc.loc != MemoryLocationType::CPU || !desc.data || !desc.size) return;
  void* ptr = reinterpret_cast<void*>(desc.data);
  const uint64_t size = desc.size;
  const uint32_t region = desc.id;
  std::string packed;
  state_->progress->call([&] {
    UcxState& st = *state_;
    ucp_mem_map_params_t p{};
    p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    p.address = ptr;
    p.length = size;
    ucp_mem_h memh = nullptr;
    ucx::check(*st.u, st.u->mem_map(st.ctx, &p, &memh), "ucp_mem_map");
    void* buf = nullptr;
    size_t len = 0;
    ucs_status_t s = st.u->rkey_pack(st.ctx, memh, &buf, &len);
    if (s != UCS_OK) {
      st.u->mem_unmap(st.ctx, memh);
      ucx::check(*st.u, s, "ucp_rkey_pack");
    }
    packed.assign(static_cast<const char*>(buf), len);
    st.u->rkey_buffer_release(buf);
    st.mems[region] = memh;
  });
  desc.ucx_rkey = std::move(packed);
}

void UcxBackend::on_deregister(uint32_t region) {
  state_->progress->call([&] {
    UcxState& st = *state_;
    auto it = st.mems.find(region);
    if (it == st.mems.end()) return;
    st.u->mem_unmap(st.ctx, it->second);
    st.mems.erase(it);
  });
}

void UcxBackend::begin_remote_use(const std::string& peer_key, uint32_t region, int n) {
  std::lock_guard<std::mutex> lock(use_mu_);
  remote_uses_[{peer_key, region}] += n;
}

void UcxBackend::end_remote_use(const std::string& peer_key, uint32_t region) {
  std::lock_guard<std::mutex> lock(use_mu_);
  auto it = remote_uses_.find({peer_key, region});
  if (it != remote_uses_.end() && --it->second <= 0) {
    remote_uses_.erase(it);
    use_cv_.notify_all();
  }
}

bool UcxBackend::quiesce(const std::string& peer_key, uint32_t region, double timeout_s) {
  std::unique_lock<std::mutex> lock(use_mu_);
  return use_cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                          [&] { return remote_uses_.count({peer_key, region}) == 0; });
}

void UcxBackend::post(bool read, Peer& peer, const std::shared_ptr<Transfer>& t, Region& local,
                      const MemoryDesc& remote, const std::vector<Extent>& extents) {
  // The authenticated control connection comes first (it also carries deregistrations).
  (void)peer.lanes();
  struct Segment {
    char* local;
    uint64_t remote;
    uint64_t size;
  };
  std::vector<Segment> segs;
  segs.reserve(extents.size());
  for (const auto& e : extents) segs.push_back({local.ptr + e.local_offset, remote.data + e.remote_offset, e.size});
  const uint32_t remote_region = remote.id;
  const uint64_t remote_key_value = remote.region_key;
  const std::string& rkey = remote.ucx_rkey;
  int n = static_cast<int>(segs.size()) + (read ? 0 : 1);  // writes end with a flush
  const std::string key = peer.desc().key;
  begin_remote_use(key, remote_region, n);
  if (peer.remote_revoked(remote_region)) {
    for (int i = 0; i < n; ++i) end_remote_use(key, remote_region);
    raise(Status::kRemote, "%s: remote memory region %u was deregistered", peer.name().c_str(), remote_region);
  }
  t->add_pieces(n);
  auto job = [this, read, t, n, remote_region, remote_key_value, rkey, key, segs = std::move(segs)] {
    UcxState& st = *state_;
    int posted = 0;
    try {
      if (st.closing) raise(Status::kInvalidUsage, "engine '%s' is closing", engine_.key().c_str());
      auto ep = endpoint(st, *t->peer);
      if (ep->failed) raise(Status::kRemote, "%s", ep->why.c_str());
      ucp_rkey_h rk = remote_key(st, *ep, remote_region, remote_key_value, rkey);
      if (ep->outstanding == 0) ep->last_progress = net::now();
      auto make = [&](const char* what) {
        ++ep->outstanding;
        ++posted;
        auto* op = new UcxOp{this, st.u, ep, t, remote_region, what};
        ep->ops.insert(op);
        return op;
      };
      for (const auto& s : segs) {
        UcxOp* op = make(read ? "ucp_get_nbx" : "ucp_put_nbx");
        ucp_request_param_t p{};
        p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        p.cb.send = op_callback;
        p.user_data = op;
        settle(op, read ? st.u->get_nbx(ep->ep, s.local, s.size, s.remote, rk, &p)
                        : st.u->put_nbx(ep->ep, s.local, s.size, s.remote, rk, &p));
      }
      if (!read) {  // puts complete locally; the flush completes when the data is in place
        UcxOp* op = make("ucp_ep_flush_nbx");
        ucp_request_param_t p{};
        p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        p.cb.send = op_callback;
        p.user_data = op;
        settle(op, st.u->ep_flush_nbx(ep->ep, &p));
      }
    } catch (const std::exception& e) {
      for (int i = posted; i < n; ++i) {
        t->piece_done(StatusCode::ERR_RDMA_OP, e.what());
        end_remote_use(key, remote_region);
      }
    }
  };
  try {
    state_->progress->submit(std::move(job));
  } catch (...) {
    for (int i = 0; i < n; ++i) end_remote_use(key, remote_region);
    t->add_pieces(-n);
    throw;
  }
}

void UcxBackend::connect(Peer& peer) {
  (void)peer.lanes();
  (void)transports_to(peer);  // the endpoint and its wireup
}

std::string UcxBackend::describe(Peer& peer) { return "ucx (" + transports_to(peer) + ")"; }

std::string UcxBackend::transports_to(Peer& peer) {
  std::string out;
  double timeout = engine_.settings().connect_timeout_s;
  state_->progress->call([&] {
    UcxState& st = *state_;
    auto ep = endpoint(st, peer);
    // The lanes are final once wireup completed: a flush waits for it.
    ucp_request_param_t p{};
    ucs_status_ptr_t r = st.u->ep_flush_nbx(ep->ep, &p);
    if (UCS_PTR_IS_PTR(r)) {
      double deadline = net::now() + timeout;
      while (st.u->request_check_status(r) == UCS_INPROGRESS && net::now() < deadline) st.progress->progress();
      if (st.u->request_check_status(r) == UCS_INPROGRESS) st.u->request_cancel(st.worker, r);
      st.u->request_free(r);
    }
    for (const auto& lane : ucx::endpoint_lanes(*st.u, ep->ep)) out += (out.empty() ? "" : ", ") + lane.resource;
  });
  return out;
}

#else  // built without UCX headers: the backend cannot be made

const UcxReport& ucx_report() {
  static UcxReport r = [] {
    UcxReport x;
    x.why = "built without UCX headers";
    return x;
  }();
  return r;
}
bool ucx_should_serve_rdma(std::string* why) {
  *why = "built without UCX headers";
  return false;
}
struct UcxState {};
UcxBackend::UcxBackend(EngineImpl& engine) : engine_(engine) {
  raise(Status::kInvalidUsage, "UCX cannot be loaded: built without UCX headers");
}
UcxBackend::~UcxBackend() = default;
bool UcxBackend::can_move(const MemoryDesc&, const MemoryDesc&, Peer&, bool) { return false; }
void UcxBackend::post(bool, Peer&, const std::shared_ptr<Transfer>&, Region&, const MemoryDesc&,
                      const std::vector<Extent>&) {}
void UcxBackend::connect(Peer&) {}
std::string UcxBackend::describe(Peer&) { return name(); }
void UcxBackend::on_register(MemoryDesc&) {}
void UcxBackend::on_deregister(uint32_t) {}
bool UcxBackend::quiesce(const std::string&, uint32_t, double) { return true; }
void UcxBackend::begin_remote_use(const std::string&, uint32_t, int) {}
void UcxBackend::end_remote_use(const std::string&, uint32_t) {}
std::string UcxBackend::transports_to(Peer&) { return ""; }
void UcxBackend::check_stalls() {}
double UcxBackend::max_sleep_s() const { return -1; }

#endif

}  // namespace mori::io
