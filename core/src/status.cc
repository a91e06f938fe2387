// SPDX-License-Identifier: MIT
#include "mori/core/status.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace mori {

const char* status_name(Status s) {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kInvalidArgument: return "invalid argument";
    case Status::kInvalidUsage: return "invalid usage";
    case Status::kOutOfMemory: return "out of memory";
    case Status::kSystem: return "system error";
    case Status::kTransport: return "transport error";
    case Status::kRemote: return "remote error";
    case Status::kTimeout: return "timeout";
    case Status::kUnavailable: return "unavailable";
    case Status::kInternal: return "internal error";
    case Status::kDevice: return "device error";
  }
  return "unknown";
}

std::string vformat(const char* fmt, va_list ap) {
  va_list copy;
  va_copy(copy, ap);
  int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out(n > 0 ? n : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, ap);
  return out;
}

std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  return s;
}

void raise(Status status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  throw Error(status, s);
}

void raise_errno(const char* fmt, ...) {
  int err = errno;
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  s += ": ";
  s += std::strerror(err);
  throw Error(Status::kSystem, s);
}

}  // namespace mori
