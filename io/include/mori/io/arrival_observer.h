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

  // [p, p + n) of the read's local memory now holds received bytes. Calls may come from
  // several threads at once (a striped transfer's lanes), each thread's in the order its bytes
  // arrive, for spans of any size: one may run over several extents of a batch. A read a
  // backend moves without seeing the bytes land (same-host copies, GPU memory, UCX) calls
  // nothing: the observer checks what it was told.
  virtual void landed(const char* p, size_t n) = 0;
};

}  // namespace mori::io
