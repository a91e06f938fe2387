// SPDX-License-Identifier: MIT
// How the C API waits for a condition: busy-poll briefly (yield instead, when PEs outnumber
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
// Busy-poll budget when every PE of the host has a core of its own: a running peer answers
// within microseconds, and 2-PE latency depends on never sleeping.
constexpr int kSpinUsDedicated = 2000;
// When PEs outnumber cores the wait does not busy-poll at all: the PE we wait for may need
// this very core, and with two PEs per core it is often the next task of this core. The wait
// yields for a while instead (a yield hands that PE the core without the futex sleep and
// wake-up, tens of us when the vCPU halts; with nobody else to run it costs one syscall a
// poll). Even 3 us of busy-polling first cost every waiter of a collective its share of the
// core: a 4-PE broadcast+barrier took 27 us (median), 12 us without; an 8-PE alltoall 37 us,
// 21 us. Only briefly: yielders keep both cores busy, so the scheduler does not move the PE we
// wait for to the other core, and under foreign load a long yield phase (500 us was tried)
// made 4-PE collectives 1 ms; 50 us never did worse than no yielding.
constexpr int kYieldUsOversubscribed = 50;
// A crowded wait that served a peer's operation (ucx: software-emulated RMA over tcp/sm) keeps
// yielding and polling this long after each one (why: mori::shmem::kServedYieldQuiet). Waits
// with nothing to serve (shm, tcp) never extend their window.
constexpr auto kYieldServed = mori::shmem::kServedYieldQuiet;

template <typename Pred, typename Describe = std::nullptr_t>
void wait(Pred ready, const char* fn, const void* watched = nullptr, mori::shmem::WaitFrom from = {},
          Describe describe = nullptr) {
  if (ready()) return;
  mori::shmem::Runtime& r = rt(fn);
  {
    // Serve peers' emulated RMA (ucx) while we poll; a PE that keeps being served keeps
    // polling (or yielding, when crowded), so a peer's run of operations costs no wake-up
    // each. Bounded by kServedPollMax, so that the sleeping wait's checks (a dead peer, the
    // timeout) run even while other peers keep us busy.
    mori::shmem::Runtime::Polling polling(r);
    const auto entered = std::chrono::steady_clock::now();
    const auto served_for = [&] { return std::chrono::steady_clock::now() - entered; };
    if (!r.oversubscribed()) {
      auto spin_start = entered;
      for (int i = 1;; ++i) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
        if (ready()) return;
        if (polling.poll()) {
          if (ready()) return;
          spin_start = std::chrono::steady_clock::now();
        }
        if (i % kSpinPolls == 0) {
          const auto now = std::chrono::steady_clock::now();
          if (now - spin_start > std::chrono::microseconds(kSpinUsDedicated) ||
              now - entered > mori::shmem::kServedPollMax)
            break;
        }
      }
    } else {
      auto yield_start = entered;
      auto window = std::chrono::microseconds(kYieldUsOversubscribed);
      while (std::chrono::steady_clock::now() - yield_start < window) {
        sched_yield();
        if (ready()) return;
        if (polling.poll()) {
          if (ready()) return;
          if (served_for() < mori::shmem::kServedPollMax) {
            yield_start = std::chrono::steady_clock::now();
            window = std::chrono::duration_cast<std::chrono::microseconds>(kYieldServed);
          }
        }
      }
    }
    polling.before_sleep();
  }
  r.wait_for(ready, fn, watched, from, describe, /*spins=*/0, /*ring=*/watched != nullptr);
}

}  // namespace mori::capi
