// SPDX-License-Identifier: MIT
// ArrivalChecksums: the checksums (checksum.h) of the values a located read brings, hashed chunk
// by chunk while the tcp lanes receive them (io::ArrivalObserver). Each chunk is hashed from the
// receiving thread's cache as the rest of the read is still on the wire, so the check after the
// read is a comparison, not another pass over memory. Whatever the backend did, a chunk counts
// only when it was told of whole and in order by one thread at a time; any other value is
// hashed from memory after the read, as before.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "mori/io/arrival_observer.h"
#include "src/checksum.h"

namespace mori::umbp {

class ArrivalChecksums final : public io::ArrivalObserver {
 public:
  // The read's destinations, value i at [ptrs[i], ptrs[i] + sizes[i]). Overlapping ones are not
  // observed at all: every value is then hashed after the read.
  ArrivalChecksums(const std::vector<uintptr_t>& ptrs, const std::vector<uint64_t>& sizes);

  void landed(const char* p, size_t n) override;
  size_t block() const override { return kChecksumChunk; }

  // Value i's checksum when every chunk of it was hashed whole as it landed, else nullopt (the
  // caller hashes it from memory). Call once the read of value i has ended.
  std::optional<uint64_t> checksum(size_t i) const;

 private:
  struct Chunk {
    XXH3_state_t state;  // 64-byte aligned (xxHash declares it so): new[] honours it (C++17)
    uint64_t fed = 0;    // bytes hashed so far, from the chunk's start
    // Held while one thread hashes: a second one at the same time spoils the chunk instead.
    std::atomic<bool> busy{false};
    std::atomic<bool> spoiled{false};  // told of out of order or by two threads at once: hashed after
  };
  struct Value {
    uintptr_t ptr;
    uint64_t size;
    size_t first;  // its first chunk in chunks_
  };

  void feed(Chunk& c, uint64_t at, const char* p, size_t n);

  std::vector<Value> values_;      // in the order given
  std::vector<uint32_t> by_addr_;  // indices of values_ by ptr
  std::unique_ptr<Chunk[]> chunks_;
  bool observed_ = true;
};

}  // namespace mori::umbp
