// SPDX-License-Identifier: MIT
// Copies that bypass the caches (non-temporal stores), for the big phases of the CPU kernels:
// a row copied into a peer's receive or staging buffer is not read again before it has left
// the cache, so a normal store costs a read of the destination line (read-for-ownership) and a
// write-back later, three passes over memory where the peer-copy ceiling (a large memcpy,
// which streams) costs two.
#pragma once

#include <cstddef>

namespace mori::ep {

// Phases that move at least this many bytes stream their rows; smaller ones stay in the
// caches, where the reader (the expert, or the summing PE) finds them sooner.
constexpr size_t kStreamMinBytes = size_t{8} << 20;

// memcpy with non-temporal stores for the 16-byte-aligned part of dst (plain memcpy where the
// CPU has none). Call stream_fence() before anything publishes what was written.
void copy_streaming(void* dst, const void* src, size_t n);
// Orders this thread's non-temporal stores before its later stores (sfence).
void stream_fence();

}  // namespace mori::ep
