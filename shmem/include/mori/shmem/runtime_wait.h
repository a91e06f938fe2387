// SPDX-License-Identifier: MIT
// Runtime::wait_for: spin, then sleep on the doorbell, checking peers' liveness.
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

#include "mori/core/env.h"

namespace mori::shmem {

constexpr int kCrowdedYields = 64;  // polls of an oversubscribed wait before it sleeps

template <typename Pred>
void Runtime::wait_for(Pred ready, const char* caller, const void* watched) {
  // More PEs than cores: yield the core a few times (the PE or tcp progress thread we wait for
  // may need it), then sleep rather than keep stealing time slices from the PEs that work.
  const int spins = oversubscribed_ ? std::min<int>(static_cast<int>(env::get().spin_iterations), kCrowdedYields)
                                    : static_cast<int>(env::get().spin_iterations);
  for (int i = 0; i < spins; ++i) {
    if (ready()) return;
    if (oversubscribed_) {
      std::this_thread::yield();
      continue;
    }
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
    // Let a progress thread on this core (tcp target, a peer PE) deliver what we wait for.
    if ((i & 255) == 255) std::this_thread::yield();
  }
  Doorbell& bell = control()->doorbell;
  // Writers wake us only for writes covering the watched word (any write if unknown).
  uint64_t key = Doorbell::kWatchAll;
  if (watched && is_symmetric(watched)) {
    RemoteRef ref = resolve(watched, 1, caller);
    key = Doorbell::key(ref.region->id, ref.offset);
  }
  int slot = bell.claim(key);
  auto last_check = std::chrono::steady_clock::now();
  struct Release {
    Doorbell& b;
    int s;
    ~Release() { b.release(s); }
  } release{bell, slot};
  while (true) {
    uint32_t seq = bell.seq.load(std::memory_order_seq_cst);
    bell.sleepers.fetch_add(1, std::memory_order_seq_cst);
    bool ok = ready();
    // Without a slot nobody will ring for us: poll at a short interval instead.
    if (!ok) bell.sleep(seq, slot >= 0 ? 2'000'000 : 100'000);
    bell.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (ok || ready()) return;
    auto now = std::chrono::steady_clock::now();
    if (now - last_check > std::chrono::milliseconds(50)) {
      check_peers(caller);
      last_check = now;
    }
  }
}

}  // namespace mori::shmem
