// SPDX-License-Identifier: MIT
// The push engine of MORI-CCL's GPU collectives (PEs of one node, one GPU each).
//
// One primitive, `exchange`: every PE pushes byte ranges into its peers with cudaMemcpyAsync
// on dedicated streams (copy engines, no SM touches remote data) and signals each peer once a
// chunk has landed; each PE waits for what it receives. A push lands either straight in the
// peer's destination (a symmetric address, when the destination lies in the GPU heap: zero
// extra copy) or in the peer's receive staging, which the peer then copies out chunk by chunk
// while the next chunk is still on the wire, or reduces itself (`finish` releases it).
//
// Everything lives in the runtime's GPU symmetric heap (Runtime::gpu_malloc): flags, epoch and
// staging; peer addresses come from Runtime::ptr. Ordering is by epochs kept in device memory:
// a call's kernels read the epoch there, so a captured CUDA graph replays correctly, and flags
// only grow (nothing is reset). All work is enqueued on the caller's stream; side streams fork
// from it and join back through events.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace mori::collectives {

// A push from this PE to `pe`: `bytes` from local `src` to the symmetric address `dst` (this
// PE's heap address; translated for `pe`) when `direct`, else into `pe`'s staging slot for this
// PE at byte `staging_offset`.
struct CeSend {
  int pe = 0;
  const void* src = nullptr;
  void* dst = nullptr;
  size_t bytes = 0;
  bool direct = false;
  size_t staging_offset = 0;
};

// What this PE receives from `pe` (the same `bytes` that PE sends). `copy_to` non-null: copy the
// staged bytes (staging slot of `pe`, from `staging_offset`) there once they land; null: only
// wait (a direct push, or data the caller reads from the staging slot before `finish`).
struct CeRecv {
  int pe = 0;
  void* copy_to = nullptr;
  size_t bytes = 0;
  size_t staging_offset = 0;
  bool direct = false;  // the sender pushes straight into the destination (one piece, one signal)
};

struct CeStats {
  uint64_t calls = 0, direct_bytes = 0, staged_bytes = 0;
};

class CeEngine {
 public:
  // Collective over the runtime's PEs (all bound to GPUs of this node, P2P-reachable):
  // allocates the flags and `staging_bytes` of receive staging from the GPU symmetric heap.
  explicit CeEngine(size_t staging_bytes);
  // Collective when the runtime that made it is still live (frees the heap memory).
  ~CeEngine();
  CeEngine(const CeEngine&) = delete;
  CeEngine& operator=(const CeEngine&) = delete;

  // Enqueues one exchange on `stream` (cudaStream_t as an integer). Optionally first a local
  // copy `local_bytes` from `local_src` to `local_dst` (an SM kernel, on a side stream). With
  // `defer_release` the staging slots stay owned by the caller until `finish`.
  void exchange(const std::vector<CeSend>& sends, const std::vector<CeRecv>& recvs, void* local_dst,
                const void* local_src, size_t local_bytes, bool defer_release, uintptr_t stream);
  // Tells every peer that this PE is done with the staging of the last exchange.
  void finish(uintptr_t stream);
  // A local copy by an SM kernel (any alignment), enqueued on `stream`.
  void local_copy(void* dst, const void* src, size_t bytes, uintptr_t stream);

  // Bytes one peer may stage here per exchange.
  size_t slot_bytes() const { return slot_bytes_; }
  // Start of this PE's staging slot that receives from `pe` (a device address; nullptr for self).
  void* slot(int pe) const;
  int device() const { return device_; }
  const CeStats& stats() const { return stats_; }
  // Pieces a transfer of `bytes` is cut into (signals per pair); the same on both sides. Staged
  // transfers are pipelined (the receiver copies a piece out while the next one flies); direct
  // ones move in one piece.
  static int chunks(size_t bytes, bool direct = false);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  size_t slot_bytes_ = 0;
  int device_ = -1;
  CeStats stats_;
};

}  // namespace mori::collectives
