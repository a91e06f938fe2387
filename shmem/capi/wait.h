// SPDX-License-Identifier: MIT
// How the C API waits for a condition: busy-poll, then short sleeps.
//
// The runtime's own wait (Runtime::wait_for) sleeps on this PE's doorbell, which makes
// every write into this PE's memory by a peer pay a futex wake-up while it sleeps. C
// programs often leave PEs idle in a barrier or wait_until while others stream puts
// into them (benchmarks, master/worker codes), so the C API never registers as a
// sleeper: it busy-polls (2 ms, or 20 us when the host's PEs outnumber its cores), then
// naps with a short capped back-off. Peers stay at full speed; a long-idle waiter reacts
// within the cap (kMaxNapNs). Dead peers are still detected (check_peers every 50 ms).
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
constexpr int kSpinUsOversubscribed = 20;

template <typename Pred>
void wait(Pred ready, const char* fn) {
  if (ready()) return;
  const auto budget = std::chrono::microseconds(state().oversubscribed ? kSpinUsOversubscribed : kSpinUsDedicated);
  auto spin_start = std::chrono::steady_clock::now();
  for (int i = 1;; ++i) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
    if (ready()) return;
    if (i % kSpinPolls == 0 && std::chrono::steady_clock::now() - spin_start > budget)
      break;
  }
  auto& r = rt(fn);
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
