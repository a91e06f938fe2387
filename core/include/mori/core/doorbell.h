// SPDX-License-Identifier: MIT
// A wake-up word in shared memory. Writers ring it after changing a PE's memory;
// a PE waiting for a value sleeps on it (after spinning) instead of burning a core.
// Ringing costs one load unless somebody is actually asleep.
#pragma once

#include <atomic>
#include <cstdint>

#include "mori/core/futex.h"

namespace mori {

struct alignas(64) Doorbell {
  std::atomic<uint32_t> seq{0};
  std::atomic<uint32_t> sleepers{0};

  void ring() {
    // Orders the caller's data stores before the sleepers check (store-load fence).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_seq_cst) != 0) {
      seq.fetch_add(1, std::memory_order_seq_cst);
      futex::wake(reinterpret_cast<const uint32_t*>(&seq));
    }
  }
  // One sleep of at most timeout_ns, unless the bell rang since `observed` was read.
  void sleep(uint32_t observed, int64_t timeout_ns) {
    futex::wait(reinterpret_cast<const uint32_t*>(&seq), observed, timeout_ns);
  }
};
static_assert(sizeof(std::atomic<uint32_t>) == 4, "futex word must be 32-bit");

}  // namespace mori
