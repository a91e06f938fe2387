// SPDX-License-Identifier: MIT
// Kernels over the public device API (mori/shmem/device.cuh), built into their own
// library the way a user's extension would be: they know the heap only through the
// DeviceState pointer the host hands them. The GPU tests (tests/gpu) and the GPU
// benchmark (apps/bench/shmem_gpu.py) call them through ctypes (mori.shmem.selftest).
// Every launcher returns the cudaError_t of the launch.
#include <cuda_runtime.h>

#include <cstdint>

#include "mori/shmem/device.cuh"

using mori::shmem::DeviceState;
namespace dev = mori::shmem::dev;

namespace {

enum Scope : int { kThread = 0, kWarp = 1, kBlock = 2 };

__device__ __forceinline__ uint64_t pattern(uint64_t round, uint64_t i) {
  return (round * 0x9E3779B97F4A7C15ull) ^ (i * 0xBF58476D1CE4E5B9ull) ^ 0x5555;
}

// Each block moves one contiguous share of n bytes with the given scope.
__global__ void put_kernel(const DeviceState* s, int scope, char* dst, const char* src, size_t n, int pe) {
  size_t share = (n + gridDim.x - 1) / gridDim.x;
  size_t begin = static_cast<size_t>(blockIdx.x) * share;
  if (begin >= n) return;
  size_t len = n - begin < share ? n - begin : share;
  if (scope == kThread) {
    if (threadIdx.x == 0) dev::putmem_thread(*s, dst + begin, src + begin, len, pe);
  } else if (scope == kWarp) {
    if (threadIdx.x < 32) dev::putmem_warp(*s, dst + begin, src + begin, len, pe);
  } else {
    dev::putmem_block(*s, dst + begin, src + begin, len, pe);
  }
}

// Each block puts one contiguous share of n bytes with putmem_signal_block, ADDing 1 to `sig` on pe
// (the CUDA C++ side of `mori bench ir`'s put-with-signal: one signal per block, like Triton's).
__global__ void put_signal_kernel(const DeviceState* s, char* dst, const char* src, size_t n, uint64_t* sig, int pe) {
  size_t share = (n + gridDim.x - 1) / gridDim.x;
  size_t begin = static_cast<size_t>(blockIdx.x) * share;
  if (begin >= n) return;
  size_t len = n - begin < share ? n - begin : share;
  dev::putmem_signal_block(*s, dst + begin, src + begin, len, sig, 1, dev::kSignalAdd, pe);
}

__global__ void get_kernel(const DeviceState* s, int scope, char* dst, const char* src, size_t n, int pe) {
  size_t share = (n + gridDim.x - 1) / gridDim.x;
  size_t begin = static_cast<size_t>(blockIdx.x) * share;
  if (begin >= n) return;
  size_t len = n - begin < share ? n - begin : share;
  if (scope == kThread) {
    if (threadIdx.x == 0) dev::getmem_thread(*s, dst + begin, src + begin, len, pe);
  } else if (scope == kWarp) {
    if (threadIdx.x < 32) dev::getmem_warp(*s, dst + begin, src + begin, len, pe);
  } else {
    dev::getmem_block(*s, dst + begin, src + begin, len, pe);
  }
}

// Thread i stores values[i] into dst[i] on pe with p().
__global__ void p_kernel(const DeviceState* s, int64_t* dst, const int64_t* values, int count, int pe) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) dev::p<int64_t>(*s, dst + i, values[i], pe);
}

// Thread i loads src[i] from pe with g().
__global__ void g_kernel(const DeviceState* s, int64_t* out, const int64_t* src, int count, int pe) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) out[i] = dev::g<int64_t>(*s, src + i, pe);
}

// Contention from every thread of the grid, on both GPUs at once:
//   add64 on PE 0, add32 on PE n-1, fetch_add tickets on PE (thread + iteration) % n (recorded),
//   and, in the first two iterations, one compare-swap increment loop per block on PE 0.
__global__ void atomics_kernel(const DeviceState* s, unsigned long long* add64, unsigned int* add32,
                               unsigned long long* tickets, unsigned long long* cas, unsigned long long* out,
                               int iters) {
  const int n = s->n_pes;
  const unsigned long long tid = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
  for (int it = 0; it < iters; ++it) {
    dev::atomic_add<unsigned long long>(*s, add64, 1ull, 0);
    dev::atomic_inc<unsigned int>(*s, add32, n - 1);
    int pe = static_cast<int>((tid + it) % n);
    unsigned long long t = dev::atomic_fetch_add<unsigned long long>(*s, tickets, 1ull, pe);
    out[tid * iters + it] = t;
    if (threadIdx.x == 0 && it < 2) {
      unsigned long long seen = dev::atomic_fetch<unsigned long long>(*s, cas, 0);
      for (;;) {
        unsigned long long old = dev::atomic_compare_swap<unsigned long long>(*s, cas, seen, seen + 1, 0);
        if (old == seen) break;
        seen = old;
      }
    }
  }
}

