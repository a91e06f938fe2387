// SPDX-License-Identifier: MIT
#include "shm/shm_transport.h"

#include <atomic>
#include <cstring>

#include "mori/core/copy.h"
#include "mori/core/status.h"
#include "mori/transports/registry.h"

namespace mori {

const char* amo_name(AmoOp op) {
  static const char* names[] = {"fetch", "set",       "swap", "compare_swap", "add", "fetch_add",
                                "and",   "fetch_and", "or",   "fetch_or",     "xor", "fetch_xor"};
  return names[static_cast<int>(op)];
}

namespace {

template <typename T>
T amo_typed(T* p, AmoOp op, T v, T cmp) {
  std::atomic_ref<T> a(*p);
  switch (op) {
    case AmoOp::kFetch: return a.load(std::memory_order_acquire);
    case AmoOp::kSet: a.store(v, std::memory_order_release); return 0;
    case AmoOp::kSwap: return a.exchange(v, std::memory_order_acq_rel);
    case AmoOp::kCompareSwap: a.compare_exchange_strong(cmp, v, std::memory_order_acq_rel); return cmp;
    case AmoOp::kAdd: a.fetch_add(v, std::memory_order_acq_rel); return 0;
    case AmoOp::kFetchAdd: return a.fetch_add(v, std::memory_order_acq_rel);
    case AmoOp::kAnd: a.fetch_and(v, std::memory_order_acq_rel); return 0;
    case AmoOp::kFetchAnd: return a.fetch_and(v, std::memory_order_acq_rel);
    case AmoOp::kOr: a.fetch_or(v, std::memory_order_acq_rel); return 0;
    case AmoOp::kFetchOr: return a.fetch_or(v, std::memory_order_acq_rel);
    case AmoOp::kXor: a.fetch_xor(v, std::memory_order_acq_rel); return 0;
    case AmoOp::kFetchXor: return a.fetch_xor(v, std::memory_order_acq_rel);
  }
  return 0;
}

}  // namespace

uint64_t apply_amo(void* addr, AmoOp op, int width, uint64_t operand, uint64_t compare) {
  if (width == 8) {
    if (reinterpret_cast<uintptr_t>(addr) % 8)
      raise(Status::kInvalidArgument, "64-bit atomic on unaligned address %p", addr);
    return amo_typed<uint64_t>(static_cast<uint64_t*>(addr), op, operand, compare);
  }
  if (width == 4) {
    if (reinterpret_cast<uintptr_t>(addr) % 4)
      raise(Status::kInvalidArgument, "32-bit atomic on unaligned address %p", addr);
    return amo_typed<uint32_t>(static_cast<uint32_t*>(addr), op, static_cast<uint32_t>(operand),
                               static_cast<uint32_t>(compare));
  }
  raise(Status::kInvalidArgument, "atomic width must be 4 or 8 bytes, got %d", width);
}

void ShmTransport::connect_region(MemRegion& region, int pe) {
  if (region.kind != MemKind::kHost)
    raise(Status::kUnavailable, "shm transport cannot map device region %d", region.id);
  if (region.mapped.size() < region.remote_bases.size()) region.mapped.resize(region.remote_bases.size(), nullptr);
  if (pe == my_pe_) {
    region.mapped[pe] = region.local_base;
    return;
  }
  const std::string& name = region.handles.at(pe);
  if (name.empty()) raise(Status::kUnavailable, "PE %d did not share region %d", pe, region.id);
  SharedSegment seg = SharedSegment::open(name, region.size);
  region.mapped[pe] = seg.data();
  segments_[{region.id, pe}] = std::move(seg);
}

void ShmTransport::disconnect_region(MemRegion& region, int pe) {
  segments_.erase({region.id, pe});
  if (pe < static_cast<int>(region.mapped.size())) region.mapped[pe] = nullptr;
}

void ShmTransport::raise_unmapped(int pe, RemoteRef r) const {
  raise(Status::kInternal, "region %d of PE %d is not mapped", r.region->id, pe);
}

void* ShmTransport::direct_ptr(int pe, RemoteRef r) {
  void* base = pe < static_cast<int>(r.region->mapped.size()) ? r.region->mapped[pe] : nullptr;
  return base ? static_cast<char*>(base) + r.offset : nullptr;
}

void ShmTransport::put(int pe, RemoteRef dst, const void* src, size_t n, bool nbi) {
  copy_bytes(at(pe, dst), src, n);
  if (nbi)
    defer_ring(pe, dst, n);
  else
    ring(pe, dst, n);
}

void ShmTransport::get(int pe, void* dst, RemoteRef src, size_t n, bool) {
  std::atomic_thread_fence(std::memory_order_acquire);
  copy_bytes(dst, at(pe, src), n);
}

uint64_t ShmTransport::atomic(int pe, RemoteRef target, AmoOp op, int width, uint64_t operand, uint64_t compare) {
  uint64_t old = apply_amo(at(pe, target), op, width, operand, compare);
  // kSet is a plain release store, not a locked instruction: it needs the fence.
  if (op != AmoOp::kFetch) ring(pe, target, static_cast<size_t>(width), op != AmoOp::kSet);
  return old;
}

void ShmTransport::put_signal(int pe, RemoteRef dst, const void* src, size_t n, RemoteRef signal, uint64_t value,
                              SignalOp op, bool) {
  copy_bytes(at(pe, dst), src, n);
  // The release ordering of the signal update publishes the payload to an acquiring reader.
  apply_amo(at(pe, signal), op == SignalOp::kSet ? AmoOp::kSet : AmoOp::kAdd, 8, value, 0);
  ring(pe, signal, 8);
}

void ShmTransport::ring_deferred() {
  if (!any_unrung_.exchange(false, std::memory_order_relaxed)) return;
  for (size_t pe = 0; pe < doorbells_.size(); ++pe) {
    Unrung& u = unrung_[pe];
    if (u.hi.load(std::memory_order_relaxed) == 0) continue;
    const uint64_t lo = u.lo.exchange(~0ull, std::memory_order_relaxed);
    const uint64_t hi = u.hi.exchange(0, std::memory_order_relaxed);
    if (Doorbell* b = doorbells_[pe]) b->ring(lo, hi, true);  // the caller fenced
  }
}

void ShmTransport::fence(int) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  ring_deferred();
}
void ShmTransport::quiet() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  ring_deferred();
}

namespace {

// This PE, and the PEs of its host unless MORI_DISABLE_P2P=1 or MORI_NET_TRANSPORT=ucx-all
// gives those pairs to ucx.
class ShmCandidate : public TransportCandidate {
 public:
  explicit ShmCandidate(const TransportContext& ctx) : ctx_(ctx) {}
  const char* name() const override { return "shm"; }
  bool can_connect(int pe) const override {
    if (pe == ctx_.my_pe()) return true;
    return ctx_.topology.same_node(pe, ctx_.my_pe()) && !ctx_.settings.disable_p2p &&
           ctx_.settings.net_transport != "ucx-all";
  }
  std::unique_ptr<Transport> create(const std::vector<int>&) override {
    return std::make_unique<ShmTransport>(ctx_.my_pe(), ctx_.n_pes());
  }

 private:
  const TransportContext& ctx_;
};

}  // namespace

std::unique_ptr<TransportCandidate> shm_candidate(const TransportContext& ctx, const std::vector<int>&) {
  return std::make_unique<ShmCandidate>(ctx);
}

}  // namespace mori
