// SPDX-License-Identifier: MIT
// Device-side shmem API for CUDA kernels: RMA, signals, atomics, ordering and a
// barrier over the GPU symmetric heap, on peer-mapped (NVLink P2P) pointers.
//
//   #include <mori/shmem/device.cuh>
//   namespace msd = mori::shmem::dev;
//   __global__ void k(const mori::shmem::DeviceState* st, float* sym_buf, uint64_t* sym_flag, int n) {
//     int peer = (msd::my_pe(*st) + 1) % msd::n_pes(*st);
//     msd::putmem_signal_block(*st, sym_buf, local_src, n * sizeof(float), sym_flag, 1, msd::kSignalSet, peer);
//   }
//
// The state pointer comes from the host (mori.shmem.gpu.device_state_ptr(), or
// GpuHeap::device_state_ptr() in C++); it may also be passed by value. Symmetric
// addresses are this PE's own GPU-heap addresses (what shmem_malloc returned);
// every function translates them to `pe`'s copy.
//
// Memory model: puts are weak stores; `fence()`/`quiet()` are fence.sc at system
// scope; signals are release operations at system scope and signal waits are
// acquire loads at system scope, so a PE that sees a signal sees the data put
// before it. Group (warp/block) functions must be called by every thread of the
// group and end with a group synchronization.
#pragma once

#include <cuda/atomic>
#include <cstdint>
#include <cstdio>

#include "mori/shmem/device_state.h"

namespace mori::shmem::dev {

enum SignalOp : int { kSignalSet = 0, kSignalAdd = 1 };
// OpenSHMEM's SHMEM_CMP_* numbering.
enum Cmp : int { kCmpEq = 0, kCmpNe = 1, kCmpGt = 2, kCmpLe = 3, kCmpLt = 4, kCmpGe = 5 };

template <typename T>
using sys_atomic = cuda::atomic_ref<T, cuda::thread_scope_system>;

// ------------------------------------------------------------------ queries

__device__ __forceinline__ int my_pe(const DeviceState& s) { return s.my_pe; }
__device__ __forceinline__ int n_pes(const DeviceState& s) { return s.n_pes; }

// `sym`'s counterpart on `pe`, as this GPU can load/store it; nullptr if `pe` is not P2P-reachable.
template <typename T>
__device__ __forceinline__ T* ptr(const DeviceState& s, T* sym, int pe) {
  char* base = s.peer_base[pe];
  if (base == nullptr) return nullptr;
  const char* p = reinterpret_cast<const char*>(sym);
  return reinterpret_cast<T*>(base + (p - s.heap_base));
}

namespace detail {

__device__ __forceinline__ unsigned block_rank() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
__device__ __forceinline__ unsigned block_size() { return blockDim.x * blockDim.y * blockDim.z; }

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

template <typename T>
__device__ __forceinline__ T* peer_or_trap(const DeviceState& s, T* sym, int pe, const char* what) {
  if (pe < 0 || pe >= s.n_pes) {
    printf("mori device %s on PE %d: PE %d is out of range [0, %d)\n", what, s.my_pe, pe, s.n_pes);
    __trap();
  }
  T* p = ptr(s, sym, pe);
  if (p == nullptr) {
    printf("mori device %s on PE %d: PE %d is not reachable over P2P (peer pointer is null)\n", what, s.my_pe, pe);
    __trap();
  }
  return p;
}

// Vector loads and stores field by field: an aggregate copy of uint4 is a memcpy to clang, which
// leaves the unrolled registers on the stack and splits each 16-byte access in two once the
// function is inlined into a Triton kernel (MORI-IR); fields keep one 16-byte access on nvcc too.
__device__ __forceinline__ uint4 load_vector(const uint4* p) {
  uint4 v;
  v.x = p->x, v.y = p->y, v.z = p->z, v.w = p->w;
  return v;
}
__device__ __forceinline__ uint2 load_vector(const uint2* p) {
  uint2 v;
  v.x = p->x, v.y = p->y;
  return v;
}
__device__ __forceinline__ uint32_t load_vector(const uint32_t* p) { return *p; }
__device__ __forceinline__ void store_vector(uint4* p, uint4 v) { p->x = v.x, p->y = v.y, p->z = v.z, p->w = v.w; }
__device__ __forceinline__ void store_vector(uint2* p, uint2 v) { p->x = v.x, p->y = v.y; }
__device__ __forceinline__ void store_vector(uint32_t* p, uint32_t v) { *p = v; }

template <typename V>
__device__ __forceinline__ void copy_vectors(V* __restrict__ d, const V* __restrict__ src, size_t nv, size_t lane,
                                             size_t lanes) {
  // Four independent loads in flight before the stores: NVLink latency wants many requests outstanding.
  constexpr int kUnroll = 4;
  size_t i = lane;
  for (; i + (kUnroll - 1) * lanes < nv; i += kUnroll * lanes) {
    V r[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) r[u] = load_vector(src + i + u * lanes);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) store_vector(d + i + u * lanes, r[u]);
  }
  for (; i < nv; i += lanes) store_vector(d + i, load_vector(src + i));
}

// Copies n bytes, the work split over `lanes` cooperating threads; widest access both pointers allow.
__device__ __forceinline__ void copy_bytes(void* dst, const void* src, size_t n, size_t lane, size_t lanes) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  uintptr_t align = reinterpret_cast<uintptr_t>(d) | reinterpret_cast<uintptr_t>(s);
  size_t done = 0;
  if ((align & 15) == 0) {
    copy_vectors(reinterpret_cast<uint4*>(d), reinterpret_cast<const uint4*>(s), n / 16, lane, lanes);
    done = n / 16 * 16;
  } else if ((align & 7) == 0) {
    copy_vectors(reinterpret_cast<uint2*>(d), reinterpret_cast<const uint2*>(s), n / 8, lane, lanes);
    done = n / 8 * 8;
  } else if ((align & 3) == 0) {
    copy_vectors(reinterpret_cast<uint32_t*>(d), reinterpret_cast<const uint32_t*>(s), n / 4, lane, lanes);
    done = n / 4 * 4;
  }
  for (size_t i = done + lane; i < n; i += lanes) d[i] = s[i];
}

