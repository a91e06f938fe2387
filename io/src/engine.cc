// SPDX-License-Identifier: MIT
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "mori/core/auth.h"
#include "mori/core/env.h"
#include "mori/core/log.h"
#include "mori/core/socket.h"
#include "mori/core/status.h"
#include "mori/core/store.h"
#include "mori/core/topology.h"
#include "src/engine_impl.h"
#include "src/socket_poll.h"

namespace mori::io {

// MORI_IO_TCP_POLL_US: "auto" (or empty) polls where the process has CPUs to spare
// (src/socket_poll.h), a number is the window in microseconds (0: never).
static int parse_poll_us(const std::string& text) {
  std::string v = text;
  std::transform(v.begin(), v.end(), v.begin(), ::tolower);
  if (v.empty() || v == "auto") return usable_cpus() >= kPollAutoMinCpus ? kPollAutoUs : 0;
  char* end = nullptr;
  long us = std::strtol(v.c_str(), &end, 10);
  MORI_CHECK_ARG(end != v.c_str() && *end == '\0' && us >= 0 && us <= 1000000,
                 "MORI_IO_TCP_POLL_US must be auto or microseconds from 0 to 1000000, got '%s'", text.c_str());
  return static_cast<int>(us);
}

// MORI_IO_TCP_LANES: "auto" (or empty) takes four lanes where the process has the CPUs to
// receive on them (src/socket_poll.h), else two; a number is the count (1 to 64).
static int parse_lanes(const std::string& text) {
  std::string v = text;
  std::transform(v.begin(), v.end(), v.begin(), ::tolower);
  if (v.empty() || v == "auto") return usable_cpus() >= kLanesAutoMinCpus ? kLanesAuto : kLanesSmall;
  char* end = nullptr;
  long n = std::strtol(v.c_str(), &end, 10);
  MORI_CHECK_ARG(end != v.c_str() && *end == '\0' && n >= 1 && n <= 64,
                 "MORI_IO_TCP_LANES must be auto or a count from 1 to 64, got '%s'", text.c_str());
  return static_cast<int>(n);
}

// MORI_IO_TCP_STRIPE_FROM: "auto" (or empty) as src/socket_poll.h says, a size otherwise (0: the
// chunk alone decides); never below 4 KiB nor above the chunk.
static size_t parse_stripe_from(const std::string& text, size_t chunk) {
  std::string v = text;
  std::transform(v.begin(), v.end(), v.begin(), ::tolower);
  if (v.empty() || v == "auto") return usable_cpus() >= kStripeAutoMinCpus ? std::min(kStripeAutoBytes, chunk) : chunk;
  const size_t n = env::parse_size(text, "MORI_IO_TCP_STRIPE_FROM");
  return n ? std::min(std::max<size_t>(n, 4096), chunk) : chunk;
}

IoSettings read_settings() {
  const env::Settings e = env::current();
  IoSettings s{};
  s.timeout_s = std::max<int64_t>(1, e.io_timeout_ms) / 1000.0;
  s.connect_timeout_s = std::max<int64_t>(1, e.io_cp_timeout_ms) / 1000.0;
  s.lanes = parse_lanes(e.io_tcp_lanes);
  s.chunk_bytes = std::clamp<size_t>(e.io_tcp_chunk, 4096, wire::kMaxChunk);
  // Striped: a transfer of more than one chunk, and (from 192 KiB where the CPUs are there)
  // smaller ones too, in halves: two lanes' copies side by side beat one (docs/io.md, Round 5).
  s.stripe_from = parse_stripe_from(e.io_tcp_stripe_from, s.chunk_bytes);
  s.direct = e.io_direct;
  s.direct_threads = static_cast<int>(std::clamp<int64_t>(e.io_direct_threads, 1, 64));
  s.inline_bytes = e.io_inline_bytes;
  s.send_halves_upto = e.io_tcp_send_halves;
  s.poll_us = parse_poll_us(e.io_tcp_poll_us);
  s.rdma_transport = e.io_rdma_transport;
  std::transform(s.rdma_transport.begin(), s.rdma_transport.end(), s.rdma_transport.begin(), ::tolower);
  if (s.rdma_transport.empty()) s.rdma_transport = "auto";
  MORI_CHECK_ARG(s.rdma_transport == "auto" || s.rdma_transport == "tcp" || s.rdma_transport == "ucx",
                 "MORI_IO_RDMA_TRANSPORT must be auto, tcp or ucx, got '%s'", e.io_rdma_transport.c_str());
  s.node_id = e.node_id;
  s.notify_override =
      e.io_enable_notification.empty() ? -1 : env::parse_bool(e.io_enable_notification, "MORI_IO_ENABLE_NOTIFICATION");
  s.max_notifications = static_cast<size_t>(std::max<int64_t>(1, e.io_max_notifications));
  s.max_connections = static_cast<size_t>(std::max<int64_t>(1, e.io_max_connections));
  s.max_connections_per_peer = static_cast<size_t>(std::max<int64_t>(1, e.io_max_connections_per_peer));
  return s;
}

static std::string host_name() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

EngineImpl::EngineImpl(std::string key, IOEngineConfig config)
    : config_(std::move(config)), settings_(read_settings()) {
  desc_.key = std::move(key);
  desc_.node_id = settings_.node_id.empty() ? node_identity() : settings_.node_id;
  desc_.hostname = host_name();
  desc_.host = config_.host;
  desc_.port = 0;
  desc_.pid = getpid();
  desc_.secret.resize(kEngineSecretBytes);
  auth::random_bytes(desc_.secret.data(), desc_.secret.size());
  auth::random_bytes(token_, sizeof(token_));
  notify_ = settings_.notify_override != 0;  // an engine with only the XGMI backend honours it too
  tcp_ = std::make_unique<TcpBackend>(*this);
  direct_ = std::make_unique<DirectBackend>(*this, *tcp_);
}

EngineImpl::~EngineImpl() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    enabled_.clear();
  }
  cuda_ipc_.reset();  // waits for copies in flight
  direct_.reset();    // runs the queued same-host copies
  ucx_.reset();       // fails what is in flight over UCX, stops its worker's thread
  std::map<std::string, std::shared_ptr<Peer>> peers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    peers.swap(peers_);
  }
  for (auto& [key, p] : peers) p->close();  // joins the lanes here: what is still in flight fails
  peers.clear();
  listener_.reset();
}

