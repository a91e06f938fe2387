// SPDX-License-Identifier: MIT
// copy_bytes: memcpy for the transports' data path, without `rep movsb` at mid sizes.
//
// glibc copies 4 KiB .. its non-temporal threshold with `rep movsb` where the CPU advertises
// fast string moves. On the AMD EPYC VMs this project runs on, that instruction's speed depends
// on where the two buffers sit: a 32 KiB copy from a peer's mapping took 0.74 us in one process
// and 1.3-1.7 us in the next (the same program, 8 runs), and 4 KiB ran at 45-74 GB/s against
// 75-92 GB/s for plain vector moves. Between kVectorCopyMin and kVectorCopyMax this copies with
// 32-byte vector loads and stores instead (0.68-0.85 us at 32 KiB in every run); smaller copies
// (vector moves in glibc already) and larger ones (non-temporal stores there) stay with memcpy,
// and so does every copy on other CPUs (copy.cc says why).
#pragma once

#include <cstddef>
#include <cstring>

namespace mori {

constexpr size_t kVectorCopyMin = size_t{2} << 10;
constexpr size_t kVectorCopyMax = size_t{1} << 20;

// The vector loop on AMD CPUs with AVX2, memcpy elsewhere. Any n; dst and src must not overlap.
void copy_vectors(void* dst, const void* src, size_t n);

// Copies with non-temporal (cache-bypassing) stores, for copies that stream more data than the
// last-level cache holds into memory that is not read again soon (a KV-cache store's values).
// Measured on this project's AMD EPYC VMs, 32 x 2 MiB: 4.1-4.3 GB/s against memcpy's 2.6-2.8
// (memcpy's stores first read each destination line; these do not, and they leave the cache to
// the data that is reused). Copies the caches hold are slower this way: see streaming_copy_min().
void copy_streaming(void* dst, const void* src, size_t n);
// The bytes a run of copies should move before copy_streaming() pays: half the last-level cache
// (its source and destination together then outgrow it; the size one core shares, from sysfs),
// 16 MiB where the size is unknown.
size_t streaming_copy_min();

inline void copy_bytes(void* dst, const void* src, size_t n) {
  if (n < kVectorCopyMin || n > kVectorCopyMax)
    std::memcpy(dst, src, n);
  else
    copy_vectors(dst, src, n);
}

}  // namespace mori