template <typename T>
__device__ __forceinline__ bool compare(T a, int cmp, T b) {
  switch (cmp) {
    case kCmpEq: return a == b;
    case kCmpNe: return a != b;
    case kCmpGt: return a > b;
    case kCmpLe: return a <= b;
    case kCmpLt: return a < b;
    default: return a >= b;
  }
}

__device__ __forceinline__ void signal_update(uint64_t* remote_sig, uint64_t value, int op) {
  sys_atomic<uint64_t> a(*remote_sig);
  if (op == kSignalAdd)
    a.fetch_add(value, cuda::memory_order_release);
  else
    a.store(value, cuda::memory_order_release);
}

}  // namespace detail

// ------------------------------------------------------------------ ordering

// Orders this thread's earlier puts/AMOs before its later ones, as seen by every PE.
__device__ __forceinline__ void fence() {
  cuda::atomic_thread_fence(cuda::memory_order_seq_cst, cuda::thread_scope_system);
}
// Completes this thread's earlier puts/AMOs: P2P stores are complete once fenced at system scope.
__device__ __forceinline__ void quiet() { fence(); }

// ------------------------------------------------------------------ put / get

// n bytes from local `src` (any device memory) to symmetric `dst` on `pe`. The source may be
// reused on return; remote visibility comes with fence/quiet or a following signal.
__device__ __forceinline__ void putmem_thread(const DeviceState& s, void* dst, const void* src, size_t n, int pe) {
  detail::copy_bytes(detail::peer_or_trap(s, dst, pe, "put"), src, n, 0, 1);
}
__device__ __forceinline__ void putmem_warp(const DeviceState& s, void* dst, const void* src, size_t n, int pe) {
  detail::copy_bytes(detail::peer_or_trap(s, dst, pe, "put"), src, n, detail::block_rank() & 31u, 32);
  __syncwarp();
}
__device__ __forceinline__ void putmem_block(const DeviceState& s, void* dst, const void* src, size_t n, int pe) {
  detail::copy_bytes(detail::peer_or_trap(s, dst, pe, "put"), src, n, detail::block_rank(), detail::block_size());
  __syncthreads();
}