void EngineImpl::ensure_listener() {
  if (listener_) return;
  std::string bind = config_.host.empty() ? "0.0.0.0" : config_.host;
  listener_ = std::make_unique<Listener>(*this, bind, config_.port);
  desc_.port = static_cast<uint32_t>(listener_->port());
  if (desc_.host.empty()) desc_.host = local_ip_address();
  MORI_LOG(kInfo, "IO", "engine '%s' listens on %s:%u", desc_.key.c_str(), desc_.host.c_str(), desc_.port);
}

void EngineImpl::create_net_backend(BackendType type, int lanes, bool notify, bool direct) {
  std::lock_guard<std::mutex> lock(mu_);
  if (net_backend_) {
    MORI_LOG(kInfo, "IO", "engine '%s': the network backend exists already", desc_.key.c_str());
    return;
  }
  ensure_listener();
  net_backend_ = true;
  net_type_ = type;
  lanes_ = lanes > 0 ? lanes : settings_.lanes;
  notify_ = settings_.notify_override >= 0 ? settings_.notify_override == 1 : notify;
  direct_allowed_ = direct && settings_.direct;
  ucx_active_ = false;
  if (type == BackendType::RDMA) select_rdma_transport();
  update_enabled();
}

void EngineImpl::update_enabled() {
  enabled_.clear();
  if (xgmi_backend_ && cuda_ipc_) enabled_.push_back(cuda_ipc_.get());
  // Same-host CPU memory moves directly unless the network backend's configuration or
  // MORI_IO_DIRECT says not to (an engine with only the XGMI backend serves it this way).
  bool direct = net_backend_ ? direct_allowed_ : xgmi_backend_ && settings_.direct;
  if (direct) enabled_.push_back(direct_.get());
  if (net_backend_ && ucx_active_) enabled_.push_back(ucx_.get());
  if (net_backend_) enabled_.push_back(tcp_.get());
}

