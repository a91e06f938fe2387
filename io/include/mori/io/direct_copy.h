// SPDX-License-Identifier: MIT
// Same-host copies straight between two processes' memory (process_vm_readv/writev: one copy,
// done by the kernel). Public so that layers above io/ (umbp's per-host server) reuse it.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace mori::io {

struct DirectSegment {
  char* local;
  uint64_t remote;
  size_t size;
};

// Copies every segment (read: remote -> local); "" or the error. Needs ptrace access to `pid`
// (same user, and Yama's ptrace_scope allowing it).
std::string direct_copy(bool read, pid_t pid, const DirectSegment* segs, size_t n);

}  // namespace mori::io
