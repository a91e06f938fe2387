// SPDX-License-Identifier: MIT
#include "mori/shmem/gpu_heap.h"

#include <cstring>

#include "mori/core/env.h"
#include "mori/core/log.h"
#include "mori/core/status.h"
#include "mori/shmem/runtime.h"

#if MORI_WITH_CUDA
#include <cuda_runtime_api.h>

#include "mori/core/cuda_check.h"
#include "mori/transports/cuda_transport.h"
#include "src/gpu_kernels.h"
#endif

namespace mori::shmem {

bool GpuHeap::all_reachable() const {
  for (int pe = 0; pe < n_pes_; ++pe)
    if (!reachable(pe)) return false;
  return true;
}

size_t GpuHeap::bytes_free() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocator_ ? allocator_->bytes_free() : 0;
}

bool GpuHeap::contains(const void* p, size_t n) const {
  auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(base_);
  return base_ && a >= b && a - b <= size_ && n <= size_ - (a - b);
}

size_t GpuHeap::offset_of(const void* sym, size_t n, const char* caller) const {
  if (!contains(sym, n))
    raise(Status::kInvalidArgument, "%s: %zu bytes at %p are not inside the GPU symmetric heap [%p, +%zu)", caller, n,
          sym, static_cast<const void*>(base_), size_);
  return static_cast<size_t>(static_cast<const char*>(sym) - base_);
}

void GpuHeap::check_peer(int pe, const char* caller) const {
  if (pe < 0 || pe >= n_pes_)
    raise(Status::kInvalidArgument, "%s: PE %d is out of range (the job has PEs 0..%d)", caller, pe, n_pes_ - 1);
  if (!reachable(pe))
    raise(Status::kUnavailable,
          "%s: PE %d's GPU heap is not reachable from PE %d over P2P (other node, no peer access, or "
          "MORI_DISABLE_P2P=1); GPU-heap RMA needs a P2P path",
          caller, pe, my_pe_);
}

void* GpuHeap::allocate(size_t bytes, size_t alignment, const char* caller) {
  // Offsets are aligned by the allocator; addresses are aligned on every PE only up to the
  // alignment of the heap bases, which cudaMalloc guarantees to 256 bytes (2 MiB in practice).
  size_t base_align = reinterpret_cast<uintptr_t>(base_) & (~reinterpret_cast<uintptr_t>(base_) + 1);
  if (alignment > base_align)
    raise(Status::kInvalidArgument, "%s: alignment %zu exceeds what the GPU heap base allows (%zu)", caller, alignment,
          base_align);
  std::lock_guard<std::mutex> lock(mu_);
  auto off = allocator_->allocate(bytes, alignment);
  if (!off)
    raise(Status::kOutOfMemory, "%s: GPU symmetric heap exhausted on PE %d: %s (raise MORI_SHMEM_GPU_HEAP_SIZE)",
          caller, my_pe_, allocator_->describe_exhaustion(bytes, alignment).c_str());
  return base_ + *off;
}

void GpuHeap::release(void* p, const char* caller) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!contains(p) || !allocator_->release(static_cast<size_t>(static_cast<char*>(p) - base_)))
    raise(Status::kInvalidArgument, "%s: %p is not a live GPU symmetric allocation", caller, p);
}

#if MORI_WITH_CUDA

bool GpuHeap::built_with_cuda() { return true; }

int GpuHeap::device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear: "no driver / no device" is an answer here, not an error
    return 0;
  }
  return n;
}

int GpuHeap::pointer_device(const void* ptr) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess) {
    cudaGetLastError();  // an address CUDA never saw: host memory
    return -1;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? a.device : -1;
}