std::vector<Backend*> EngineImpl::made_backends() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Backend*> all{tcp_.get(), direct_.get()};
  if (cuda_ipc_) all.push_back(cuda_ipc_.get());
  if (ucx_) all.push_back(ucx_.get());
  return all;
}

void EngineImpl::select_rdma_transport() {
  const std::string& mode = settings_.rdma_transport;
  std::string why = "MORI_IO_RDMA_TRANSPORT=tcp";
  bool use_ucx = mode == "ucx" || (mode == "auto" && ucx_should_serve_rdma(&why));
  if (use_ucx) {
    try {
      if (!ucx_) ucx_ = std::make_unique<UcxBackend>(*this);
    } catch (const Error& e) {
      if (mode == "ucx") {
        net_backend_ = false;
        raise(Status::kInvalidUsage, "engine '%s': MORI_IO_RDMA_TRANSPORT=ucx, but %s", desc_.key.c_str(), e.what());
      }
      why = e.what();
      use_ucx = false;
    }
  }
  if (use_ucx) {
    ucx_active_ = true;
    desc_.ucx_address = ucx_->address();
    std::string res;
    for (const auto& r : ucx_->report().resources) res += (res.empty() ? "" : ", ") + r;
    MORI_LOG(kInfo, "IO", "engine '%s': BackendType.RDMA runs on UCX %s (%s)%s; GPU memory goes over tcp",
             desc_.key.c_str(), ucx_->report().version.c_str(), res.c_str(),
             mode == "ucx" ? ", forced by MORI_IO_RDMA_TRANSPORT=ucx" : "");
    return;
  }
  MORI_LOG(kInfo, "IO",
           "engine '%s': no RDMA stack (%s); BackendType.RDMA runs on the tcp backend (%d connections per "
           "peer; CPU memory of engines on this host moves directly)",
           desc_.key.c_str(), why.c_str(), lanes_);
}

void EngineImpl::create_xgmi_backend(const XgmiBackendConfig& config) {
  std::lock_guard<std::mutex> lock(mu_);
  if (xgmi_backend_) {
    MORI_LOG(kInfo, "IO", "engine '%s': the XGMI (CUDA IPC) backend exists already", desc_.key.c_str());
    return;
  }
  ensure_listener();  // notifications and same-host grants
  xgmi_backend_ = true;
  if (!gpu::available())
    MORI_LOG(kInfo, "IO", "engine '%s': no CUDA device; the XGMI backend serves CPU memory only", desc_.key.c_str());
  else if (!cuda_ipc_)
    cuda_ipc_ = std::make_unique<CudaIpcBackend>(*this, std::max(1, config.num_streams));
  update_enabled();
}

void EngineImpl::remove_backend(BackendType type) {
  std::lock_guard<std::mutex> lock(mu_);
  if (type == BackendType::XGMI)
    xgmi_backend_ = false;
  else if (type == BackendType::RDMA || type == BackendType::TCP)
    net_backend_ = ucx_active_ = false;
  update_enabled();
}

bool EngineImpl::has_backend(BackendType type) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (type == BackendType::XGMI) return xgmi_backend_;
  if (type == BackendType::RDMA || type == BackendType::TCP) return net_backend_ && net_type_ == type;
  return false;
}

void EngineImpl::register_remote(const EngineDesc& desc) {
  MORI_CHECK_ARG(!desc.key.empty(), "register_remote_engine: the descriptor has an empty key");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = peers_.find(desc.key);
  if (it != peers_.end() && it->second->desc() == desc && it->second->desc().secret == desc.secret &&
      it->second->desc().ucx_address == desc.ucx_address)
    return;
  peers_[desc.key] = std::make_shared<Peer>(*this, desc);
}

void EngineImpl::deregister_remote(const EngineDesc& desc) {
  std::shared_ptr<Peer> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = peers_.find(desc.key);
    if (it == peers_.end()) return;
    gone = std::move(it->second);
    peers_.erase(it);
  }
  gone->close();  // transfers in flight may keep the peer itself alive a little longer
}

std::shared_ptr<Peer> EngineImpl::peer(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = peers_.find(key);
  if (it != peers_.end()) return it->second;
  if (key == desc_.key && listener_) {  // transfers within one engine
    auto self = std::make_shared<Peer>(*this, desc_);
    peers_[key] = self;
    return self;
  }
  return nullptr;
}