// Signal ordering: the producer writes a fresh pattern into its local staging buffer, puts it with
// a signal (SET r on even rounds, ADD 1 on odd ones: the signal reads r after round r either way)
// and waits for the consumer's ack; the consumer waits for the signal, checks every word, acks.
__global__ void signal_rounds_kernel(const DeviceState* s, int role, int scope, uint64_t* buf, uint64_t* staging,
                                     size_t words, uint64_t* sig, uint64_t* ack, int rounds, int peer,
                                     unsigned long long* errors) {
  const unsigned lanes = scope == kThread ? 1 : (scope == kWarp ? 32 : blockDim.x);
  if (threadIdx.x >= lanes) return;
  for (uint64_t r = 1; r <= static_cast<uint64_t>(rounds); ++r) {
    int op = (r & 1) ? dev::kSignalAdd : dev::kSignalSet;
    uint64_t value = (r & 1) ? 1 : r;
    if (role == 0) {
      for (size_t i = threadIdx.x; i < words; i += lanes) staging[i] = pattern(r, i);
      if (scope == kThread) {
        dev::putmem_signal_thread(*s, buf, staging, words * 8, sig, value, op, peer);
        dev::signal_wait_until(*s, ack, dev::kCmpGe, r);
      } else if (scope == kWarp) {
        __syncwarp();
        dev::putmem_signal_warp(*s, buf, staging, words * 8, sig, value, op, peer);
        if (threadIdx.x == 0) dev::signal_wait_until(*s, ack, dev::kCmpGe, r);
        __syncwarp();
      } else {
        __syncthreads();
        dev::putmem_signal_block(*s, buf, staging, words * 8, sig, value, op, peer);
        if (threadIdx.x == 0) dev::signal_wait_until(*s, ack, dev::kCmpGe, r);
        __syncthreads();
      }
    } else {
      if (threadIdx.x == 0) dev::signal_wait_until(*s, sig, dev::kCmpGe, r);
      if (scope == kWarp) __syncwarp();
      if (scope == kBlock) __syncthreads();
      unsigned long long bad = 0;
      // Volatile: each round must really read the buffer again.
      const volatile uint64_t* vb = buf;
      for (size_t i = threadIdx.x; i < words; i += lanes) bad += vb[i] != pattern(r, i);
      if (bad) atomicAdd(errors, bad);
      if (scope == kWarp) __syncwarp();
      if (scope == kBlock) __syncthreads();
      if (threadIdx.x == 0) dev::signal_op(*s, ack, r, dev::kSignalSet, peer);
    }
  }
}

// Round trip of an 8-byte put with signal: the initiator puts i and signals i, the responder
// waits for it, checks the payload and answers the same way. out[0] = ns per round trip
// (rounds after the first), out[1] = payload mismatches.
__global__ void pingpong_kernel(const DeviceState* s, int role, uint64_t* data, uint64_t* sig, int iters, int peer,
                                unsigned long long* out) {
  unsigned long long start = 0, bad = 0;
  for (uint64_t i = 1; i <= static_cast<uint64_t>(iters); ++i) {
    if (role == 0) {
      if (i == 2) start = dev::detail::global_timer_ns();
      dev::putmem_signal_thread(*s, data, &i, 8, sig, i, dev::kSignalSet, peer);
      dev::signal_wait_until(*s, sig, dev::kCmpGe, i);
      bad += *reinterpret_cast<volatile uint64_t*>(data) != i;
    } else {
      dev::signal_wait_until(*s, sig, dev::kCmpGe, i);
      bad += *reinterpret_cast<volatile uint64_t*>(data) != i;
      dev::putmem_signal_thread(*s, data, &i, 8, sig, i, dev::kSignalSet, peer);
    }
  }
  if (role == 0 && iters > 1) out[0] = (dev::detail::global_timer_ns() - start) / (iters - 1);
  out[1] = bad;
}

