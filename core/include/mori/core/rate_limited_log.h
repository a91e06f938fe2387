// SPDX-License-Identifier: MIT
// A budget for a warning that strangers can trigger at will (refused connections): at most
// `burst` lines per `period_s`, the rest counted and reported with the next line let through,
// so a flood of connections cannot flood the log.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>

#include "mori/core/log.h"

namespace mori::log {

class RateLimit {
 public:
  explicit RateLimit(int burst = 5, double period_s = 10) : burst_(burst), period_(period_s) {}

  // Whether a line may be written now. When it may, *suppressed is the number of lines
  // dropped since the last one let through (to mention in it).
  bool allow(uint64_t* suppressed) {
    std::lock_guard<std::mutex> lock(mu_);
    auto now = std::chrono::steady_clock::now();
    if (now - window_start_ >= period_) {
      window_start_ = now;
      used_ = 0;
    }
    if (used_ >= burst_) {
      ++suppressed_;
      return false;
    }
    ++used_;
    *suppressed = suppressed_;
    suppressed_ = 0;
    return true;
  }

 private:
  std::mutex mu_;
  const int burst_;
  const std::chrono::duration<double> period_;
  std::chrono::steady_clock::time_point window_start_{};
  int used_ = 0;
  uint64_t suppressed_ = 0;
};

}  // namespace mori::log

// MORI_LOG through a RateLimit: appends " (N similar lines suppressed)" when lines were dropped.
#define MORI_LOG_LIMITED(limit, level, subsys, fmt, ...)                                                             \
  do {                                                                                                               \
    uint64_t mori_suppressed_ = 0;                                                                                   \
    if (::mori::log::enabled(::mori::log::Level::level) && (limit).allow(&mori_suppressed_)) {                       \
      if (mori_suppressed_)                                                                                          \
        ::mori::log::write(::mori::log::Level::level, subsys, fmt " (%llu similar lines suppressed)", ##__VA_ARGS__, \
                           static_cast<unsigned long long>(mori_suppressed_));                                       \
      else                                                                                                           \
        ::mori::log::write(::mori::log::Level::level, subsys, fmt, ##__VA_ARGS__);                                   \
    }                                                                                                                \
  } while (0)
