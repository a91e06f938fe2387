// SPDX-License-Identifier: MIT
// A wake-up word in shared memory. A PE that waits for a value spins, then registers the
// word it watches and sleeps on the doorbell's futex; a writer into that PE's memory rings
// the bell only if a sleeper watches a word inside the written range. An idle writer path
// costs a fence and one load; unrelated writes never wake a sleeper.
#pragma once

#include <atomic>
#include <cstdint>

#include "mori/core/futex.h"

namespace mori {

struct alignas(64) Doorbell {
  static constexpr int kSlots = 14;
  static constexpr uint64_t kWatchAll = ~0ull;

  // Key of a word: (region id + 1) << 48 | byte offset in the region.
  static constexpr uint64_t key(int region, uint64_t offset) {
    return (static_cast<uint64_t>(region + 1) << 48) | offset;
  }

  std::atomic<uint32_t> seq{0};
  std::atomic<uint32_t> sleepers{0};
  // One past the highest slot ever claimed: writers scan only that far (usually one slot).
  std::atomic<uint32_t> claimed_end{0};
  std::atomic<uint64_t> watch[kSlots];  // 0 = free slot

  // Writer side: [begin, end) keys of bytes just written (end exclusive). `after_rmw`: the
  // write was a locked read-modify-write, which already is a full fence on x86.
  void ring(uint64_t begin, uint64_t end, bool after_rmw = false) {
    // Orders the caller's data stores before the sleepers check (store-load fence).
#if defined(__x86_64__)
    if (!after_rmw)
#endif
      std::atomic_thread_fence(std::memory_order_seq_cst);
    // Acquire: a sleeper claims its slot before it counts itself, so seeing its count means
    // seeing its claim (and claimed_end) too.
    if (sleepers.load(std::memory_order_acquire) == 0) return;
    const uint32_t claimed = claimed_end.load(std::memory_order_relaxed);
    for (uint32_t i = 0; i < claimed && i < kSlots; ++i) {
      uint64_t k = watch[i].load(std::memory_order_relaxed);
      if (k != 0 && (k == kWatchAll || (k >= begin && k < end))) {
        seq.fetch_add(1, std::memory_order_seq_cst);
        futex::wake(reinterpret_cast<const uint32_t*>(&seq));
        return;
      }
    }
  }

  // Wakes every sleeper whatever it watches (its wait has a new reason to look: a peer died).
  void wake_all() {
    seq.fetch_add(1, std::memory_order_seq_cst);
    futex::wake(reinterpret_cast<const uint32_t*>(&seq));
  }

  // Waiter side: claim a slot for `k` (falls back to kWatchAll semantics if none is free);
  // returns the slot or -1 (then the caller sleeps with a short timeout only).
  int claim(uint64_t k) {
    for (int i = 0; i < kSlots; ++i) {
      uint64_t expected = 0;
      if (watch[i].compare_exchange_strong(expected, k, std::memory_order_seq_cst)) {
        uint32_t have = claimed_end.load(std::memory_order_seq_cst);
        while (have < static_cast<uint32_t>(i + 1) &&
               !claimed_end.compare_exchange_weak(have, static_cast<uint32_t>(i + 1), std::memory_order_seq_cst)) {
        }
        return i;
      }
    }
    return -1;
  }
  void release(int slot) {
    if (slot >= 0) watch[slot].store(0, std::memory_order_release);
  }
  // One sleep of at most timeout_ns, unless the bell rang since `observed` was read.
  void sleep(uint32_t observed, int64_t timeout_ns) {
    futex::wait(reinterpret_cast<const uint32_t*>(&seq), observed, timeout_ns);
  }
};
static_assert(sizeof(std::atomic<uint32_t>) == 4, "futex word must be 32-bit");
static_assert(sizeof(std::atomic<uint64_t>) == 8, "watch keys are 64-bit");

}  // namespace mori
