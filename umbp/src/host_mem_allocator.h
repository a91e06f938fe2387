// SPDX-License-Identifier: MIT
// Host memory for KV buffers and the DRAM tier's arena (MORI's UMBPHostMemAllocator).
//
// Backings:
//   Anonymous            private anonymous mapping (page aligned; from 2 MiB on, aligned to 2 MiB
//                        and advised to use transparent huge pages where the kernel has them);
//   AnonymousHugetlb     private MAP_HUGETLB mapping of `hugepage_size` pages; when the kernel has
//                        no huge pages to give, normal pages, and the handle says Anonymous;
//   AnonymousShm         a memory file (core's SharedSegment, memfd) that another process of the
//                        host can map: the per-host server receives its descriptor by SCM_RIGHTS;
//   AnonymousShmHugetlb  the same with MFD_HUGETLB, falling back to AnonymousShm.
// The handle always reports what was actually mapped (actual_backing, actual_alignment).
//
// Every live allocation is recorded in one process-wide registry (address range -> memory file,
// backing). register_memory() of the standalone-process client asks it which memory file backs
// a pointer the user got from this allocator (find_host_region) to hand that file to the server.
// A handle is a plain value: copies of it name the same mapping; free() unmaps it once (freeing
// an already freed or never allocated handle does nothing) and resets the handle passed in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "mori/umbp/config.h"

namespace mori::umbp {

struct HostBufferOptions {
  HostBufferBacking backing = HostBufferBacking::Anonymous;
  size_t hugepage_size = size_t{2} << 20;
  int numa_node = -1;  // -1: no binding
  bool prefault = true;
};

struct HostBufferHandle {
  void* ptr = nullptr;
  size_t requested_size = 0;
  size_t mapped_size = 0;
  HostBufferBacking actual_backing = HostBufferBacking::Anonymous;
  size_t actual_alignment = 0;
  int fd = -1;  // the memory file of Shm backings (owned by the registry until free), else -1

  bool valid() const { return ptr != nullptr; }
};

// A live allocation as the registry knows it.
struct HostRegion {
  void* base = nullptr;
  size_t size = 0;  // mapped bytes
  int fd = -1;      // memory file (Shm backings), -1 for private mappings
  HostBufferBacking backing = HostBufferBacking::Anonymous;
};

class HostMemAllocator {
 public:
  // Maps `size` bytes (> 0). Throws mori::Error: InvalidArgument naming the argument
  // (size, hugepage_size, numa_node), System when the kernel refuses even normal pages.
  HostBufferHandle alloc(size_t size, const HostBufferOptions& options = {});
  // Unmaps the allocation of `handle` (a no-op when it is not live) and resets the handle.
  void free(HostBufferHandle& handle);
};

// The live allocation holding all of [ptr, ptr + size), if this process's allocator made one.
std::optional<HostRegion> find_host_region(const void* ptr, size_t size);

}  // namespace mori::umbp
