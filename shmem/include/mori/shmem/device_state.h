// SPDX-License-Identifier: MIT
// What a CUDA kernel needs to reach the GPU symmetric heap of every PE: a plain
// struct that the host fills in and keeps in device memory (and that kernels may
// also take by value). Shared by host C++ (no CUDA headers) and device code.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mori::shmem {

// Layout of the reserved start of every PE's GPU heap (offsets are symmetric).
constexpr size_t kGpuHeapReserved = 64 * 1024;
constexpr size_t kGpuSyncFlagsOffset = 0;         // uint64_t[n_pes]: barrier arrivals, written by peers
constexpr size_t kGpuEpochOffset = 32 * 1024;     // uint64_t: this PE's barrier epoch (local only)
constexpr size_t kGpuStateOffset = 33 * 1024;     // DeviceState: this PE's copy
constexpr size_t kGpuPeerBaseOffset = 34 * 1024;  // char*[n_pes]: every PE's heap as mapped here
constexpr int kGpuMaxPes = static_cast<int>((kGpuHeapReserved - kGpuPeerBaseOffset) / sizeof(void*));  // 3840

struct DeviceState {
  int32_t my_pe;
  int32_t n_pes;
  char* heap_base;          // this PE's GPU heap (device address)
  uint64_t heap_size;       // bytes, the same on every PE
  char* const* peer_base;   // [n_pes] each PE's heap as mapped on this GPU; nullptr = not reachable by load/store
  uint64_t* sync_flags;     // heap_base + kGpuSyncFlagsOffset
  uint64_t* barrier_epoch;  // heap_base + kGpuEpochOffset
  uint64_t timeout_ns;      // device waits give up (trap) after this long; 0 = never
};

}  // namespace mori::shmem
