// SPDX-License-Identifier: MIT
// Offset allocator of a symmetric heap. Every PE runs the same sequence of
// calls, so every PE gets the same offsets: that is what makes the heap symmetric.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mori {

class HeapAllocator {
 public:
  static constexpr size_t kMinAlign = 64;

  // Manages [begin, end) of the heap's offset space.
  HeapAllocator(size_t begin, size_t end);

  // First-fit; returns the offset or nullopt when no free block fits.
  std::optional<size_t> allocate(size_t bytes, size_t alignment = kMinAlign);
  // Returns the block size of a live allocation at `offset` (0 if there is none).
  size_t block_size(size_t offset) const;
  // Releases the allocation at `offset`; false if `offset` is not a live allocation.
  bool release(size_t offset);
  // Grows or shrinks in place when the neighbour allows it.
  bool resize_in_place(size_t offset, size_t new_bytes);

  size_t capacity() const { return end_ - begin_; }
  size_t bytes_free() const;
  size_t largest_free_block() const;
  // The free blocks, (offset, size) in offset order.
  std::vector<std::pair<size_t, size_t>> free_blocks() const { return {free_.begin(), free_.end()}; }
  size_t live_allocations() const { return used_.size(); }
  // "requested X; free Y in total, largest block Z of W" for error messages.
  std::string describe_exhaustion(size_t bytes, size_t alignment) const;

 private:
  void insert_free(size_t offset, size_t size);

  size_t begin_, end_;
  std::map<size_t, size_t> free_;  // offset -> size, coalesced
  std::map<size_t, size_t> used_;  // offset -> size
};

std::string human_bytes(size_t bytes);

}  // namespace mori
