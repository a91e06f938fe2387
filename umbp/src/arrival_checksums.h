// SPDX-License-Identifier: MIT
// ArrivalChecksums: the checksums (checksum.h) of the values a located read brings, hashed chunk
// by chunk while the tcp lanes receive them (io::ArrivalObserver). Each chunk is hashed from the
// receiving thread's cache as the rest of the read is still on the wire, so the check after the
// read is a comparison, not another pass over memory.
//
// XXH3 takes a chunk in order, but a striped read lands a chunk's parts from two lanes at once
// (a 360 KiB value as two 180 KiB halves: chunk 0 gets bytes from both). A part that lands
// ahead of the hashed prefix is noted; the thread that brings the prefix up to it hashes it
// from memory (it landed microseconds ago), so no chunk waits for the end of the read. Hashing
// happens outside the chunk's lock: a lane noting its part never waits for another's hash. A chunk
// told of twice, or not whole, is hashed from memory after the read, as before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
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

  // Value i's checksum when every byte of it was told of exactly once, else nullopt (the caller
  // hashes it from memory). Call once the read of value i has ended.
  std::optional<uint64_t> checksum(size_t i) const;

 private:
  struct Range {
    uint64_t at, n;  // within the chunk
  };
  struct Chunk {
    XXH3_state_t state;        // 64-byte aligned (xxHash declares it so): new[] honours it (C++17)
    std::mutex mu;             // the lanes that bring its parts (never held while hashing)
    uint64_t hashed = 0;       // the prefix hashed so far
    uint64_t claimed = 0;      // ... and being hashed: [hashed, claimed) by the thread that claimed it
    std::vector<Range> ahead;  // parts landed past what is claimed, by `at`
    bool spoiled = false;      // a byte told of twice: hashed after the read
  };
  struct Value {
    uintptr_t ptr;
    uint64_t size;
    size_t first;  // its first chunk in chunks_
  };

  // Bytes [at, at + n) of chunk c landed at p. The thread whose bytes continue the prefix
  // claims them and hashes them outside the lock, then the parts noted ahead that follow; a
  // thread whose bytes lie further on only notes them, never waiting for a hash.
  static void feed(Chunk& c, uint64_t at, const char* p, size_t n);

  std::vector<Value> values_;      // in the order given
  std::vector<uint32_t> by_addr_;  // indices of values_ by ptr
  std::unique_ptr<Chunk[]> chunks_;
  bool observed_ = true;
};

}  // namespace mori::umbp