// n bytes from symmetric `src` on `pe` into local `dst`; the data is in `dst` on return.
__device__ __forceinline__ void getmem_thread(const DeviceState& s, void* dst, const void* src, size_t n, int pe) {
  detail::copy_bytes(dst, detail::peer_or_trap(s, src, pe, "get"), n, 0, 1);
}
__device__ __forceinline__ void getmem_warp(const DeviceState& s, void* dst, const void* src, size_t n, int pe) {
  detail::copy_bytes(dst, detail::peer_or_trap(s, src, pe, "get"), n, detail::block_rank() & 31u, 32);
  __syncwarp();
}
__device__ __forceinline__ void getmem_block(const DeviceState& s, void* dst, const void* src, size_t n, int pe) {
  detail::copy_bytes(dst, detail::peer_or_trap(s, src, pe, "get"), n, detail::block_rank(), detail::block_size());
  __syncthreads();
}

// Typed single-element store / load.
template <typename T>
__device__ __forceinline__ void p(const DeviceState& s, T* dst, T value, int pe) {
  *reinterpret_cast<volatile T*>(detail::peer_or_trap(s, dst, pe, "p")) = value;
}
template <typename T>
__device__ __forceinline__ T g(const DeviceState& s, const T* src, int pe) {
  return *reinterpret_cast<const volatile T*>(detail::peer_or_trap(s, src, pe, "g"));
}

// ------------------------------------------------------------------ put with signal

// Put, then update the uint64 `sig` on `pe` (SET or ADD) with release semantics at system
// scope: a PE whose acquire (signal_wait_until) sees the update also sees the data.
__device__ __forceinline__ void putmem_signal_thread(const DeviceState& s, void* dst, const void* src, size_t n,
                                                     uint64_t* sig, uint64_t value, int op, int pe) {
  putmem_thread(s, dst, src, n, pe);
  detail::signal_update(detail::peer_or_trap(s, sig, pe, "signal"), value, op);
}
__device__ __forceinline__ void putmem_signal_warp(const DeviceState& s, void* dst, const void* src, size_t n,
                                                   uint64_t* sig, uint64_t value, int op, int pe) {
  putmem_warp(s, dst, src, n, pe);  // ends with __syncwarp: the lanes' stores happen before lane 0's release
  if ((detail::block_rank() & 31u) == 0) detail::signal_update(detail::peer_or_trap(s, sig, pe, "signal"), value, op);
  __syncwarp();
}
__device__ __forceinline__ void putmem_signal_block(const DeviceState& s, void* dst, const void* src, size_t n,
                                                    uint64_t* sig, uint64_t value, int op, int pe) {
  putmem_block(s, dst, src, n, pe);  // ends with __syncthreads
  if (detail::block_rank() == 0) detail::signal_update(detail::peer_or_trap(s, sig, pe, "signal"), value, op);
  __syncthreads();
}
// Signal alone (after the caller's own stores, e.g. a fused kernel writing through ptr()).
__device__ __forceinline__ void signal_op(const DeviceState& s, uint64_t* sig, uint64_t value, int op, int pe) {
  detail::signal_update(detail::peer_or_trap(s, sig, pe, "signal"), value, op);
}

// Waits (acquire, system scope) until the local `ivar` compares true against `value`; returns
// the value seen. Traps after s.timeout_ns (a peer that never signals must not hang the GPU forever).
template <typename T>
__device__ __forceinline__ T wait_until(const DeviceState& s, T* ivar, int cmp, T value) {
  sys_atomic<T> a(*ivar);
  T seen = a.load(cuda::memory_order_acquire);
  if (detail::compare(seen, cmp, value)) return seen;
  uint64_t start = detail::global_timer_ns();
  for (uint32_t polls = 1;; ++polls) {
    seen = a.load(cuda::memory_order_acquire);
    if (detail::compare(seen, cmp, value)) return seen;
    if ((polls & 1023u) == 0 && s.timeout_ns && detail::global_timer_ns() - start > s.timeout_ns) {
      printf("mori device wait on PE %d timed out after %llu s (value %llu, waiting for cmp %d %llu)\n", s.my_pe,
             static_cast<unsigned long long>(s.timeout_ns / 1000000000ull), static_cast<unsigned long long>(seen), cmp,
             static_cast<unsigned long long>(value));
      __trap();
    }
  }
}
__device__ __forceinline__ uint64_t signal_wait_until(const DeviceState& s, uint64_t* sig, int cmp, uint64_t value) {
  return wait_until<uint64_t>(s, sig, cmp, value);
}

// ------------------------------------------------------------------ atomics (system scope, relaxed)
// T: int32_t, uint32_t, int64_t/long long, uint64_t/unsigned long long.

