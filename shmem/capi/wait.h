// SPDX-License-Identifier: MIT
// How the C API waits for a condition: poll (yielding the core when the host's PEs
// outnumber its cores, as Open MPI does), then, for a single watched word, sleep on the
// runtime's doorbell (only a write to that word wakes us, so peers' other puts stay
// syscall-free); multi-word waits nap with a capped back-off. Dead peers are still
// detected (check_peers every 50 ms).
#pragma once

#include <sched.h>
#include <time.h>

#include <chrono>

#include "capi/state.h"

namespace mori::capi {

constexpr long kMaxNapNs = 100'000;  // 100 us
constexpr int kSpinPolls = 64;       // polls between clock reads while busy-polling
// Busy-poll budget: long when every PE of the host has a core of its own (a running peer
// answers within microseconds); short when PEs outnumber cores, where the PE we wait for
// may need this very core (Open MPI likewise only yields when oversubscribed).
constexpr int kSpinUsDedicated = 2000;
constexpr int kSpinUsOversubscribed = 50;

template <typename Pred>
void wait(Pred ready, const char* fn, const void* watched = nullptr) {
  if (ready()) return;
  const bool crowded = state().oversubscribed;
  const auto budget = std::chrono::microseconds(crowded ? kSpinUsOversubscribed : kSpinUsDedicated);
  auto spin_start = std::chrono::steady_clock::now();
  for (int i = 1;; ++i) {
    // With more PEs than cores the PE we wait for may need this core: give it up each poll.
    if (crowded) sched_yield();
#if defined(__x86_64__)
    else __builtin_ia32_pause();
#endif
    if (ready()) return;
    if (i % kSpinPolls == 0 && std::chrono::steady_clock::now() - spin_start > budget)
      break;
  }
  auto& r = rt(fn);
  if (watched) {
    // One watched word: sleep on the doorbell; only a write to that word wakes us.
    r.wait_for(ready, fn, watched);
    return;
  }
  auto last_check = std::chrono::steady_clock::now();
  long nap = 1000;
  for (;;) {
    // Sleeping (not sched_yield) hands the core to a peer that needs it: with more PEs
    // than cores, yielding under CFS rarely runs the PE we wait for.
    timespec ts{0, nap};
    nanosleep(&ts, nullptr);
    nap = nap * 2 > kMaxNapNs ? kMaxNapNs : nap * 2;
    auto t = std::chrono::steady_clock::now();
    if (ready()) return;
    if (t - last_check > std::chrono::milliseconds(50)) {
      r.check_peers(fn);
      last_check = t;
    }
  }
}

}  // namespace mori::capi
