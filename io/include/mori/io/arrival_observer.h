// SPDX-License-Identifier: MIT
// What a reader can learn of a read's bytes while they land: a checksum of each value can be
// hashed from the receiving thread's cache, as the rest is still on the wire, instead of from
// memory once the whole read has arrived (UMBP's located reads: umbp/src/arrival_checksums.h).
#pragma once

#include <cstddef>

namespace mori::io {

class ArrivalObserver {
 public:
  virtual ~ArrivalObserver() = default;

  // [p, p + n) of the read's local memory now holds received bytes. Within one block (below)
  // of an extent, calls come in order from one thread; different blocks may be told about at
  // once from different threads.
  virtual void landed(const char* p, size_t n) = 0;

  // The block: the tcp backend cuts an extent into pieces at multiples of it from the
  // extent's start (0: anywhere), where that still gives each lane a piece. A transfer with an
  // observer keeps its extents as given (contiguous ones are not merged into one). A read a
  // backend moves without seeing the bytes land (same-host copies, GPU memory, UCX) calls
  // nothing: the observer checks what it was told.
  virtual size_t block() const = 0;
};

}  // namespace mori::io
