// SPDX-License-Identifier: MIT
// The GPU symmetric heap of a PE bound to a CUDA device: one device allocation of
// MORI_SHMEM_GPU_HEAP_SIZE, carved by its own HeapAllocator (same calls on every PE,
// so the same offsets), IPC-mapped by every P2P-reachable PE of the node through the
// cuda transport, plus the device-side state kernels use (device_state.h).
//
// Without a CUDA toolkit at build time, create() throws Unavailable and nothing else
// is reachable. Streams are cudaStream_t passed as void* (nullptr: legacy default).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "mori/core/heap_allocator.h"
#include "mori/shmem/device_state.h"
#include "mori/transports/mem_region.h"

namespace mori {
class CudaTransport;
}

namespace mori::shmem {

class Runtime;

class GpuHeap {
 public:
  // Whether this build has CUDA support compiled in.
  static bool built_with_cuda();
  // CUDA devices visible to this process (0 without CUDA or a driver).
  static int device_count();
  // CUDA device whose memory `ptr` points into (device or managed memory), else -1 (host memory,
  // including pinned host memory, or a build without CUDA).
  static int pointer_device(const void* ptr);

  // Collective over `rt`'s PEs (every PE bound to a device): allocates, exchanges IPC handles,
  // maps reachable peers, installs the cuda transport for device regions.
  static std::unique_ptr<GpuHeap> create(Runtime& rt, int device, size_t bytes);
  ~GpuHeap();
  GpuHeap(const GpuHeap&) = delete;
  GpuHeap& operator=(const GpuHeap&) = delete;

  int device() const { return device_; }
  char* base() const { return base_; }
  size_t size() const { return size_; }
  bool contains(const void* p, size_t n = 0) const;
  // Whether `pe`'s GPU heap is mapped here (device loads/stores and copy-engine RMA reach it).
  bool reachable(int pe) const { return pe >= 0 && pe < n_pes_ && host_peer_base_[pe] != nullptr; }
  bool all_reachable() const;

  // Local allocator (the Runtime wraps these with the collective barriers).
  void* allocate(size_t bytes, size_t alignment, const char* caller);
  void release(void* p, const char* caller);
  size_t bytes_free() const;

  // The state kernels take: a host copy (pass by value) and its device copy (pass by pointer).
  const DeviceState& device_state() const { return host_state_; }
  const DeviceState* device_state_ptr() const { return device_state_ptr_; }
  // Every PE's heap base as mapped in this process (nullptr: not reachable).
  const std::vector<char*>& peer_bases() const { return host_peer_base_; }

  // ---- stream-ordered operations (enqueued, capturable in CUDA graphs)
  // Copy-engine put/get between local memory and `pe`'s GPU heap (dst/src symmetric).
  void put_on_stream(void* dst, const void* src, size_t n, int pe, void* stream, const char* caller);
  void get_on_stream(void* dst, const void* src, size_t n, int pe, void* stream, const char* caller);
  // The same put with SM stores: `blocks` thread blocks (0: four per multiprocessor) copy over NVLink.
  void put_sm_on_stream(void* dst, const void* src, size_t n, int pe, int blocks, void* stream, const char* caller);
  // Put, then a release update of the uint64 signal on `pe` once the data has landed.
  void put_signal_on_stream(void* dst, const void* src, size_t n, uint64_t* signal, uint64_t value, int sig_op, int pe,
                            void* stream, const char* caller);
  // Stalls `stream` until the local uint64 `signal` compares true (cmp: OpenSHMEM numbering).
  void signal_wait_until_on_stream(uint64_t* signal, int cmp, uint64_t value, void* stream, const char* caller);
  // A device barrier over all PEs, after everything already on `stream` (MORI's shmem_barrier_on_stream).
  void barrier_on_stream(void* stream);

 private:
  GpuHeap() = default;
  size_t offset_of(const void* sym, size_t n, const char* caller) const;
  void check_peer(int pe, const char* caller) const;

  Runtime* rt_ = nullptr;
  int device_ = -1;
  int my_pe_ = 0, n_pes_ = 0;
  int sm_count_ = 0;
  char* base_ = nullptr;
  size_t size_ = 0;
  const MemRegion* region_ = nullptr;
  CudaTransport* transport_ = nullptr;  // owned by the runtime
  std::unique_ptr<HeapAllocator> allocator_;
  mutable std::mutex mu_;
  DeviceState state_{};       // with peer_base pointing at host_peer_base_ (host-side queries)
  DeviceState host_state_{};  // what kernels see (peer_base is the device array)
  const DeviceState* device_state_ptr_ = nullptr;
  std::vector<char*> host_peer_base_;
};

}  // namespace mori::shmem