std::unique_ptr<GpuHeap> GpuHeap::create(Runtime& rt, int device, size_t bytes) {
  int count = device_count();
  if (device < 0 || device >= count)
    raise(Status::kInvalidArgument, "PE %d: CUDA device %d does not exist (this process sees %d device(s))", rt.my_pe(),
          device, count);
  if (rt.n_pes() > kGpuMaxPes)
    raise(Status::kUnavailable, "the GPU heap supports at most %d PEs, the job has %d", kGpuMaxPes, rt.n_pes());
  bytes = (bytes + 4095) / 4096 * 4096;
  if (bytes < 2 * kGpuHeapReserved)
    raise(Status::kInvalidArgument, "MORI_SHMEM_GPU_HEAP_SIZE=%zu is too small (minimum %zu bytes)", bytes,
          2 * kGpuHeapReserved);

  std::unique_ptr<GpuHeap> heap(new GpuHeap());
  heap->rt_ = &rt;
  heap->device_ = device;
  heap->my_pe_ = rt.my_pe();
  heap->n_pes_ = rt.n_pes();
  MORI_CUDA_CHECK(cudaSetDevice(device));  // stays current: this PE works on this device
  MORI_CUDA_CHECK(cudaDeviceGetAttribute(&heap->sm_count_, cudaDevAttrMultiProcessorCount, device));

  cudaDeviceProp prop;
  MORI_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  const auto& settings = env::get();
  // Which peers this GPU reaches by load/store: the registry's device table (cuda) says.
  heap->transport_ = dynamic_cast<CudaTransport*>(&rt.choose_device_transports(device));
  if (!heap->transport_)
    raise(Status::kInternal, "PE %d: device memory is not reached by the cuda transport", rt.my_pe());

  void* base = nullptr;
  cudaError_t err = cudaMalloc(&base, bytes);
  if (err != cudaSuccess)
    raise(Status::kOutOfMemory, "PE %d: cudaMalloc of the %s GPU symmetric heap on device %d failed: %s", rt.my_pe(),
          human_bytes(bytes).c_str(), device, cudaGetErrorString(err));
  heap->base_ = static_cast<char*>(base);
  heap->size_ = bytes;
  MORI_CUDA_CHECK(cudaMemset(base, 0, kGpuHeapReserved));
  MORI_CUDA_CHECK(cudaDeviceSynchronize());
  heap->allocator_ = std::make_unique<HeapAllocator>(kGpuHeapReserved, bytes);

  rt.add_region(base, bytes, MemKind::kDevice, CudaTransport::export_handle(base));
  heap->region_ = rt.resolve(base, 0, "gpu heap").region;

  heap->host_peer_base_.assign(rt.n_pes(), nullptr);
  for (int pe = 0; pe < rt.n_pes(); ++pe)  // mapped where the cuda transport reaches pe, else null
    heap->host_peer_base_[pe] = static_cast<char*>(heap->region_->mapped.at(pe));

  DeviceState st{};
  st.my_pe = rt.my_pe();
  st.n_pes = rt.n_pes();
  st.heap_base = heap->base_;
  st.heap_size = bytes;
  st.sync_flags = reinterpret_cast<uint64_t*>(heap->base_ + kGpuSyncFlagsOffset);
  st.barrier_epoch = reinterpret_cast<uint64_t*>(heap->base_ + kGpuEpochOffset);
  st.timeout_ns = static_cast<uint64_t>(settings.bootstrap_timeout * 1e9);
  st.peer_base = reinterpret_cast<char* const*>(heap->base_ + kGpuPeerBaseOffset);
  heap->host_state_ = st;
  heap->state_ = st;
  heap->state_.peer_base = heap->host_peer_base_.data();
  MORI_CUDA_CHECK(cudaMemcpy(heap->base_ + kGpuPeerBaseOffset, heap->host_peer_base_.data(), sizeof(char*) * rt.n_pes(),
                             cudaMemcpyHostToDevice));
  MORI_CUDA_CHECK(cudaMemcpy(heap->base_ + kGpuStateOffset, &st, sizeof(st), cudaMemcpyHostToDevice));
  heap->device_state_ptr_ = reinterpret_cast<const DeviceState*>(heap->base_ + kGpuStateOffset);
  MORI_CUDA_CHECK(cudaDeviceSynchronize());
  rt.bootstrap().barrier();
  MORI_LOG(kInfo, "SHMEM", "PE %d: GPU heap of %s on device %d (%s), %d SMs", rt.my_pe(), human_bytes(bytes).c_str(),
           device, prop.name, heap->sm_count_);
  return heap;
}

GpuHeap::~GpuHeap() {
  if (base_) {
    CudaDeviceGuard guard(device_, std::nothrow);
    cudaDeviceSynchronize();
    cudaFree(base_);
  }
}

void GpuHeap::put_on_stream(void* dst, const void* src, size_t n, int pe, void* stream, const char* caller) {
  check_peer(pe, caller);
  transport_->put_on_stream(pe, RemoteRef{region_, offset_of(dst, n, caller)}, src, n, stream);
}

