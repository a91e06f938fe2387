// SPDX-License-Identifier: MIT
// Runtime::wait_for: spin, then sleep on the doorbell, checking peers' liveness.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <type_traits>

#include "mori/core/env.h"
#include "mori/core/log.h"
#include "mori/core/spin.h"
#include "mori/core/status.h"

namespace mori::shmem {

constexpr int kCrowdedYields = 64;  // polls of an oversubscribed wait before it sleeps

// Where PEs outnumber cores a wait yields before it sleeps, which pays only while the tasks it
// hands the core to are PEs that soon wait in turn. A yield that comes back only after
// kYieldTaken handed the core to a task that kept it for a time slice: another job's busy
// loop, or a peer that computes. A yielding task goes behind every other runnable task of its
// core (EEVDF), so each further yield costs a slice again, while a PE asleep on the futex runs
// soon after its waker's wake-up: 4 PEs beside 2 busy loops on 2 cores fell into phases of
// ~1 ms a barrier (C API, 3000 barriers: 0.6-1.0 ms each in most runs; 0.013-0.11 ms with this
// gate, 0.04-0.06 ms never yielding; issue 29 item 19, alternated runs on the shared 2-vCPU VM,
// 2026-12-04). Without the busy loops, never yielding cost the barrier 2x. After a slow yield
// every wait of the process sleeps without yielding for a period, four times as long after each
// slow yield and half as long after a quick first yield after a period (under lasting load one
// yield in two still finds a PE as the core's other task: resetting the period on those kept a
// slice lost every period in each PE, and the barriers 2x slower than never yielding).
// 1 ms, not less: with 4 PEs on 2 idle vCPUs a yield to a peer PE now and then takes a few hundred
// microseconds, and a 200 us bound closed the gate on those, so the 4-PE C barrier fell to
// 0.51-1.03 x Open MPI without load; at 1 ms it is 1.16-1.63 x, and beside 2 busy loops
// (whose slices are milliseconds) 113-125 x (2026-12-04, docs/results/2026-12-04/shmem-c-crowded-waits.md).
constexpr auto kYieldTaken = std::chrono::microseconds(1000);
// Short at first: another job's task that takes one slice now and then (the shared VM's
// background) closes the gate for little, while lasting load reaches kNoYieldMaxMs in 4 steps.
constexpr int kNoYieldMinMs = 5;
constexpr int kNoYieldMaxMs = 1000;

struct YieldGate {
  std::atomic<int64_t> closed_until_ns{0};  // steady clock
  std::atomic<int> period_ms{kNoYieldMinMs};
  std::atomic<bool> probe{false};  // the first yield after a closed period decides the next one
};

inline YieldGate& yield_gate() {
  static YieldGate gate;
  return gate;
}

inline int64_t steady_ns(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Whether a crowded wait should yield now (false: sleep at once, see kYieldTaken).
inline bool yields_pay(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) {
  return steady_ns(now) >= yield_gate().closed_until_ns.load(std::memory_order_relaxed);
}

// One yield; false when it was slow, which closes the gate for a period.
inline bool gated_yield() {
  const auto before = std::chrono::steady_clock::now();
  std::this_thread::yield();
  const auto after = std::chrono::steady_clock::now();
  YieldGate& g = yield_gate();
  if (after - before < kYieldTaken) {
    // Only the probe shortens the period: quick yields between slow ones say nothing of the load.
    if (g.probe.load(std::memory_order_relaxed) && g.probe.exchange(false, std::memory_order_relaxed))
      g.period_ms.store(std::max(kNoYieldMinMs, g.period_ms.load(std::memory_order_relaxed) / 2),
                        std::memory_order_relaxed);
    return true;
  }
  g.probe.store(true, std::memory_order_relaxed);
  const int period = g.period_ms.load(std::memory_order_relaxed);
  g.closed_until_ns.store(steady_ns(after) + int64_t(period) * 1'000'000, std::memory_order_relaxed);
  g.period_ms.store(std::min(kNoYieldMaxMs, 4 * period), std::memory_order_relaxed);
  return false;
}

// A sleeping wait that a progress thread's work woke polls the transports itself until they
// have been idle this long (a PE with a core of its own only).
constexpr auto kServedPollQuiet = std::chrono::microseconds(2000);
// Where PEs outnumber cores a served wait yields between polls instead, and keeps at it this
// long after each operation it served: a peer's next blocking put comes one round trip later
// (~30-70 us over UCX's tcp), and a waiter that fell asleep in between hands every operation to
// the progress thread's wake-up. 4-PE put+quiet over UCX's tcp: 41-44 us with a 50 us window,
// 26-36 us with 300-1000 us (alternated runs, 2026-12-02).
constexpr auto kServedYieldQuiet = std::chrono::microseconds(500);
// Served polling ends after this long however busy it is, so that the wait's checks (a dead
// peer, a finalized source, MORI_SHMEM_WAIT_TIMEOUT) run even while other peers keep this PE
// busy; the wait then polls again after its next wake-up.
constexpr auto kServedPollMax = std::chrono::milliseconds(50);
// A sleeping wait wakes at least this often (ns) to look again: writers that ring nobody exist
// (nbi puts ring at the writer's next quiet, stores through shmem_ptr and a NIC's writes never
// do). A wait whose word only rung writes touch (WaitFrom::rung) wakes just for the checks
// (a dead peer, a finalized source, the timeout): at 8 PEs on 2 cores, seven PEs idle in a
// barrier waking every 2 ms cost the one working PE 3,500 preemptions a second.
constexpr long kSilentWriterNapNs = 2'000'000;
constexpr long kRungSleepNs = 50'000'000;
// An unbounded wait (the default MORI_SHMEM_WAIT_TIMEOUT) whose PEs have all been blocked in
// waits this long is reported once as a likely deadlock (a mismatched barrier, say).
constexpr double kDeadlockReportS = 3.0;

// Marks this PE blocked in a wait in its control block for as long as it lives.
class BlockedStamp {
 public:
  BlockedStamp(ControlBlock& c, const char* caller, int source) : c_(c) {
    std::snprintf(c_.blocked_in, sizeof(c_.blocked_in), "%s", caller);
    c_.blocked_on.store(source, std::memory_order_relaxed);
    c_.blocked_since_ns.store(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count(),
        std::memory_order_release);
  }
  ~BlockedStamp() { c_.blocked_since_ns.store(0, std::memory_order_release); }
  BlockedStamp(const BlockedStamp&) = delete;
  BlockedStamp& operator=(const BlockedStamp&) = delete;

 private:
  ControlBlock& c_;
};

template <typename Pred>
bool Runtime::poll_while_served(Pred ready) {
  Polling polling(*this);
  const auto start = std::chrono::steady_clock::now();
  auto last_work = start;
  const auto quiet = oversubscribed_ ? std::chrono::duration_cast<std::chrono::microseconds>(kServedYieldQuiet)
                                     : std::chrono::duration_cast<std::chrono::microseconds>(kServedPollQuiet);
  for (unsigned i = 1;; ++i) {
    if (ready()) return true;
    if (polling.poll()) {
      if (ready()) return true;
      last_work = std::chrono::steady_clock::now();
      if (last_work - start > kServedPollMax) {
        // The wait sleeps next: the transports' threads must serve meanwhile, at once (a
        // thread still standing aside left a peer's operations unserved for up to 2 ms).
        polling.before_sleep();
        return false;
      }
    } else if ((oversubscribed_ || (i & 15) == 0) && std::chrono::steady_clock::now() - last_work > quiet) {
      polling.before_sleep();
      return false;
    }
    // Crowded: the PE whose operations we serve, or the one that must run next, may need
    // this core.
    if (oversubscribed_) {
      std::this_thread::yield();
      continue;
    }
    cpu_relax();
  }
}

template <typename Pred, typename Describe>
void Runtime::wait_for(Pred ready, const char* caller, const void* watched, WaitFrom from, Describe describe, int spins,
                       bool ring) {
  // A wait that is already satisfied succeeds even after a death (the dead PE did its part).
  if (ready()) return;
  if (peer_exited_.load(std::memory_order_relaxed)) check_dead(from, caller);
  // More PEs than cores: yield the core a few times (the PE or tcp progress thread we wait for
  // may need it), then sleep rather than keep stealing time slices from the PEs that work.
  const bool yields = oversubscribed_ && spins < 0;
  // The yield gate (kYieldTaken) as in tuned_wait: not where peers' operations wait to be served.
  const bool gated = yields && polled_.empty();
  if (spins < 0)
    spins = !oversubscribed_         ? static_cast<int>(env::get().spin_iterations)
            : !gated || yields_pay() ? std::min<int>(static_cast<int>(env::get().spin_iterations), kCrowdedYields)
                                     : 0;
  if (spins > 0) {
    // Serve peers' emulated RMA (ucx) meanwhile; a PE that keeps being served keeps polling,
    // so a peer's run of operations costs no wake-up each.
    Polling polling(*this);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < spins; ++i) {
      if (ready()) return;
      // Served: keep polling (not where PEs outnumber cores: there the PE we wait for may
      // need this core), up to kServedPollMax.
      if (polling.poll() && !yields && std::chrono::steady_clock::now() - start < kServedPollMax) i = 0;
      if (yields) {
        if (!gated) {
          std::this_thread::yield();
        } else if (!gated_yield()) {
          break;
        }
        continue;
      }
      cpu_relax();
      // Let a progress thread on this core (tcp target, a peer PE) deliver what we wait for.
      if ((i & 255) == 255) std::this_thread::yield();
    }
    polling.before_sleep();
  }
  Doorbell& bell = control()->doorbell;
  // Writers wake us only for writes covering the watched word (any write if unknown).
  uint64_t key = Doorbell::kWatchAll;
  if (watched && is_symmetric(watched)) {
    RemoteRef ref = resolve(watched, 1, caller);
    key = Doorbell::key(ref.region->id, ref.offset);
  }
  int slot = ring ? bell.claim(key) : -1;
  const auto start = std::chrono::steady_clock::now();
  const double timeout = env::get().shmem_wait_timeout;
  auto last_check = start;
  struct Release {
    Doorbell& b;
    int s;
    ~Release() { b.release(s); }
  } release{bell, slot};
  BlockedStamp blocked(*control(), caller, from.source);
  auto describe_wait = [&] {
    if constexpr (std::is_same_v<Describe, std::nullptr_t>) {
      char text[96];
      if (watched)
        std::snprintf(text, sizeof(text), "a write to the word at %p", watched);
      else
        std::snprintf(text, sizeof(text), "its condition to hold");
      return std::string(text);
    } else {
      return std::string(describe());
    }
  };
  while (true) {
    uint32_t seq = bell.seq.load(std::memory_order_seq_cst);
    bell.sleepers.fetch_add(1, std::memory_order_seq_cst);
    bool ok = ready();
    // Without a slot nobody will ring for us: poll at a short interval instead.
    if (!ok) bell.sleep(seq, slot < 0 ? 100'000 : from.rung ? kRungSleepNs : kSilentWriterNapNs);
    bell.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (ok || ready()) return;
    // Woken, but not for us: when a progress thread rang after serving a peer, traffic is
    // flowing, and serving it from here costs no wake-up per operation (a PE that slept
    // through a peer's run of puts cost that peer a thread wake-up on each). This is also how
    // a wait whose served polling reached kServedPollMax gets back to it after its checks.
    if (!polled_.empty() && bell.seq.load(std::memory_order_relaxed) != seq && poll_while_served(ready)) return;
    // First the cause, then its consequences: a PE that finalized too early may have made a
    // third PE fail and exit, which the process watch reports next.
    int gone = finalized_source(from);
    // The process watch rings every bell when a peer dies.
    if (gone < 0 && peer_exited_.load(std::memory_order_relaxed)) check_dead(from, caller);
    auto now = std::chrono::steady_clock::now();
    if (gone < 0 && now - last_check < std::chrono::milliseconds(50)) continue;
    last_check = now;
    if (gone < 0) check_dead(from, caller);
    double waited = std::chrono::duration<double>(now - start).count();
    bool expired = waited >= timeout;  // never for the default (inf)
    if (my_pe_ == 0 && !deadlock_reported_ && gone < 0 && !expired && waited >= kDeadlockReportS)
      diagnose_deadlock(caller, waited, describe_wait);
    if ((gone < 0 && !expired) || ready()) continue;
    std::string what = describe_wait();
    if (gone >= 0)
      raise(Status::kRemote,
            "%s on PE %d: PE %d has finalized, so it will never send what this wait needs (did it skip a "
            "barrier?); waited for %s",
            caller, my_pe_, gone, what.c_str());
    raise_wait_timeout(caller, waited, what);
  }
}

template <typename DescribeFn>
void Runtime::diagnose_deadlock(const char* caller, double waited, DescribeFn describe) {
  std::string peers = peers_all_blocked(kDeadlockReportS);
  if (peers.empty()) return;
  deadlock_reported_ = true;
  std::string what = describe();
  MORI_LOG(kWarn, "SHMEM",
           "likely deadlock: every PE has been blocked in a wait for over %.0f s (mismatched barriers or waits?): "
           "PE %d in %s for %.1f s, waiting for %s; %s. These waits never end by themselves; "
           "MORI_SHMEM_WAIT_TIMEOUT=<seconds> ends them with an error",
           kDeadlockReportS, my_pe_, caller, waited, what.c_str(), peers.c_str());
}

}  // namespace mori::shmem
