// SPDX-License-Identifier: MIT
// A symmetric memory region: the same-sized block on every PE (the heap, a GPU
// heap, the data segment of a C program, a registered buffer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mori {

enum class MemKind : uint8_t { kHost = 0, kDevice = 1 };

struct MemRegion {
  int id = -1;
  MemKind kind = MemKind::kHost;
  char* local_base = nullptr;
  size_t size = 0;
  std::vector<uint64_t> remote_bases;  // every PE's base address in its own address space
  std::vector<std::string> handles;    // every PE's sharing handle (shm name, CUDA IPC handle)
  std::vector<void*> mapped;           // every PE's region mapped here, or nullptr

  bool contains(const void* p, size_t n = 0) const {
    auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(local_base);
    return a >= b && a - b <= size && n <= size - (a - b);
  }
};

// A location on a remote PE: region plus byte offset.
struct RemoteRef {
  const MemRegion* region;
  size_t offset;
};

}  // namespace mori
