// SPDX-License-Identifier: MIT
#include "mori/core/shared_segment.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
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

constexpr int kSizeSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

}  // namespace

SharedSegment SharedSegment::create(const std::string& name, size_t size, size_t alignment, size_t huge_page_size) {
  // An anonymous memory file, not a /dev/shm name: its memory goes with the last descriptor
  // and mapping, so a job killed at any moment (even before its peers mapped it) leaves nothing.
  unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
  if (huge_page_size) flags |= MFD_HUGETLB | (static_cast<unsigned>(__builtin_ctzll(huge_page_size)) << MFD_HUGE_SHIFT);
  int fd = memfd_create(name.c_str(), flags);
  if (fd < 0) raise_errno("memfd_create(%s)", name.c_str());
  // Sealed at its size: a peer's mapping can trust the file's size for as long as it maps it.
  if (ftruncate(fd, static_cast<off_t>(size)) != 0 || fcntl(fd, F_ADD_SEALS, kSizeSeals) != 0) {
    int err = errno;
    close(fd);
    errno = err;
    raise_errno("sizing shared memory %s to %zu bytes", name.c_str(), size);
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

SharedSegment SharedSegment::open_sealed(const std::string& name, const std::string& label_prefix) {
  // Only a peer's descriptor by its /proc path: /proc/PID/fd/N.
  const std::string proc = "/proc/";
  size_t digits = 0, fd_digits = 0;
  if (name.rfind(proc, 0) == 0) {
    digits = name.find_first_not_of("0123456789", proc.size());
    if (digits != std::string::npos && digits > proc.size() && name.compare(digits, 4, "/fd/") == 0)
      fd_digits = name.size() - (digits + 4);
  }
  if (!fd_digits || name.find_first_not_of("0123456789", digits + 4) != std::string::npos || fd_digits > 9)
    raise(Status::kRemote, "not a descriptor of a peer process (/proc/PID/fd/N)");
  int fd = ::open(name.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) raise(Status::kRemote, "cannot open it: %s (has the peer exited?)", std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  // What was opened, not what the name pointed to a moment before: our own descriptor's target.
  char target[256] = {};
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = readlink(self.c_str(), target, sizeof(target) - 1);
  const std::string want = "/memfd:" + label_prefix;
  if (n <= 0 || std::string(target, static_cast<size_t>(n)).rfind(want, 0) != 0)
    raise(Status::kRemote, "it is not a %s... memory file", label_prefix.c_str());
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
    raise(Status::kRemote, "its size is not sealed");
  struct stat st{};
  if (fstat(fd, &st) != 0 || st.st_size <= 0) raise(Status::kRemote, "it is empty");
  const size_t size = static_cast<size_t>(st.st_size);
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) raise(Status::kRemote, "mmap of its %zu bytes failed: %s", size, std::strerror(errno));
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
