// SPDX-License-Identifier: MIT
// Copy-engine allgather for GPUs of one node.
//
// Every PE publishes its shard in a symmetric device window (its own input when the input
// already lies in the window, else a staging copy made by a small kernel together with the
// local shard), then pulls each peer's shard straight into its output with cudaMemcpyAsync on
// one dedicated stream per peer: the bytes between GPUs move on the copy engines, no SM
// touches remote data. Two one-block kernels order the PEs: "ready" (every PE's shard is
// published) and "done" (every PE finished reading, so the window may be reused). Their
// epoch counter lives in device memory, so a captured CUDA graph replays correctly.
// Everything is enqueued on the caller's stream (side streams fork from and join back to it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace mori::collectives {

// One device allocation per PE that every PE of the node can address. peers[pe] is PE pe's
// allocation as mapped in this process (peers[my_pe] == local).
struct DeviceWindow {
  void* local = nullptr;
  size_t bytes = 0;
  std::vector<void*> peers;
};

struct CeStats {
  uint64_t calls = 0, zero_copy = 0, bytes_pulled = 0;
};

class CeAllgather {
 public:
  // Collective over the shmem runtime's PEs (all on this node, each on its own current CUDA
  // device). Allocates a window with `staging_bytes` of staging and maps the peers' windows
  // through CUDA IPC, exchanging handles over the runtime's bootstrap.
  explicit CeAllgather(size_t staging_bytes);
  ~CeAllgather();
  CeAllgather(const CeAllgather&) = delete;
  CeAllgather& operator=(const CeAllgather&) = delete;

  // Enqueues on `stream` (a cudaStream_t as an integer; 0 = legacy default stream):
  // out[pe * bytes, (pe + 1) * bytes) = PE pe's `in`, for every pe. `in` and `out` are
  // device memory of this PE's GPU. An `in` inside this PE's window is read in place by the
  // peers, which then read theirs at the same window offset (symmetric use).
  void run(void* out, const void* in, size_t bytes, uintptr_t stream);

  // Largest shard the staging buffer holds.
  size_t staging_bytes() const { return staging_bytes_; }
  // Start of the staging area in this PE's window (a symmetric input buffer for zero-copy use).
  void* staging() const;
  int device() const { return device_; }
  const CeStats& stats() const { return stats_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  size_t staging_bytes_;
  int device_ = -1;
  CeStats stats_;
};

}  // namespace mori::collectives
