// SPDX-License-Identifier: MIT
// Stream-ordered kernels of the GPU heap, written with the public device API
// (device.cuh) like any user kernel.
#include "mori/core/cuda_check.h"
#include "mori/shmem/device.cuh"
#include "src/gpu_kernels.h"

namespace mori::shmem::gpu_kernels {
namespace {

__global__ void barrier_kernel(const DeviceState* s) { dev::barrier_all_thread(*s); }

__global__ void wait_kernel(const DeviceState* s, uint64_t* signal, int cmp, uint64_t value) {
  dev::signal_wait_until(*s, signal, cmp, value);
}

// The whole grid strides over the buffer (thread t copies 16-byte pieces t, t + T, ...), so
// every wave of stores covers one contiguous stretch of the peer's memory.
__global__ void __launch_bounds__(512, 4)
    put_sm_kernel(const DeviceState* s, char* dst, const char* src, size_t n, int pe) {
  size_t lanes = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t lane = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  dev::detail::copy_bytes(dev::detail::peer_or_trap(*s, dst, pe, "put"), src, n, lane, lanes);
}

}  // namespace

void launch_barrier(const DeviceState* state, void* stream) {
  barrier_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(state);
  MORI_CUDA_CHECK(cudaGetLastError());
}

void launch_wait(const DeviceState* state, uint64_t* signal, int cmp, uint64_t value, void* stream) {
  wait_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(state, signal, cmp, value);
  MORI_CUDA_CHECK(cudaGetLastError());
}

void launch_put_sm(const DeviceState* state, void* dst_sym, const void* src, size_t n, int pe, int blocks,
                   void* stream) {
  if (n == 0) return;
  size_t max_blocks = (n + 8191) / 8192;  // at least 8 KiB per block
  if (static_cast<size_t>(blocks) > max_blocks) blocks = static_cast<int>(max_blocks);
  put_sm_kernel<<<blocks, 512, 0, static_cast<cudaStream_t>(stream)>>>(state, static_cast<char*>(dst_sym),
                                                                       static_cast<const char*>(src), n, pe);
  MORI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mori::shmem::gpu_kernels
