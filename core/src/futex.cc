// SPDX-License-Identifier: MIT
#include "mori/core/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace mori::futex {

void wait(const uint32_t* word, uint32_t expected, int64_t timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000), static_cast<long>(timeout_ns % 1000000000)};
  syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void wake(const uint32_t* word, int count) { syscall(SYS_futex, word, FUTEX_WAKE, count, nullptr, nullptr, 0); }

}  // namespace mori::futex
