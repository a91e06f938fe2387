// SPDX-License-Identifier: MIT
// The push engine of MORI-CCL's GPU collectives (PEs of one node, one GPU each).
//
// One primitive, `exchange`: every PE pushes byte ranges into its peers with cudaMemcpyAsync
// (copy engines, no SM touches remote data) and signals each peer once a piece has landed; each
// PE waits for what it receives. A push lands either straight in the peer's destination (a
// symmetric address, when the destination lies in the GPU heap: zero extra copy) or in the
// peer's receive staging, which the peer then copies out piece by piece while the next piece is
// still on the wire, or reads itself (reductions) before its next exchange.
//
// Protocol of call e, all on the caller's stream (side streams fork from it and join back):
//   enter:  bump the epoch; signal ready(e) to every peer this PE receives from; wait for
//           ready(e) of every peer it pushes to. ready(e) means the peer's stream reached call e,
//           so everything it did with earlier pushes (copy-outs, reductions of staging, other
//           work on the destination) is done: one handshake per call, no separate release.
//   push:   cudaMemcpyAsync per peer (the first one-piece push on the caller's stream, others on
//           per-peer streams). Multi-piece (staged) pushes signal each piece from a side stream
//           so the next piece keeps the copy engine busy.
//   arrive: fence, signal the one-piece pushes, wait for everything received in one piece (or
//           not copied out); copy staged single pieces out. Multi-piece copy-outs wait and copy
//           piece by piece.
// Staging read by the caller (CeRecv without copy_to) stays valid until this PE's next exchange.
//
// Everything lives in the runtime's GPU symmetric heap (Runtime::gpu_malloc): flags, epoch and
// staging; peer addresses come from Runtime::ptr. The epoch lives in device memory and flags
// only grow (nothing is reset), so a captured CUDA graph replays correctly.
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
// wait (a direct push, or data the caller reads from the staging slot before its next exchange).
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
  // Collective over the runtime's PEs (all bound to GPUs of this node, P2P-reachable, at most
  // 256): allocates the flags and `staging_bytes` of receive staging from the GPU symmetric heap.
  explicit CeEngine(size_t staging_bytes);
  // Collective when the runtime that made it is still live (frees the heap memory).
  ~CeEngine();
  CeEngine(const CeEngine&) = delete;
  CeEngine& operator=(const CeEngine&) = delete;

  // Enqueues one exchange on `stream` (cudaStream_t as an integer). Every PE makes the same
  // calls in the same order; at most one send and one receive per peer. Optionally a local copy
  // `local_bytes` from `local_src` to `local_dst` (an SM kernel on a side stream, overlapping
  // the exchange).
  void exchange(const std::vector<CeSend>& sends, const std::vector<CeRecv>& recvs, void* local_dst,
                const void* local_src, size_t local_bytes, uintptr_t stream);
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