MemoryDesc EngineImpl::register_memory(uint64_t ptr, uint64_t size, int device_id, MemoryLocationType loc) {
  MORI_CHECK_ARG(loc == MemoryLocationType::CPU || loc == MemoryLocationType::GPU,
                 "register_memory: mem_loc must be MemoryLocationType.CPU or GPU");
  MORI_CHECK_ARG(ptr != 0 || size == 0, "register_memory: ptr is 0 for a region of %llu bytes",
                 static_cast<unsigned long long>(size));
  MORI_CHECK_ARG(ptr + size >= ptr, "register_memory: ptr + size overflows");
  MemoryDesc d;
  d.engine_key = desc_.key;
  d.id = next_id_.fetch_add(1);
  d.device_id = device_id;
  d.data = ptr;
  d.size = size;
  d.loc = loc;
  auth::random_bytes(&d.region_key, sizeof(d.region_key));
  if (loc == MemoryLocationType::GPU) {
    MORI_CHECK_ARG(device_id >= 0, "register_memory: GPU memory needs its device_id (got %d)", device_id);
    d.device_bus_id = gpu::bus_id(device_id);
  }
  // What the enabled backends carry in the descriptor (an IPC handle, a UCX rkey): a
  // transfer then needs no control-plane round trip.
  std::vector<Backend*> enabled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    enabled = enabled_;
  }
  for (Backend* b : enabled) b->on_register(d);
  registry_.add(d, reinterpret_cast<char*>(ptr), size, loc, device_id);
  return d;
}

void EngineImpl::deregister_memory(const MemoryDesc& desc) {
  MORI_CHECK_ARG(desc.engine_key == desc_.key, "deregister_memory: the descriptor belongs to engine '%s', not '%s'",
                 desc.engine_key.c_str(), desc_.key.c_str());
  registry_.retire(desc.id);  // fenced: every later request for it is refused
  // One deadline for everything: peers that do not confirm in time are disconnected, which
  // also ends what their connections still send from the region.
  const double deadline = net::now() + settings_.timeout_s;
  Listener* listener;
  {
    std::lock_guard<std::mutex> lock(mu_);
    listener = listener_.get();  // lives as long as the engine
  }
  if (listener) listener->revoke(desc.id, settings_.timeout_s);
  if (!registry_.remove(desc.id, std::max(0.5, deadline - net::now()))) {
    MORI_LOG(kWarn, "IO", "engine '%s': region %u still in use %.1f s after deregister_memory%s", desc_.key.c_str(),
             desc.id, settings_.timeout_s, ucx_ ? " (its UCX mapping is kept)" : "");
    return;
  }
  for (Backend* b : made_backends()) b->on_deregister(desc.id);
}

bool EngineImpl::quiesce(const std::string& peer_key, uint32_t region, double timeout_s) {
  bool all = true;
  for (Backend* b : made_backends()) all = b->quiesce(peer_key, region, timeout_s) && all;
  return all;
}

void EngineImpl::note_inbound(const std::string& from, uint64_t uid) {
  std::pair<std::string, uint64_t> oldest;
  uint64_t dropped = 0;
  {
    std::lock_guard<std::mutex> lock(inbound_mu_);
    uint64_t seq = inbound_seq_++;
    inbound_by_arrival_.emplace(seq, std::make_pair(from, uid));
    inbound_[{from, uid}].push_back(seq);
    if (inbound_by_arrival_.size() <= settings_.max_notifications) return;
    // Nobody pops them: the oldest goes (its entry is the first of its key's arrivals).
    auto first = inbound_by_arrival_.begin();
    oldest = first->second;
    auto it = inbound_.find(oldest);
    it->second.pop_front();
    if (it->second.empty()) inbound_.erase(it);
    inbound_by_arrival_.erase(first);
    dropped = inbound_dropped_.fetch_add(1) + 1;
  }
  uint64_t suppressed = 0;
  if (inbound_drop_log_.allow(&suppressed))
    MORI_LOG(kWarn, "IO",
             "engine '%s': %zu inbound notifications are not popped (MORI_IO_MAX_NOTIFICATIONS); dropped the oldest "
             "(transfer %llu of engine '%s'), %llu dropped so far",
             desc_.key.c_str(), settings_.max_notifications, static_cast<unsigned long long>(oldest.second),
             oldest.first.c_str(), static_cast<unsigned long long>(dropped));
}

