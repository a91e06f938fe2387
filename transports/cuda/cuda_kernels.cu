// SPDX-License-Identifier: MIT
// The cuda transport's kernels: one-thread AMOs and signal updates on peer-mapped
// memory. Host-initiated atomics need an SM because copy engines do not do atomics.
#include <cuda/atomic>

#include "mori/core/status.h"
#include "mori/core/cuda_check.h"
#include "transports/cuda/cuda_kernels.h"

namespace mori::cuda_kernels {
namespace {

template <typename T>
__device__ T amo(T* p, AmoOp op, T v, T cmp) {
  cuda::atomic_ref<T, cuda::thread_scope_system> a(*p);
  // acq_rel: a host-initiated AMO also orders the transport's earlier copies (stream order
  // already completed them) before later observers of the word.
  switch (op) {
    case AmoOp::kFetch: return a.load(cuda::memory_order_acquire);
    case AmoOp::kSet: a.store(v, cuda::memory_order_release); return 0;
    case AmoOp::kSwap: return a.exchange(v, cuda::memory_order_acq_rel);
    case AmoOp::kCompareSwap: a.compare_exchange_strong(cmp, v, cuda::memory_order_acq_rel); return cmp;
    case AmoOp::kAdd:
    case AmoOp::kFetchAdd: return a.fetch_add(v, cuda::memory_order_acq_rel);
    case AmoOp::kAnd:
    case AmoOp::kFetchAnd: return a.fetch_and(v, cuda::memory_order_acq_rel);
    case AmoOp::kOr:
    case AmoOp::kFetchOr: return a.fetch_or(v, cuda::memory_order_acq_rel);
    case AmoOp::kXor:
    case AmoOp::kFetchXor: return a.fetch_xor(v, cuda::memory_order_acq_rel);
  }
  return 0;
}

__global__ void amo_kernel(void* addr, AmoOp op, int width, uint64_t operand, uint64_t compare, uint64_t* result) {
  uint64_t old;
  if (width == 8)
    old = amo<unsigned long long>(static_cast<unsigned long long*>(addr), op, operand, compare);
  else
    old = amo<unsigned int>(static_cast<unsigned int*>(addr), op, static_cast<unsigned int>(operand),
                            static_cast<unsigned int>(compare));
  *reinterpret_cast<volatile uint64_t*>(result) = old;
}

__global__ void signal_kernel(unsigned long long* addr, uint64_t value, SignalOp op) {
  cuda::atomic_ref<unsigned long long, cuda::thread_scope_system> a(*addr);
  if (op == SignalOp::kAdd)
    a.fetch_add(value, cuda::memory_order_release);
  else
    a.store(value, cuda::memory_order_release);
}

}  // namespace

void launch_amo(void* addr, AmoOp op, int width, uint64_t operand, uint64_t compare, uint64_t* result, void* stream) {
  if (width != 4 && width != 8) raise(Status::kInvalidArgument, "atomic width must be 4 or 8 bytes, got %d", width);
  amo_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(addr, op, width, operand, compare, result);
  MORI_CUDA_CHECK(cudaGetLastError());
}

void launch_signal(uint64_t* addr, uint64_t value, SignalOp op, void* stream) {
  signal_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(reinterpret_cast<unsigned long long*>(addr), value, op);
  MORI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mori::cuda_kernels