// One block: every thread stores into the peer, then a block barrier; afterwards the block reads
// what the peer stored into this PE (device-initiated barrier_all_block).
__global__ void barrier_block_kernel(const DeviceState* s, uint64_t* sym, uint64_t* out, int words, int peer,
                                     uint64_t round) {
  for (int i = threadIdx.x; i < words; i += blockDim.x) dev::p<uint64_t>(*s, sym + i, pattern(round + s->my_pe, i), peer);
  dev::barrier_all_block(*s);
  for (int i = threadIdx.x; i < words; i += blockDim.x) out[i] = *reinterpret_cast<volatile uint64_t*>(sym + i);
}

cudaStream_t st(void* s) { return static_cast<cudaStream_t>(s); }

}  // namespace

extern "C" {

int mori_selftest_put(const DeviceState* s, int scope, void* dst, const void* src, size_t n, int pe, int blocks,
                      int threads, void* stream) {
  put_kernel<<<blocks, threads, 0, st(stream)>>>(s, scope, static_cast<char*>(dst), static_cast<const char*>(src), n, pe);
  return cudaGetLastError();
}

int mori_selftest_put_signal(const DeviceState* s, void* dst, const void* src, size_t n, uint64_t* sig, int pe,
                             int blocks, int threads, void* stream) {
  put_signal_kernel<<<blocks, threads, 0, st(stream)>>>(s, static_cast<char*>(dst), static_cast<const char*>(src), n,
                                                        sig, pe);
  return cudaGetLastError();
}

int mori_selftest_get(const DeviceState* s, int scope, void* dst, const void* src, size_t n, int pe, int blocks,
                      int threads, void* stream) {
  get_kernel<<<blocks, threads, 0, st(stream)>>>(s, scope, static_cast<char*>(dst), static_cast<const char*>(src), n, pe);
  return cudaGetLastError();
}

int mori_selftest_p(const DeviceState* s, int64_t* dst, const int64_t* values, int count, int pe, void* stream) {
  p_kernel<<<(count + 255) / 256, 256, 0, st(stream)>>>(s, dst, values, count, pe);
  return cudaGetLastError();
}

int mori_selftest_g(const DeviceState* s, int64_t* out, const int64_t* src, int count, int pe, void* stream) {
  g_kernel<<<(count + 255) / 256, 256, 0, st(stream)>>>(s, out, src, count, pe);
  return cudaGetLastError();
}

int mori_selftest_atomics(const DeviceState* s, void* add64, void* add32, void* tickets, void* cas, void* out,
                          int iters, int blocks, int threads, void* stream) {
  atomics_kernel<<<blocks, threads, 0, st(stream)>>>(
      s, static_cast<unsigned long long*>(add64), static_cast<unsigned int*>(add32),
      static_cast<unsigned long long*>(tickets), static_cast<unsigned long long*>(cas),
      static_cast<unsigned long long*>(out), iters);
  return cudaGetLastError();
}

int mori_selftest_signal_rounds(const DeviceState* s, int role, int scope, void* buf, void* staging, size_t words,
                                void* sig, void* ack, int rounds, int peer, void* errors, void* stream) {
  int threads = scope == kThread ? 1 : (scope == kWarp ? 32 : 256);
  signal_rounds_kernel<<<1, threads, 0, st(stream)>>>(
      s, role, scope, static_cast<uint64_t*>(buf), static_cast<uint64_t*>(staging), words, static_cast<uint64_t*>(sig),
      static_cast<uint64_t*>(ack), rounds, peer, static_cast<unsigned long long*>(errors));
  return cudaGetLastError();
}

int mori_selftest_pingpong(const DeviceState* s, int role, void* data, void* sig, int iters, int peer, void* out,
                           void* stream) {
  pingpong_kernel<<<1, 1, 0, st(stream)>>>(s, role, static_cast<uint64_t*>(data), static_cast<uint64_t*>(sig), iters,
                                           peer, static_cast<unsigned long long*>(out));
  return cudaGetLastError();
}

int mori_selftest_barrier_block(const DeviceState* s, void* sym, void* out, int words, int peer, uint64_t round,
                                void* stream) {
  barrier_block_kernel<<<1, 256, 0, st(stream)>>>(s, static_cast<uint64_t*>(sym), static_cast<uint64_t*>(out), words,
                                                  peer, round);
  return cudaGetLastError();
}

// Host-side reference of the pattern the signal test writes (for checks in Python).
uint64_t mori_selftest_pattern(uint64_t round, uint64_t i) {
  return (round * 0x9E3779B97F4A7C15ull) ^ (i * 0xBF58476D1CE4E5B9ull) ^ 0x5555;
}

}  // extern "C"
