// SPDX-License-Identifier: MIT
// Which memory file backs a range of this process's memory, so that register_memory can hand it
// to the per-host server once (SCM_RIGHTS) instead of sending bytes over the socket.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mori::umbp {

struct MemfdRange {
  int fd = -1;          // a descriptor of the memory file, owned by the caller (close it)
  uint64_t offset = 0;  // where the range starts in that file
};

// Finds the memory file (memfd, or any shared file mapping) behind [ptr, ptr + size): reads
// /proc/self/maps for the mapping(s) that hold the range, then a descriptor of that file among
// this process's open descriptors (/proc/self/fd), else through /proc/self/map_files (needs
// CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE). Private and anonymous memory has no file: throws
// kInvalidArgument naming the range and saying how to allocate memory that works.
MemfdRange find_memfd(const void* ptr, size_t size);

}  // namespace mori::umbp
