// SPDX-License-Identifier: MIT
// How the C API waits for a condition: spin, then yield, then short sleeps.
//
// The runtime's own wait (Runtime::wait_for) sleeps on this PE's doorbell, which makes
// every write into this PE's memory by a peer pay a futex wake-up while it sleeps. C
// programs often leave PEs idle in a barrier or wait_until while others stream puts
// into them (benchmarks, master/worker codes), so the C API never registers as a
// sleeper: it spins briefly, yields the core for up to 10 ms (oversubscribed PEs make
// progress; an idle core returns at once), then naps with
// a short capped back-off. Peers stay at full speed; a long-idle waiter reacts within
// the cap (kMaxNapNs). Dead peers are still detected (check_peers every 50 ms).
#pragma once

#include <sched.h>
#include <time.h>

#include <chrono>

#include "capi/state.h"

namespace mori::capi {

constexpr long kMaxNapNs = 100'000;  // 100 us
constexpr int kSpinPolls = 256;      // then yield: with more PEs than cores the peer needs this core

template <typename Pred>
void wait(Pred ready, const char* fn) {
  if (ready()) return;
  for (int i = 0; i < kSpinPolls; ++i) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
    if (ready()) return;
  }
  auto& r = rt(fn);
  auto start = std::chrono::steady_clock::now(), last_check = start;
  long nap = 1000;
  for (unsigned k = 0;; ++k) {
    auto t = std::chrono::steady_clock::now();
    if (t - start < std::chrono::milliseconds(10)) {
      sched_yield();  // let an oversubscribed peer run
    } else {
      timespec ts{0, nap};
      nanosleep(&ts, nullptr);
      nap = nap * 2 > kMaxNapNs ? kMaxNapNs : nap * 2;
    }
    if (ready()) return;
    if (t - last_check > std::chrono::milliseconds(50)) {
      r.check_peers(fn);
      last_check = t;
    }
  }
}

}  // namespace mori::capi