bool EngineImpl::pop_inbound(const std::string& from, uint64_t uid) {
  std::lock_guard<std::mutex> lock(inbound_mu_);
  auto it = inbound_.find({from, uid});
  if (it == inbound_.end()) return false;
  inbound_by_arrival_.erase(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) inbound_.erase(it);
  return true;
}

bool EngineImpl::secret_of(const std::string& key, std::string* secret) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (key == desc_.key) {
    *secret = desc_.secret;
    return true;
  }
  auto it = peers_.find(key);
  if (it == peers_.end()) return false;
  *secret = it->second->desc().secret;
  return true;
}

Backend* EngineImpl::choose(const MemoryDesc& local, const MemoryDesc& remote, std::shared_ptr<Peer>* out) {
  std::shared_ptr<Peer> p = peer(remote.engine_key);
  if (out) *out = p;
  if (!p) return nullptr;
  std::vector<Backend*> enabled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    enabled = enabled_;
  }
  bool same_node = p->desc().node_id == desc_.node_id;
  for (Backend* b : enabled)
    if (b->can_move(local, remote, *p, same_node)) return b;
  return nullptr;
}

std::string EngineImpl::plan(const Region& local, const MemoryDesc& remote, const Segments& segs,
                             std::vector<Extent>* out) {
  size_t n = segs.sizes.size();
  if (segs.local_offsets.size() != n || segs.remote_offsets.size() != n)
    return format("local_offsets, remote_offsets and sizes differ in length (%zu, %zu, %zu)", segs.local_offsets.size(),
                  segs.remote_offsets.size(), n);
  std::vector<Extent> pieces;
  pieces.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    uint64_t lo = segs.local_offsets[i], ro = segs.remote_offsets[i], sz = segs.sizes[i];
    if (sz == 0) continue;
    if (!range_ok(lo, sz, local.size))
      return format("entry %zu: local offset %llu + size %llu is outside local memory region %u (%llu bytes)", i,
                    (unsigned long long)lo, (unsigned long long)sz, local.desc.id, (unsigned long long)local.size);
    if (!range_ok(ro, sz, remote.size))
      return format("entry %zu: remote offset %llu + size %llu is outside remote memory region %u (%llu bytes)", i,
                    (unsigned long long)ro, (unsigned long long)sz, remote.id, (unsigned long long)remote.size);
    pieces.push_back({lo, ro, sz});
  }
  // As MORI: sorted by remote offset, runs contiguous on both sides merged into one piece.
  if (!std::is_sorted(pieces.begin(), pieces.end(),
                      [](const Extent& a, const Extent& b) { return a.remote_offset < b.remote_offset; }))
    std::stable_sort(pieces.begin(), pieces.end(),
                     [](const Extent& a, const Extent& b) { return a.remote_offset < b.remote_offset; });
  out->clear();
  for (const auto& p : pieces) {
    if (!out->empty()) {
      Extent& last = out->back();
      if (last.local_offset + last.size == p.local_offset && last.remote_offset + last.size == p.remote_offset) {
        last.size += p.size;
        continue;
      }
    }
    out->push_back(p);
  }
  return "";
}

