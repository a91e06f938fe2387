// SPDX-License-Identifier: MIT
// How the C API and the runtime's barriers wait for a condition: busy-poll briefly (yield
// instead, when PEs outnumber cores), then sleep in the kernel until a writer wakes us
// (Runtime::wait_for). For a single
// watched word the sleep is on the runtime's doorbell, and only a write to that word wakes us
// (peers' other puts stay syscall-free); waits on several words sleep in short timed naps.
// Either way a dead peer, a finalized source or MORI_SHMEM_WAIT_TIMEOUT ends the wait with an
// error naming the PE.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <thread>

#include "mori/shmem/runtime.h"
#include "mori/shmem/runtime_wait.h"

namespace mori::shmem {

constexpr int kSpinPolls = 64;  // polls between clock reads while busy-polling
// Busy-poll budget when every PE of the host has a core of its own: a running peer answers
// within microseconds, and 2-PE latency depends on never sleeping. The budget adapts between
// these bounds as the crowded yield window does (adapt_wait_window below): a wait that slept
// and was woken within twice the budget doubles it, one that slept over 8 budgets (a peer that
// computes) halves it. Beside foreign load (2 PEs, 2 busy loops on 2 cores) a PE that sleeps
// after 2 ms is woken a scheduler period after its peer's write, and a call took ~1 us or ~2 ms
// (C API broadcast/fcollect/barrier medians 0.35 us-2.3 ms, Open MPI 0.65 us-2.4 ms); with the
// adaptive budget 0.31-5.6 us in 10 of 11 rows (alternated runs, 2026-12-04, docs/shmem-c.md).
// The price is the core while a peer computes: up to the budget per wait, so a peer computing
// 30 ms per step costs the waiter 30 ms of polling per step once the budget has grown (a peer
// computing longer than 8 budgets brings it back down).
constexpr int kSpinUsDedicated = 2000;
constexpr int kSpinUsDedicatedMax = 50000;
// When PEs outnumber cores the wait does not busy-poll at all: the PE we wait for may need
// this very core, and with two PEs per core it is often the next task of this core. The wait
// yields for a while instead (a yield hands that PE the core without the futex sleep and
// wake-up, tens of us when the vCPU halts; with nobody else to run it costs one syscall a
// poll). Even 3 us of busy-polling first cost every waiter of a collective its share of the
// core: a 4-PE broadcast+barrier took 27 us (median), 12 us without; an 8-PE alltoall 37 us,
// 21 us. Only briefly: yielders keep both cores busy, so the scheduler does not move the PE we
// wait for to the other core, and under foreign load a long yield phase (500 us was tried)
// made 4-PE collectives 1 ms; 50 us never did worse than no yielding. Under foreign load no
// yield pays (each hands a time slice to the load): a slow yield closes the yield gate
// (kYieldTaken, runtime_wait.h) and waits sleep at once while it is closed.
//
// The window adapts between these bounds. A wait that had to sleep and was woken soon after
// (within twice the window) doubles it: the phases this PE waits through are longer than the
// window, and every sleeper costs its waker a futex wake and itself a vCPU wake-up (8-PE
// alltoall of 64 KiB blocks on 2 cores, Xeon VM: 350 us with a fixed 50 us window, 200 us with
// 200 us; Open MPI's 177 us). A wait that slept far longer (8 windows: a peer computing,
// foreign load) halves it, so an idle or loaded PE keeps the short window.
constexpr int kYieldUsOversubscribed = 50;
constexpr int kYieldUsMax = 800;

inline std::atomic<int>& yield_window_us() {
  static std::atomic<int> window{kYieldUsOversubscribed};
  return window;
}

inline std::atomic<int>& spin_window_us() {  // the dedicated busy-poll budget (kSpinUsDedicated)
  static std::atomic<int> window{kSpinUsDedicated};
  return window;
}

// A wait that ended in its first quarter of the window shrinks it by a sixteenth: after a run
// of long waits (which grew it) the short ones of small collectives bring it back, instead of
// 7 PEs yielding for up to 800 us each whenever one of them is preempted (8-PE fcollect of 8 B:
// 5.7 us, 6-14 us with a window that only shrank after long sleeps).
inline void settle_yield_window(std::chrono::steady_clock::duration waited, int window_us) {
  if (window_us > kYieldUsOversubscribed &&
      std::chrono::duration_cast<std::chrono::microseconds>(waited).count() * 4 < window_us)
    yield_window_us().store(std::max(kYieldUsOversubscribed, window_us - window_us / 16), std::memory_order_relaxed);
}

// After a wait slept: a window (yield or busy-poll, between lo and hi us) that the sleep
// outlasted by little doubles, one it outlasted by far halves.
inline void adapt_wait_window(std::atomic<int>& window, int lo, int hi, std::chrono::steady_clock::duration slept,
                              int window_us) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(slept).count();
  if (us < 2 * window_us)
    window.store(std::min(hi, 2 * window_us), std::memory_order_relaxed);
  else if (us > 8 * window_us)
    window.store(std::max(lo, window_us / 2), std::memory_order_relaxed);
}
// A crowded wait that served a peer's operation (ucx: software-emulated RMA over tcp/sm) keeps
// yielding and polling this long after each one (why: mori::shmem::kServedYieldQuiet). Waits
// with nothing to serve (shm, tcp) never extend their window.
constexpr auto kYieldServed = kServedYieldQuiet;

