// SPDX-License-Identifier: MIT
// Same-host transport: every peer's regions are mapped into this process, so
// RMA is memcpy, AMOs are CPU atomics on the shared words, and a write rings the
// target's doorbell so a sleeping waiter wakes up.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "mori/core/doorbell.h"
#include "mori/core/shared_segment.h"
#include "mori/transports/transport.h"

namespace mori {

class ShmTransport : public Transport {
 public:
  explicit ShmTransport(int my_pe, int n_pes) : my_pe_(my_pe), doorbells_(n_pes, nullptr), unrung_(new Unrung[n_pes]) {}
  const char* name() const override { return "shm"; }
  bool rings_on_delivery() const override { return true; }

  void connect_region(MemRegion& region, int pe) override;
  void disconnect_region(MemRegion& region, int pe) override;
  void* direct_ptr(int pe, RemoteRef r) override;

  void put(int pe, RemoteRef dst, const void* src, size_t n, bool nbi) override;
  void get(int pe, void* dst, RemoteRef src, size_t n, bool nbi) override;
  uint64_t atomic(int pe, RemoteRef target, AmoOp op, int width, uint64_t operand, uint64_t compare) override;
  void put_signal(int pe, RemoteRef dst, const void* src, size_t n, RemoteRef signal, uint64_t value, SignalOp op,
                  bool nbi) override;
  void fence(int pe) override;
  void quiet() override;

  void set_peer_doorbell(int pe, Doorbell* bell) override { doorbells_.at(pe) = bell; }

 private:
  char* at(int pe, RemoteRef r) const {
    void* base = static_cast<size_t>(pe) < r.region->mapped.size() ? r.region->mapped[pe] : nullptr;
    if (!base) [[unlikely]]
      raise_unmapped(pe, r);
    return static_cast<char*>(base) + r.offset;
  }
  [[noreturn]] void raise_unmapped(int pe, RemoteRef r) const;
  void ring(int pe, RemoteRef r, size_t n, bool after_rmw = false) {
    if (Doorbell* b = doorbells_[pe])
      b->ring(Doorbell::key(r.region->id, r.offset), Doorbell::key(r.region->id, r.offset + n), after_rmw);
  }

  // nbi puts ring at the next quiet/fence instead (they need to be delivered only then), so a
  // window of them costs one store-load fence, not one each. The keys written are kept as one
  // range per PE, so sleepers watching other words stay asleep.
  struct Unrung {
    std::atomic<uint64_t> lo{~0ull}, hi{0};
  };
  void defer_ring(int pe, RemoteRef r, size_t n) {
    Unrung& u = unrung_[pe];
    const uint64_t lo = Doorbell::key(r.region->id, r.offset), hi = Doorbell::key(r.region->id, r.offset + n);
    for (uint64_t have = u.lo.load(std::memory_order_relaxed); lo < have;)
      if (u.lo.compare_exchange_weak(have, lo, std::memory_order_relaxed)) break;
    for (uint64_t have = u.hi.load(std::memory_order_relaxed); hi > have;)
      if (u.hi.compare_exchange_weak(have, hi, std::memory_order_relaxed)) break;
    if (!any_unrung_.load(std::memory_order_relaxed)) any_unrung_.store(true, std::memory_order_relaxed);
  }
  void ring_deferred();

  int my_pe_;
  std::vector<Doorbell*> doorbells_;
  std::unique_ptr<Unrung[]> unrung_;  // per PE: the keys nbi puts wrote and have not rung for
  std::atomic<bool> any_unrung_{false};
  std::map<std::pair<int, int>, SharedSegment> segments_;  // (region id, pe) -> mapping
};

// Atomic op on a word this process can address (shared by shm and the tcp target side).
uint64_t apply_amo(void* addr, AmoOp op, int width, uint64_t operand, uint64_t compare);

}  // namespace mori
