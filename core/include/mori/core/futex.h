// SPDX-License-Identifier: MIT
// Process-shared futex on a 32-bit word in shared memory. Not std::atomic::wait:
// libstdc++ skips the wake when its process-local waiter table is empty, so a
// waiter in another process would sleep forever.
#pragma once

#include <cstdint>

namespace mori::futex {

// Sleeps while *word == expected, at most timeout_ns. Returns on wake, timeout or signal.
void wait(const uint32_t* word, uint32_t expected, int64_t timeout_ns);
// Wakes up to `count` waiters on `word`.
void wake(const uint32_t* word, int count = 0x7fffffff);

}  // namespace mori::futex
