// SPDX-License-Identifier: MIT
#include "src/memfd_lookup.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "mori/core/status.h"

namespace mori::umbp {
namespace {

struct MapsLine {
  uint64_t start = 0, end = 0, offset = 0;
  std::string perms;
  unsigned dev_major = 0, dev_minor = 0;
  uint64_t inode = 0;
  std::string path;
};

bool parse_maps_line(const std::string& line, MapsLine* m) {
  char perms[8] = {};
  int path_at = 0;
  if (std::sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %x:%x %" SCNu64 " %n", &m->start, &m->end,
                  perms, &m->offset, &m->dev_major, &m->dev_minor, &m->inode, &path_at) < 7)
    return false;
  m->perms = perms;
  m->path = path_at > 0 ? line.substr(static_cast<size_t>(path_at)) : "";
  return true;
}

// A descriptor this process already holds for the file (dev, inode), duplicated; -1 if none.
int find_open_descriptor(const MapsLine& m) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  const int own = ::dirfd(dir);
  while (dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == own) continue;
    struct stat st{};
    if (::fstat(static_cast<int>(fd), &st) != 0) continue;
    if (st.st_ino == m.inode && major(st.st_dev) == m.dev_major && minor(st.st_dev) == m.dev_minor) {
      found = ::fcntl(static_cast<int>(fd), F_DUPFD_CLOEXEC, 0);
      break;
    }
  }
  ::closedir(dir);
  return found;
}

}  // namespace

MemfdRange find_memfd(const void* ptr, size_t size) {
  const uint64_t lo = reinterpret_cast<uintptr_t>(ptr), hi = lo + size;
  std::ifstream maps("/proc/self/maps");
  if (!maps) raise_errno("register_memory: cannot read /proc/self/maps");
  std::string line;
  MapsLine first{}, cur{};
  bool have = false;
  uint64_t covered_to = 0;
  while (std::getline(maps, line)) {
    MapsLine m;
    if (!parse_maps_line(line, &m)) continue;
    if (!have) {
      if (m.start <= lo && lo < m.end) {
        first = cur = m;
        have = true;
        covered_to = m.end;
      }
      continue;
    }
    if (covered_to >= hi) break;
    // The range goes on into the next mapping: it must continue the same file seamlessly
    // (an mprotect splits one mapping into several lines).
    if (m.start != covered_to || m.inode != first.inode || m.offset != first.offset + (m.start - first.start)) break;
    covered_to = m.end;
  }
  if (!have) raise(Status::kInvalidArgument, "register_memory: ptr 0x%" PRIx64 " is not mapped in this process", lo);
  if (first.inode == 0 || first.perms.size() < 4 || first.perms[3] != 's')
    raise(Status::kInvalidArgument,
          "register_memory: [0x%" PRIx64
          ", +%zu) is private memory (%s), which the per-host server cannot map; "
          "allocate the buffer with UMBPHostMemAllocator().alloc(size, UMBPHostBufferBacking.AnonymousShm) "
          "(or any memfd / shared file mapping)",
          lo, size, first.path.empty() ? "anonymous" : first.path.c_str());
  // After the private-memory check: a private buffer that straddles two mappings (heap growth) is
  // still, first of all, private.
  if (covered_to < hi)
    raise(Status::kInvalidArgument,
          "register_memory: [0x%" PRIx64 ", +%zu) runs past its mapping (which ends at 0x%" PRIx64 ")", lo, size,
          covered_to);
  MemfdRange r;
  r.offset = first.offset + (lo - first.start);
  r.fd = find_open_descriptor(first);
  if (r.fd < 0) {
    char name[96];
    std::snprintf(name, sizeof(name), "/proc/self/map_files/%" PRIx64 "-%" PRIx64, first.start, first.end);
    r.fd = ::open(name, O_RDWR | O_CLOEXEC);
  }
  if (r.fd < 0)
    raise(Status::kInvalidArgument,
          "register_memory: [0x%" PRIx64
          ", +%zu) is backed by %s, but this process holds no descriptor of it "
          "and may not reopen it through /proc/self/map_files; keep the memfd open (UMBPHostMemAllocator does)",
          lo, size, first.path.c_str());
  return r;
}

}  // namespace mori::umbp
