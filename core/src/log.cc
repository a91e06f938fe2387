// SPDX-License-Identifier: MIT
#include "mori/core/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <string>

#include "mori/core/env.h"
#include "mori/core/status.h"

namespace mori::log {
namespace {

std::atomic<int> g_pe{-1};

Level parse_level() {
  const std::string& s = env::get().log_level;
  if (s == "ERROR" || s == "error") return Level::kError;
  if (s == "INFO" || s == "info") return Level::kInfo;
  if (s == "DEBUG" || s == "debug") return Level::kDebug;
  if (s == "TRACE" || s == "trace") return Level::kTrace;
  return Level::kWarn;
}

const char* level_name(Level l) {
  static const char* names[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};
  return names[static_cast<int>(l)];
}

}  // namespace

// -1: not read from MORI_LOG_LEVEL yet.
std::atomic<int> g_threshold{-1};

bool enabled(Level level) {
  int t = g_threshold.load(std::memory_order_relaxed);
  if (t < 0) {
    t = static_cast<int>(parse_level());
    g_threshold.store(t, std::memory_order_relaxed);
  }
  return static_cast<int>(level) <= t;
}

void set_level(Level level) { g_threshold.store(static_cast<int>(level)); }

void set_pe(int pe) { g_pe.store(pe); }

void write(Level level, const char* subsys, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string msg = vformat(fmt, ap);
  va_end(ap);
  char host[64] = {0};
  gethostname(host, sizeof(host) - 1);
  std::fprintf(stderr, "mori[%s:%d:%d] %s %s: %s\n", host, static_cast<int>(getpid()), g_pe.load(), level_name(level),
               subsys, msg.c_str());
}

}  // namespace mori::log
