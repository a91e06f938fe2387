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

bool enabled(Level level) {
  static const Level threshold = parse_level();
  return level <= threshold;
}

void set_pe(int pe) { g_pe.store(pe); }

void write(Level level, const char* subsys, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string msg = vformat(fmt, ap);
  va_end(ap);
  char host[64] = {0};
  gethostname(host, sizeof(host) - 1);
  std::fprintf(stderr, "mori[%s:%d:%d] %s %s: %s\n", host, static_cast<int>(getpid()), g_pe.load(),
               level_name(level), subsys, msg.c_str());
}

}  // namespace mori::log
