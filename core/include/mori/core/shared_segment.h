// SPDX-License-Identifier: MIT
// A POSIX shared-memory segment, created by its owner and mapped by peers on the same host.
#pragma once

#include <cstddef>
#include <string>

namespace mori {

class SharedSegment {
 public:
  // Creates and maps a new segment (fails if the name exists) at an address that is a
  // multiple of `alignment` (a power of two; 0 = wherever the kernel puts it).
  static SharedSegment create(const std::string& name, size_t size, size_t alignment = 0);
  // Maps an existing segment created by a peer.
  static SharedSegment open(const std::string& name, size_t size);

  SharedSegment() = default;
  SharedSegment(SharedSegment&& o) noexcept { *this = std::move(o); }
  SharedSegment& operator=(SharedSegment&& o) noexcept;
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;
  ~SharedSegment();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  // Removes the name; existing mappings stay valid. Owners call it once every peer mapped.
  void unlink();

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
  bool owner_ = false;
  bool linked_ = false;
};

}  // namespace mori
