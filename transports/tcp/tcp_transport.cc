// SPDX-License-Identifier: MIT
#include "tcp/tcp_transport.h"

#include <cstring>
#include <exception>

#include "mori/core/log.h"
#include "mori/core/status.h"
#include "mori/transports/registry.h"

namespace mori {

TcpTransport::TcpTransport(int my_pe, int n_pes, double timeout_s)
    : my_pe_(my_pe), n_pes_(n_pes), timeout_s_(timeout_s), channels_(n_pes), endpoints_(n_pes) {}

std::unique_ptr<TcpTransport> TcpTransport::create(Bootstrap& bootstrap, const Topology& topology,
                                                   const std::vector<int>& tcp_peers, double timeout_s,
                                                   std::function<void(uint32_t, uint64_t, uint64_t)> on_write) {
  // Whether anybody needs tcp is a collective decision: a PE that reaches nobody over
  // tcp may still be reached over tcp (MORI_DISABLE_P2P set on some PEs only).
  uint8_t wants = tcp_peers.empty() ? 0 : 1;
  auto all = bootstrap.allgather_values(wants);
  bool any = false;
  for (uint8_t w : all) any = any || w;
  if (!any) return nullptr;

  std::string raw = bootstrap.job_secret();
  JobSecret secret{};
  if (raw.size() != secret.size())
    raise(Status::kInternal, "bootstrap %s gave a %zu-byte job secret", bootstrap.describe().c_str(), raw.size());
  std::memcpy(secret.data(), raw.data(), secret.size());

  int me = bootstrap.rank(), n = bootstrap.size();
  std::unique_ptr<TcpTransport> t(new TcpTransport(me, n, timeout_s));
  tcp::TcpTarget::Options o;
  o.my_pe = me;
  o.n_pes = n;
  o.secret = secret;
  o.bind_ip = topology.pe(me).ip;
  o.timeout_s = timeout_s;
  o.on_write = std::move(on_write);
  t->target_ = std::make_unique<tcp::TcpTarget>(std::move(o));

  int32_t port = t->target_->port();
  auto ports = bootstrap.allgather_values(port);
  for (int pe = 0; pe < n; ++pe) t->endpoints_[pe] = std::string(topology.pe(pe).ip) + ":" + std::to_string(ports[pe]);
  for (int pe : tcp_peers)
    t->channels_.at(pe) = std::make_unique<tcp::TcpChannel>(me, pe, topology.pe(pe).ip, ports[pe], secret, timeout_s);
  MORI_LOG(kInfo, "TCP", "PE %d: tcp listener %s, %zu tcp peers", me, t->endpoints_[me].c_str(), tcp_peers.size());
  return t;
}

TcpTransport::~TcpTransport() {
  // Goodbyes first, so peers know we leave on purpose before our side closes.
  for (auto& c : channels_)
    if (c) c->close(true);
  if (target_) target_->stop();
}

void TcpTransport::connect_region(MemRegion& region, int pe) {
  // Peers are addressed by (region id, offset): nothing to map. Make sure our own
  // part is served even if the runtime connects before it exposes.
  expose_region(region);
}

void TcpTransport::disconnect_region(MemRegion&, int) {
  // Regions stay served until the transport is destroyed, which happens before any is unmapped.
}

void TcpTransport::expose_region(const MemRegion& region) { target_->expose(region); }

tcp::TcpChannel& TcpTransport::channel(int pe, RemoteRef r, const char* what) {
  tcp::TcpChannel* c = pe >= 0 && pe < n_pes_ ? channels_[pe].get() : nullptr;
  if (!c) raise(Status::kInternal, "%s: PE %d is not a tcp peer of PE %d", what, pe, my_pe_);
  if (r.region->kind != MemKind::kHost)
    raise(Status::kUnavailable,
          "%s to PE %d: region %d is device memory, and the tcp transport reaches only host memory", what, pe,
          r.region->id);
  return *c;
}

void TcpTransport::put(int pe, RemoteRef dst, const void* src, size_t n, bool) {
  channel(pe, dst, "shmem_put").put(static_cast<uint32_t>(dst.region->id), dst.offset, src, n);
}

void TcpTransport::get(int pe, void* dst, RemoteRef src, size_t n, bool nbi) {
  channel(pe, src, "shmem_get").get(static_cast<uint32_t>(src.region->id), src.offset, dst, n, nbi);
}

uint64_t TcpTransport::atomic(int pe, RemoteRef target, AmoOp op, int width, uint64_t operand, uint64_t compare) {
  return channel(pe, target, "shmem_atomic")
      .atomic(static_cast<uint32_t>(target.region->id), target.offset, op, width, operand, compare);
}

void TcpTransport::put_signal(int pe, RemoteRef dst, const void* src, size_t n, RemoteRef signal, uint64_t value,
                              SignalOp op, bool) {
  channel(pe, signal, "shmem_put_signal");
  channel(pe, dst, "shmem_put_signal")
      .put_signal(static_cast<uint32_t>(dst.region->id), dst.offset, src, n, static_cast<uint32_t>(signal.region->id),
                  signal.offset, value, op);
}

void TcpTransport::quiet() {
  for (auto& c : channels_)
    if (c) c->quiet_start();
  std::exception_ptr first;
  for (auto& c : channels_) {
    if (!c) continue;
    try {
      c->quiet_finish();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

int TcpTransport::dead_peer() const {
  int dead = target_->dead_peer();
  if (dead >= 0) return dead;
  for (auto& c : channels_)
    if (c && c->failed() && !target_->finalized(c->peer())) return c->peer();
  return -1;
}

std::string TcpTransport::endpoint(int pe) const { return pe >= 0 && pe < n_pes_ ? endpoints_[pe] : std::string(); }

namespace {

// Every peer no earlier transport took (other hosts, or MORI_DISABLE_P2P=1).
class TcpCandidate : public TransportCandidate {
 public:
  explicit TcpCandidate(const TransportContext& ctx) : ctx_(ctx) {}
  const char* name() const override { return "tcp"; }
  bool can_connect(int) const override { return true; }
  std::unique_ptr<Transport> create(const std::vector<int>& peers) override {
    return TcpTransport::create(ctx_.bootstrap, ctx_.topology, peers, ctx_.settings.bootstrap_timeout,
                                ctx_.on_delivery);
  }

 private:
  const TransportContext& ctx_;
};

}  // namespace

std::unique_ptr<TransportCandidate> tcp_candidate(const TransportContext& ctx, const std::vector<int>&) {
  return std::make_unique<TcpCandidate>(ctx);
}

}  // namespace mori