TransferStatus EngineImpl::transfer(bool read, const MemoryDesc& local, const MemoryDesc& remote, const Segments& segs,
                                    uint64_t uid, std::shared_ptr<ArrivalObserver> observer) {
  auto status = std::make_shared<StatusState>();
  TransferStatus result(status);
  std::string why;
  if (local.engine_key != desc_.key) {
    status->set(StatusCode::ERR_INVALID_ARGS, format("local memory belongs to engine '%s', not to this engine '%s'",
                                                     local.engine_key.c_str(), desc_.key.c_str()));
    return result;
  }
  RegionUse use = registry_.acquire(local.id, local.region_key, 0, 0, true, &why);
  if (!use) {
    status->set(StatusCode::ERR_INVALID_ARGS, "local " + why);
    return result;
  }
  std::shared_ptr<Peer> p;
  Backend* backend;
  try {
    backend = choose(local, remote, &p);
  } catch (const Error& e) {  // a wrong region key on the direct path is the caller's
    status->set(e.status() == Status::kInvalidArgument ? StatusCode::ERR_INVALID_ARGS : StatusCode::ERR_RDMA_OP,
                e.what());
    return result;
  } catch (const std::exception& e) {
    status->set(StatusCode::ERR_RDMA_OP, e.what());
    return result;
  }
  if (!backend) {
    status->set(
        StatusCode::ERR_BAD_STATE,
        p ? "No available backend found for this memory pair, create backend first"
          : format("remote engine '%s' is not registered (register_remote_engine first)", remote.engine_key.c_str()));
    return result;
  }
  std::vector<Extent> pieces;
  why = plan(*use.get(), remote, segs, &pieces);
  if (!why.empty()) {
    status->set(StatusCode::ERR_INVALID_ARGS, why);
    return result;
  }
  if (pieces.empty()) {
    status->set(StatusCode::SUCCESS);
    return result;
  }
  auto t = std::make_shared<Transfer>();
  t->status = status;
  t->uid = uid;
  t->peer = p;
  if (read) t->observer = std::move(observer);
  {
    std::lock_guard<std::mutex> lock(mu_);
    t->notify = notify_;
  }
  Region& region = *use.get();
  t->holds.push_back(std::move(use));
  status->set(StatusCode::IN_PROGRESS);
  p->track(t);
  try {
    backend->post(read, *p, t, region, remote, pieces);
    t->piece_done(StatusCode::SUCCESS);
  } catch (const Error& e) {
    t->piece_done(e.status() == Status::kInvalidArgument ? StatusCode::ERR_INVALID_ARGS : StatusCode::ERR_RDMA_OP,
                  e.what());
  } catch (const std::exception& e) {
    t->piece_done(StatusCode::ERR_RDMA_OP, e.what());
  }
  return result;
}

bool EngineImpl::session_alive(const MemoryDesc& local, const MemoryDesc& remote) {
  if (!registry_.alive(local.id)) return false;
  auto p = peer(remote.engine_key);
  return p && !p->remote_revoked(remote.id);
}

// ---------------------------------------------------------------------------------------------
// Engine and Session

Engine::Engine(std::string key, IOEngineConfig config)
    : impl_(std::make_unique<EngineImpl>(std::move(key), std::move(config))) {}
Engine::~Engine() = default;

EngineDesc Engine::engine_desc() const {
  std::lock_guard<std::mutex> lock(impl_->mu_);
  return impl_->desc();
}
void Engine::create_rdma_backend(const RdmaBackendConfig& c) {
  MORI_CHECK_ARG(!c.enable_notification || c.notif_per_qp >= 1, "RdmaBackendConfig: notif_per_qp must be >= 1");
  MORI_CHECK_ARG(c.max_chunks_per_transfer >= 1, "RdmaBackendConfig: max_chunks_per_transfer must be >= 1");
  MORI_CHECK_ARG(c.num_nics_per_transfer >= 1, "RdmaBackendConfig: num_nics_per_transfer must be >= 1");
  MORI_CHECK_ARG(!c.enable_transfer_chunking || c.chunk_bytes >= 4096,
                 "RdmaBackendConfig: chunk_bytes must be >= 4096 with chunking on");
  // MORI's environment overrides of the configuration.
  const env::Settings e = env::current();
  int qp = e.io_qp_per_transfer > 0 ? static_cast<int>(std::min<int64_t>(e.io_qp_per_transfer, 64)) : c.qp_per_transfer;
  bool notify = e.io_enable_notification.empty()
                    ? c.enable_notification
                    : env::parse_bool(e.io_enable_notification, "MORI_IO_ENABLE_NOTIFICATION");
  impl_->create_net_backend(BackendType::RDMA, qp > 1 ? qp : 0, notify, true);
}
void Engine::create_tcp_backend(const TcpBackendConfig& c) {
  MORI_CHECK_ARG(c.lanes >= 0, "TcpBackendConfig: lanes must be >= 0");
  impl_->create_net_backend(BackendType::TCP, c.lanes, true, c.direct);  // MORI_IO_ENABLE_NOTIFICATION applies
}
void Engine::create_xgmi_backend(const XgmiBackendConfig& c) {
  MORI_CHECK_ARG(c.num_streams >= 1 && c.num_events >= 1, "XgmiBackendConfig: num_streams and num_events must be >= 1");
  impl_->create_xgmi_backend(c);
}
void Engine::remove_backend(BackendType type) { impl_->remove_backend(type); }
bool Engine::has_backend(BackendType type) const { return impl_->has_backend(type); }
void Engine::register_remote_engine(const EngineDesc& d) { impl_->register_remote(d); }
void Engine::deregister_remote_engine(const EngineDesc& d) { impl_->deregister_remote(d); }
MemoryDesc Engine::register_memory(uint64_t ptr, uint64_t size, int device_id, MemoryLocationType loc) {
  return impl_->register_memory(ptr, size, device_id, loc);
}
void Engine::deregister_memory(const MemoryDesc& d) { impl_->deregister_memory(d); }
uint64_t Engine::allocate_transfer_uid() { return impl_->next_uid(); }

