// SPDX-License-Identifier: MIT
// Minimal leveled logging: "mori[host:pid:pe] LEVEL subsys: message" on stderr.
#pragma once

namespace mori::log {

enum class Level : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

bool enabled(Level level);
// Overrides MORI_LOG_LEVEL for the rest of the process (mori.io.set_log_level).
void set_level(Level level);
void set_pe(int pe);
void write(Level level, const char* subsys, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

}  // namespace mori::log

#define MORI_LOG(level, subsys, ...)                                      \
  do {                                                                    \
    if (::mori::log::enabled(::mori::log::Level::level))                  \
      ::mori::log::write(::mori::log::Level::level, subsys, __VA_ARGS__); \
  } while (0)
