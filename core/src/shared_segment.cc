// SPDX-License-Identifier: MIT
#include "mori/core/shared_segment.h"

#include <cstdint>
#include <string>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mori/core/status.h"

#ifndef MFD_HUGE_SHIFT
#define MFD_HUGE_SHIFT 26  // linux/memfd.h: log2(page size) goes in bits 26..31
#endif

namespace mori {

namespace {

// Reserves size + alignment of address space and returns an aligned start inside it,
// releasing the slack, so a MAP_FIXED mapping can go there.
void* reserve_aligned(size_t size, size_t alignment) {
  size_t span = size + alignment;
  void* raw = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) raise_errno("reserving %zu bytes of address space", span);
  uintptr_t start = (reinterpret_cast<uintptr_t>(raw) + alignment - 1) & ~(alignment - 1);
  size_t head = start - reinterpret_cast<uintptr_t>(raw);
  if (head) munmap(raw, head);
  size_t tail = span - head - size;
  if (tail) munmap(reinterpret_cast<void*>(start + size), tail);
  return reinterpret_cast<void*>(start);
}

}  // namespace

SharedSegment SharedSegment::create(const std::string& name, size_t size, size_t alignment, size_t huge_page_size) {
  // An anonymous memory file, not a /dev/shm name: its memory goes with the last descriptor
  // and mapping, so a job killed at any moment (even before its peers mapped it) leaves nothing.
  unsigned flags = MFD_CLOEXEC;
  if (huge_page_size) flags |= MFD_HUGETLB | (static_cast<unsigned>(__builtin_ctzll(huge_page_size)) << MFD_HUGE_SHIFT);
  int fd = memfd_create(name.c_str(), flags);
  if (fd < 0) raise_errno("memfd_create(%s)", name.c_str());
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    int err = errno;
    close(fd);
    errno = err;
    raise_errno("ftruncate(%s, %zu)", name.c_str(), size);
  }
  void* where = alignment ? reserve_aligned(size, alignment) : nullptr;
  // Huge pages are reserved now (no MAP_NORESERVE): a shortage fails this mmap instead of a later touch.
  int map_flags = MAP_SHARED | (huge_page_size ? 0 : MAP_NORESERVE) | (where ? MAP_FIXED : 0);
  void* p = mmap(where, size, PROT_READ | PROT_WRITE, map_flags, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    if (where) munmap(where, size);
    close(fd);
    errno = err;
    raise_errno("mmap of %zu bytes of shared memory %s", size, name.c_str());
  }
  SharedSegment s;
  s.data_ = p;
  s.size_ = size;
  s.fd_ = fd;
  // Peers on this host open the descriptor through /proc while we keep it open (until release_handle()).
  s.name_ = "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd);
  return s;
}

SharedSegment SharedSegment::open(const std::string& name, size_t size) {
  // A peer's memory file (create()) by its /proc path, or a POSIX shm name.
  bool by_path = name.rfind("/proc/", 0) == 0;
  int fd = by_path ? ::open(name.c_str(), O_RDWR | O_CLOEXEC) : shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) raise_errno("opening %s, a peer's shared memory (has the peer exited?)", name.c_str());
  struct stat st{};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < size) {
    close(fd);
    raise(Status::kRemote, "peer segment %s is smaller than announced (%zu bytes)", name.c_str(), size);
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  close(fd);
  if (p == MAP_FAILED) raise_errno("mmap of peer segment %s", name.c_str());
  SharedSegment s;
  s.data_ = p;
  s.size_ = size;
  s.name_ = name;
  return s;
}

SharedSegment& SharedSegment::operator=(SharedSegment&& o) noexcept {
  if (this != &o) {
    this->~SharedSegment();
    data_ = o.data_;
    size_ = o.size_;
    name_ = std::move(o.name_);
    fd_ = o.fd_;
    o.data_ = nullptr;
    o.size_ = 0;
    o.fd_ = -1;
  }
  return *this;
}

void SharedSegment::release_handle() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

SharedSegment::~SharedSegment() {
  release_handle();
  if (data_) munmap(data_, size_);
  data_ = nullptr;
}

}  // namespace mori
