// SPDX-License-Identifier: MIT
// Busy-polling a socket for something to read, for a bounded window, before a thread sleeps in
// the kernel for it: what it saves is the wake-up of a thread asleep in poll()/recv() (a few
// to tens of microseconds when its core had halted). Shared by MORI-IO's tcp threads
// (MORI_IO_TCP_POLL_US) and the per-host UMBP server's channel (UMBP_SERVER_POLL_US), which
// draw on one budget per process.
#pragma once

#include <poll.h>

#include <algorithm>
#include <chrono>

#include "mori/core/spin.h"

namespace mori {

// Busy-pollers of this process at once: a quarter of its CPUs (4 on 16), so that pollers leave
// most cores to the work.
inline SpinBudget& socket_spin_budget() {
  static SpinBudget budget(std::max(1, usable_cpus() / 4));
  return budget;
}

// Whether `fd` has something to read (data, a close, an error) within `window`: polls it
// without sleeping; false at once for a zero window or when the budget has no place.
inline bool poll_readable(int fd, std::chrono::microseconds window) {
  if (window.count() <= 0) return false;
  SpinTicket ticket(socket_spin_budget());
  if (!ticket) return false;
  auto ready = [fd] {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  };
  return spin_until(ready, std::chrono::steady_clock::now() + window, 1);
}

}  // namespace mori