TransferStatus Engine::transfer(bool read, const MemoryDesc& local, const MemoryDesc& remote, const Segments& segs,
                                uint64_t uid, std::shared_ptr<ArrivalObserver> observer) {
  return impl_->transfer(read, local, remote, segs, uid, std::move(observer));
}

std::vector<TransferStatus> Engine::batch(bool read, const std::vector<MemoryDesc>& locals,
                                          const std::vector<MemoryDesc>& remotes, const std::vector<Segments>& segs,
                                          const std::vector<uint64_t>& uids,
                                          const std::shared_ptr<ArrivalObserver>& observer) {
  size_t n = locals.size();
  MORI_CHECK_ARG(remotes.size() == n && segs.size() == n && uids.size() == n,
                 "batch: local_mems, remote_mems, offsets, sizes and uids must have one entry per pair "
                 "(%zu local, %zu remote, %zu offset lists, %zu uids)",
                 n, remotes.size(), segs.size(), uids.size());
  std::vector<TransferStatus> out(n);
  for (size_t i = 0; i < n; ++i) {
    out[i] = impl_->transfer(read, locals[i], remotes[i], segs[i], uids[i], observer);
    if (out[i].Code() == StatusCode::ERR_BAD_STATE) break;  // MORI: the rest are not attempted
  }
  return out;
}

std::optional<Session> Engine::create_session(const MemoryDesc& local, const MemoryDesc& remote) {
  std::shared_ptr<Peer> p;
  Backend* b = impl_->choose(local, remote, &p);
  if (!b) return std::nullopt;
  b->connect(*p);  // connect now: an unreachable peer is an error here
  return Session(shared_from_this(), local, remote);
}

std::string Engine::backend_for(const MemoryDesc& local, const MemoryDesc& remote) {
  std::shared_ptr<Peer> p;
  Backend* b = impl_->choose(local, remote, &p);
  return b ? b->describe(*p) : "";
}

std::optional<TransferStatus> Engine::pop_inbound_transfer_status(const std::string& remote_key, uint64_t uid) {
  if (!impl_->pop_inbound(remote_key, uid)) return std::nullopt;
  TransferStatus s;
  s.state()->set(StatusCode::SUCCESS);
  return s;
}

uint64_t Engine::dropped_notifications() const { return impl_->dropped_notifications(); }

bool Session::alive() const { return engine_->impl().session_alive(local_, remote_); }

void set_log_level(const std::string& level) {
  std::string l = level;
  std::transform(l.begin(), l.end(), l.begin(), ::tolower);
  log::Level v;
  if (l == "trace")
    v = log::Level::kTrace;
  else if (l == "debug")
    v = log::Level::kDebug;
  else if (l == "info")
    v = log::Level::kInfo;
  else if (l == "warning" || l == "warn")
    v = log::Level::kWarn;
  else if (l == "error" || l == "critical")
    v = log::Level::kError;
  else
    raise(Status::kInvalidArgument,
          "set_log_level: level must be trace, debug, info, warning, error or critical, got '%s'", level.c_str());
  log::set_level(v);
}

}  // namespace mori::io
