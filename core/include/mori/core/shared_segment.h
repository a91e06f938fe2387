// SPDX-License-Identifier: MIT
// A shared-memory segment, created by its owner and mapped by peers on the same host. The
// memory is an anonymous memory file (memfd): nothing in /dev/shm, freed with the last mapping.
#pragma once

#include <cstddef>
#include <string>

namespace mori {

class SharedSegment {
 public:
  // Creates and maps a new segment at an address that is a multiple of `alignment` (a power of
  // two; 0 = wherever the kernel puts it). `name` labels it (/proc/PID/maps); name() is then
  // the handle peers open() it by, valid until release_handle(). Its size is sealed: a mapping
  // of it never reaches past the end of the file. `huge_page_size` > 0 backs it with huge pages of
  // that size (memfd MFD_HUGETLB; size and alignment must be multiples of it) and reserves them at
  // mapping time, so an empty huge page pool fails here, not with SIGBUS later.
  static SharedSegment create(const std::string& name, size_t size, size_t alignment = 0, size_t huge_page_size = 0);
  // Maps a segment created by a peer (its name()), or a POSIX shm object by its name.
  static SharedSegment open(const std::string& name, size_t size);
  // Maps the whole of a peer's segment (its name()), at the size its memory file has, after
  // checking that the file is a create()d segment labelled `label_prefix...` whose size is sealed
  // (it can never shrink under the mapping). Throws kRemote naming what does not hold.
  static SharedSegment open_sealed(const std::string& name, const std::string& label_prefix);

  SharedSegment() = default;
  SharedSegment(SharedSegment&& o) noexcept { *this = std::move(o); }
  SharedSegment& operator=(SharedSegment&& o) noexcept;
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;
  ~SharedSegment();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  // The owner's memory-file descriptor (for SCM_RIGHTS hand-over), -1 after release_handle()
  // and in peers.
  int fd() const { return fd_; }
  // Closes the handle; existing mappings stay valid. Owners call it once every peer mapped.
  void release_handle();

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
  int fd_ = -1;  // owner's descriptor, open until release_handle()
};

}  // namespace mori
