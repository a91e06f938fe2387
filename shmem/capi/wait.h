// SPDX-License-Identifier: MIT
// How the C API waits for a condition: busy-poll briefly (and yield, when PEs outnumber
// cores), then sleep in the kernel until a writer wakes us (Runtime::wait_for). For a single
// watched word the sleep is on the runtime's doorbell, and only a write to that word wakes us
// (peers' other puts stay syscall-free); waits on several words sleep in short timed naps.
// Either way a dead peer, a finalized source or MORI_SHMEM_WAIT_TIMEOUT ends the wait with an
// error naming the PE.
#pragma once

#include <chrono>
#include <cstddef>
#include <sched.h>

#include "capi/state.h"

namespace mori::capi {

constexpr int kSpinPolls = 64;  // polls between clock reads while busy-polling
// Busy-poll budget: long when every PE of the host has a core of its own (a running peer
// answers within microseconds, and 2-PE latency depends on never sleeping); short when PEs
// outnumber cores, where the PE we wait for may need this very core. There the wait yields
// for a short while next: with two PEs per core the one we wait for is often the next task of
// this core, and a yield hands it the core without the futex sleep and wake-up (tens of us
// when the vCPU halts). Only briefly: yielders keep both cores busy, so the scheduler does
// not move the PE we wait for to the other core, and under foreign load a long yield phase
// (500 us was tried) made 4-PE collectives 1 ms; 50 us never did worse than no yielding.
constexpr int kSpinUsDedicated = 2000;
constexpr int kSpinUsOversubscribed = 3;
constexpr int kYieldUsOversubscribed = 50;

template <typename Pred, typename Describe = std::nullptr_t>
void wait(Pred ready, const char* fn, const void* watched = nullptr, mori::shmem::WaitFrom from = {},
          Describe describe = nullptr) {
  if (ready()) return;
  mori::shmem::Runtime& r = rt(fn);
  const bool crowded = r.oversubscribed();
  const auto budget = std::chrono::microseconds(crowded ? kSpinUsOversubscribed : kSpinUsDedicated);
  {
    // Serve peers' emulated RMA (ucx) while we poll; a PE with a core of its own that keeps
    // being served keeps polling, so a peer's run of operations costs no wake-up each.
    // Bounded by kServedPollMax, so that the sleeping wait's checks (a dead peer, the
    // timeout) run even while other peers keep us busy.
    mori::shmem::Runtime::Polling polling(r);
    const auto entered = std::chrono::steady_clock::now();
    auto spin_start = entered;
    for (int i = 1;; ++i) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      if (ready()) return;
      if (polling.poll()) {
        if (ready()) return;
        if (!crowded) spin_start = std::chrono::steady_clock::now();
      }
      if (i % kSpinPolls == 0) {
        const auto now = std::chrono::steady_clock::now();
        if (now - spin_start > budget || now - entered > mori::shmem::kServedPollMax) break;
      }
    }
    if (crowded) {
      // Served, keep yielding here: the yield gives the core to whoever needs it, and the
      // next operation costs no wake-up of our progress thread.
      auto yield_start = std::chrono::steady_clock::now();
      while (std::chrono::steady_clock::now() - yield_start < std::chrono::microseconds(kYieldUsOversubscribed)) {
        sched_yield();
        if (polling.poll() && std::chrono::steady_clock::now() - entered < mori::shmem::kServedPollMax)
          yield_start = std::chrono::steady_clock::now();
        if (ready()) return;
      }
    }
    polling.before_sleep();
  }
  r.wait_for(ready, fn, watched, from, describe, /*spins=*/0, /*ring=*/watched != nullptr);
}

}  // namespace mori::capi
