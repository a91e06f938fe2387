// SPDX-License-Identifier: MIT
// Stream-ordered kernels of the GPU heap, written with the public device API
// (device.cuh) like any user kernel.
#include "mori/shmem/device.cuh"
#include "shmem/src/gpu_kernels.h"
#include "transports/cuda/cuda_check.h"

namespace mori::shmem::gpu_kernels {
namespace {

__global__ void barrier_kernel(const DeviceState* s) { dev::barrier_all_thread(*s); }

__global__ void wait_kernel(const DeviceState* s, uint64_t* signal, int cmp, uint64_t value) {
  dev::signal_wait_until(*s, signal, cmp, value);
}

// Each block copies one contiguous, 16-byte aligned share of the buffer.
__global__ void __launch_bounds__(512) put_sm_kernel(const DeviceState* s, char* dst, const char* src, size_t n, int pe) {
  size_t share = ((n + gridDim.x - 1) / gridDim.x + 15) / 16 * 16;
  size_t begin = static_cast<size_t>(blockIdx.x) * share;
  if (begin >= n) return;
  size_t len = n - begin < share ? n - begin : share;
  dev::putmem_block(*s, dst + begin, src + begin, len, pe);
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
  size_t max_blocks = (n + 4095) / 4096;  // at least 4 KiB per block
  if (static_cast<size_t>(blocks) > max_blocks) blocks = static_cast<int>(max_blocks);
  put_sm_kernel<<<blocks, 512, 0, static_cast<cudaStream_t>(stream)>>>(state, static_cast<char*>(dst_sym),
                                                                       static_cast<const char*>(src), n, pe);
  MORI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mori::shmem::gpu_kernels