void GpuHeap::get_on_stream(void* dst, const void* src, size_t n, int pe, void* stream, const char* caller) {
  check_peer(pe, caller);
  transport_->get_on_stream(pe, dst, RemoteRef{region_, offset_of(src, n, caller)}, n, stream);
}

void GpuHeap::put_sm_on_stream(void* dst, const void* src, size_t n, int pe, int blocks, void* stream,
                               const char* caller) {
  check_peer(pe, caller);
  offset_of(dst, n, caller);
  if (blocks < 0) raise(Status::kInvalidArgument, "%s: blocks must be >= 0, got %d", caller, blocks);
  CudaDeviceGuard guard(device_);
  gpu_kernels::launch_put_sm(device_state_ptr_, dst, src, n, pe, blocks ? blocks : 4 * sm_count_, stream);
}

void GpuHeap::put_signal_on_stream(void* dst, const void* src, size_t n, uint64_t* signal, uint64_t value, int sig_op,
                                   int pe, void* stream, const char* caller) {
  if (sig_op != 0 && sig_op != 1)
    raise(Status::kInvalidArgument, "%s: sig_op must be SIGNAL_SET (0) or SIGNAL_ADD (1), got %d", caller, sig_op);
  check_peer(pe, caller);
  size_t sig_off = offset_of(signal, 8, caller);
  if (sig_off % 8) raise(Status::kInvalidArgument, "%s: signal address %p is not 8-byte aligned", caller, signal);
  if (n) transport_->put_on_stream(pe, RemoteRef{region_, offset_of(dst, n, caller)}, src, n, stream);
  transport_->signal_on_stream(pe, RemoteRef{region_, sig_off}, value, static_cast<SignalOp>(sig_op), stream);
}

void GpuHeap::signal_wait_until_on_stream(uint64_t* signal, int cmp, uint64_t value, void* stream, const char* caller) {
  if (cmp < 0 || cmp > 5)
    raise(Status::kInvalidArgument, "%s: cmp must be a CMP_* constant (0..5), got %d", caller, cmp);
  size_t off = offset_of(signal, 8, caller);
  if (off % 8) raise(Status::kInvalidArgument, "%s: signal address %p is not 8-byte aligned", caller, signal);
  CudaDeviceGuard guard(device_);
  gpu_kernels::launch_wait(device_state_ptr_, signal, cmp, value, stream);
}

void GpuHeap::barrier_on_stream(void* stream) {
  for (int pe = 0; pe < n_pes_; ++pe) check_peer(pe, "shmem_barrier_on_stream");
  CudaDeviceGuard guard(device_);
  gpu_kernels::launch_barrier(device_state_ptr_, stream);
}

#else  // built without CUDA

bool GpuHeap::built_with_cuda() { return false; }
int GpuHeap::device_count() { return 0; }
int GpuHeap::pointer_device(const void*) { return -1; }

std::unique_ptr<GpuHeap> GpuHeap::create(Runtime& rt, int device, size_t) {
  raise(Status::kUnavailable, "PE %d was asked to bind CUDA device %d, but this MORI was built without CUDA",
        rt.my_pe(), device);
}
GpuHeap::~GpuHeap() = default;
[[noreturn]] static void no_cuda(const char* caller) {
  raise(Status::kUnavailable, "%s: this MORI was built without CUDA", caller);
}
void GpuHeap::put_on_stream(void*, const void*, size_t, int, void*, const char* caller) { no_cuda(caller); }
void GpuHeap::get_on_stream(void*, const void*, size_t, int, void*, const char* caller) { no_cuda(caller); }
void GpuHeap::put_sm_on_stream(void*, const void*, size_t, int, int, void*, const char* caller) { no_cuda(caller); }
void GpuHeap::put_signal_on_stream(void*, const void*, size_t, uint64_t*, uint64_t, int, int, void*,
                                   const char* caller) {
  no_cuda(caller);
}
void GpuHeap::signal_wait_until_on_stream(uint64_t*, int, uint64_t, void*, const char* caller) { no_cuda(caller); }
void GpuHeap::barrier_on_stream(void*) { no_cuda("shmem_barrier_on_stream"); }

#endif

}  // namespace mori::shmem
