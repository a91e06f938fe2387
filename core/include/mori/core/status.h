// SPDX-License-Identifier: MIT
// One error type for the whole core. Python sees it as mori.MoriError (and a
// builtin-compatible subclass chosen by the status).
#pragma once

#include <cstdarg>
#include <stdexcept>
#include <string>

namespace mori {

enum class Status : int {
  kOk = 0,
  kInvalidArgument = 1,  // bad input from the caller (Python: ValueError)
  kInvalidUsage = 2,     // wrong order of calls, e.g. use before init (RuntimeError)
  kOutOfMemory = 3,      // symmetric heap exhausted (MemoryError)
  kSystem = 4,           // a system call failed (OSError)
  kTransport = 5,        // a transport failed to move data (RuntimeError)
  kRemote = 6,           // a peer refused or died (RuntimeError)
  kTimeout = 7,          // a wait exceeded its limit (TimeoutError)
  kUnavailable = 8,      // feature not built or not possible here (NotImplementedError)
  kInternal = 9,         // a bug in MORI
  kDevice = 10,          // a GPU call failed (DeviceError, a RuntimeError)
};

const char* status_name(Status s);

class Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& what) : std::runtime_error(what), status_(status) {}
  Status status() const { return status_; }

 private:
  Status status_;
};

// Builds the message printf-style and throws mori::Error.
[[noreturn]] void raise(Status status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Same as raise() but appends ": strerror(errno)".
[[noreturn]] void raise_errno(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string vformat(const char* fmt, va_list ap);

}  // namespace mori

#define MORI_CHECK_ARG(cond, ...)                                              \
  do {                                                                         \
    if (!(cond)) ::mori::raise(::mori::Status::kInvalidArgument, __VA_ARGS__); \
  } while (0)