template <typename Pred, typename Describe = std::nullptr_t>
void tuned_wait(Runtime& r, Pred ready, const char* fn, const void* watched = nullptr, WaitFrom from = {},
                Describe describe = nullptr) {
  if (ready()) return;
  int adaptive_us = 0;  // the crowded yield window this wait used, if it may adapt
  int spin_us = 0;      // the dedicated busy-poll budget this wait used up, if it did
  {
    // Serve peers' emulated RMA (ucx) while we poll; a PE that keeps being served keeps
    // polling (or yielding, when crowded), so a peer's run of operations costs no wake-up
    // each. Bounded by kServedPollMax, so that the sleeping wait's checks (a dead peer, the
    // timeout) run even while other peers keep us busy.
    Runtime::Polling polling(r);
    const auto entered = std::chrono::steady_clock::now();
    const auto served_for = [&] { return std::chrono::steady_clock::now() - entered; };
    if (!r.oversubscribed()) {
      auto spin_start = entered;
      const int budget_us = spin_window_us().load(std::memory_order_relaxed);
      for (int i = 1;; ++i) {
        cpu_relax();
        if (ready()) return;
        if (polling.poll()) {
          if (ready()) return;
          spin_start = std::chrono::steady_clock::now();
        }
        if (i % kSpinPolls == 0) {
          const auto now = std::chrono::steady_clock::now();
          if (now - spin_start > std::chrono::microseconds(budget_us) || now - entered > kServedPollMax) {
            spin_us = budget_us;
            break;
          }
        }
      }
    } else if (polling.serves() || yields_pay(entered)) {
      // The yield gate (kYieldTaken) only where no peer's operations wait for this PE to serve
      // them: a ucx PE that slept at once would hand each of them to its progress thread's
      // wake-up (with the gate there, a 4-PE ucx barrier took 2.4 ms once on the loaded VM,
      // over its test's 2 ms bound; not measured further).
      auto yield_start = entered;
      adaptive_us = yield_window_us().load(std::memory_order_relaxed);
      auto window = std::chrono::microseconds(adaptive_us);
      while (std::chrono::steady_clock::now() - yield_start < window) {
        if (polling.serves()) {
          std::this_thread::yield();
        } else if (!gated_yield()) {
          adaptive_us = 0;  // this wait's sleep says nothing about the window
          break;
        }
        if (ready()) {
          if (adaptive_us > 0) settle_yield_window(served_for(), adaptive_us);
          return;
        }
        if (polling.poll()) {
          if (ready()) return;
          if (served_for() < kServedPollMax) {
            adaptive_us = 0;  // served (ucx): the window follows the peer's operations instead
            yield_start = std::chrono::steady_clock::now();
            window = std::chrono::duration_cast<std::chrono::microseconds>(kYieldServed);
          }
        }
      }
    }
    polling.before_sleep();
  }
  const auto slept_from = std::chrono::steady_clock::now();
  r.wait_for(ready, fn, watched, from, describe, /*spins=*/0, /*ring=*/watched != nullptr);
  const auto slept = std::chrono::steady_clock::now() - slept_from;
  if (adaptive_us > 0) adapt_wait_window(yield_window_us(), kYieldUsOversubscribed, kYieldUsMax, slept, adaptive_us);
  if (spin_us > 0) adapt_wait_window(spin_window_us(), kSpinUsDedicated, kSpinUsDedicatedMax, slept, spin_us);
}

}  // namespace mori::shmem