template <typename T>
__device__ __forceinline__ T atomic_fetch(const DeviceState& s, T* target, int pe) {
  return sys_atomic<T>(*detail::peer_or_trap(s, target, pe, "atomic")).load(cuda::memory_order_relaxed);
}
template <typename T>
__device__ __forceinline__ void atomic_set(const DeviceState& s, T* target, T value, int pe) {
  sys_atomic<T>(*detail::peer_or_trap(s, target, pe, "atomic")).store(value, cuda::memory_order_relaxed);
}
template <typename T>
__device__ __forceinline__ T atomic_swap(const DeviceState& s, T* target, T value, int pe) {
  return sys_atomic<T>(*detail::peer_or_trap(s, target, pe, "atomic")).exchange(value, cuda::memory_order_relaxed);
}
template <typename T>
__device__ __forceinline__ T atomic_compare_swap(const DeviceState& s, T* target, T cond, T value, int pe) {
  sys_atomic<T>(*detail::peer_or_trap(s, target, pe, "atomic"))
      .compare_exchange_strong(cond, value, cuda::memory_order_relaxed);
  return cond;  // the old value, whether or not the swap happened
}
template <typename T>
__device__ __forceinline__ T atomic_fetch_add(const DeviceState& s, T* target, T value, int pe) {
  return sys_atomic<T>(*detail::peer_or_trap(s, target, pe, "atomic")).fetch_add(value, cuda::memory_order_relaxed);
}
template <typename T>
__device__ __forceinline__ void atomic_add(const DeviceState& s, T* target, T value, int pe) {
  atomic_fetch_add(s, target, value, pe);
}
template <typename T>
__device__ __forceinline__ T atomic_fetch_inc(const DeviceState& s, T* target, int pe) {
  return atomic_fetch_add(s, target, T(1), pe);
}
template <typename T>
__device__ __forceinline__ void atomic_inc(const DeviceState& s, T* target, int pe) {
  atomic_fetch_add(s, target, T(1), pe);
}
template <typename T>
__device__ __forceinline__ T atomic_fetch_and(const DeviceState& s, T* target, T value, int pe) {
  return sys_atomic<T>(*detail::peer_or_trap(s, target, pe, "atomic")).fetch_and(value, cuda::memory_order_relaxed);
}
template <typename T>
__device__ __forceinline__ T atomic_fetch_or(const DeviceState& s, T* target, T value, int pe) {
  return sys_atomic<T>(*detail::peer_or_trap(s, target, pe, "atomic")).fetch_or(value, cuda::memory_order_relaxed);
}
template <typename T>
__device__ __forceinline__ T atomic_fetch_xor(const DeviceState& s, T* target, T value, int pe) {
  return sys_atomic<T>(*detail::peer_or_trap(s, target, pe, "atomic")).fetch_xor(value, cuda::memory_order_relaxed);
}

// ------------------------------------------------------------------ barrier

// Barrier over all PEs, called by ONE thread of each PE (per barrier): completes this
// thread's puts (quiet), tells every peer "arrived at epoch e" with a release store into
// its flag array, and waits (acquire) for every peer's flag to reach e. Every PE must be
// P2P-reachable. Epochs only grow, so the flags never need resetting (graph replays too).
__device__ __forceinline__ void barrier_all_thread(const DeviceState& s) {
  quiet();
  uint64_t epoch = *s.barrier_epoch + 1;
  *s.barrier_epoch = epoch;
  for (int i = 1; i < s.n_pes; ++i) {
    int pe = (s.my_pe + i) % s.n_pes;
    uint64_t* flag = detail::peer_or_trap(s, s.sync_flags + s.my_pe, pe, "barrier");
    sys_atomic<uint64_t>(*flag).store(epoch, cuda::memory_order_release);
  }
  for (int i = 1; i < s.n_pes; ++i) {
    int pe = (s.my_pe + i) % s.n_pes;
    wait_until<uint64_t>(s, s.sync_flags + pe, kCmpGe, epoch);
  }
}
// Block-wide: the block's earlier stores are ordered before the barrier (__syncthreads, then
// thread 0's system-scope fence and release). One block per PE calls it.
__device__ __forceinline__ void barrier_all_block(const DeviceState& s) {
  __syncthreads();
  if (detail::block_rank() == 0) barrier_all_thread(s);
  __syncthreads();
}

}  // namespace mori::shmem::dev
