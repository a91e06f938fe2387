// SPDX-License-Identifier: MIT
// This process's shared tensor arena: one anonymous memory file, reserved sparse and mapped
// once, that large torch CPU tensors can be allocated from (mori.shmem.shared_tensors), so
// that PEs on this host read them in place: the EP combine then pulls an external input
// instead of copying it into the source's staging rows. Peers map it by handle().
#pragma once

#include <cstddef>
#include <mutex>
#include <string>

#include "mori/core/heap_allocator.h"
#include "mori/core/shared_segment.h"

namespace mori {

class SharedArena {
 public:
  // The process's arena, created on first use with MORI_SHARED_TENSOR_BYTES of address space.
  static SharedArena& instance();
  // The arena if it was created, else nullptr (never creates one).
  static SharedArena* existing();

  // A block of at least `bytes` (64-byte aligned), or nullptr when none fits or this process
  // is a fork() child (its copy of the block table is not its parent's).
  void* allocate(size_t bytes);
  // Returns a block; false if `p` is not the start of a live block.
  bool release(void* p);
  bool contains(const void* p, size_t n = 1) const {
    auto a = static_cast<const char*>(p);
    return a >= base() && n <= size() && a - base() <= static_cast<std::ptrdiff_t>(size() - n);
  }
  size_t offset_of(const void* p) const { return static_cast<size_t>(static_cast<const char*>(p) - base()); }

  char* base() const { return static_cast<char*>(segment_.data()); }
  size_t size() const { return segment_.size(); }
  const std::string& handle() const { return segment_.name(); }
  size_t bytes_in_use() const;
  // Gives the memory of every free block back to the system (freed blocks otherwise stay
  // committed for the next tensor, as in a caching allocator); returns the bytes released.
  size_t trim();
  size_t live_blocks() const;

  // A peer's arena (its handle()) mapped whole into this process, at the size its memory file
  // has (sealed, so fixed for good), whatever size the peer claims: reads through it are
  // checked against `size`. Cached, so every op of the process shares one mapping per arena.
  // Throws kRemote (saying why) when the handle names anything but a peer's arena.
  struct PeerMapping {
    const char* base = nullptr;
    size_t size = 0;
  };
  static PeerMapping map_peer(const std::string& handle);

 private:
  explicit SharedArena(size_t bytes);

  SharedSegment segment_;
  mutable std::mutex mu_;
  HeapAllocator blocks_;
  size_t in_use_ = 0;
};

}  // namespace mori
