// SPDX-License-Identifier: MIT
// Kernels over the public device API (mori/shmem/device.cuh), built into their own
// library the way a user's extension would be: they know the heap only through the
// DeviceState pointer the host hands them. The GPU tests (tests/gpu) and the GPU
// benchmark (apps/bench/shmem_gpu.py) call them through ctypes (mori.shmem.selftest).
// Every launcher returns the cudaError_t of the launch.
#include <cuda_bf16.h>
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
  for (int i = threadIdx.x; i < words; i += blockDim.x)
    dev::p<uint64_t>(*s, sym + i, pattern(round + s->my_pe, i), peer);
  dev::barrier_all_block(*s);
  for (int i = threadIdx.x; i < words; i += blockDim.x) out[i] = *reinterpret_cast<volatile uint64_t*>(sym + i);
}

// ------------------------------------------------------------------ bf16 all-reduces
// The CUDA C++ side of `mori bench ir`'s all-reduce rows: the same algorithms, grid split, element
// mapping and signalling as the Triton kernels of apps/bench/ir_kernels.py (read them side by
// side), so that a time ratio between the two measures the bitcode path, not a different kernel.
// Triton's BLOCK = 2048 with num_warps = 8 gives each of 256 threads 8 contiguous elements per
// step; here a step is 8 * blockDim.x elements, thread t owning [8t, 8t + 8). Sums are in fp32,
// stored rounded to nearest even. Every thread waits on a signal (as every thread of a Triton
// program runs a scalar call); a signal after the block's own reads is sent by thread 0 after
// __syncthreads (the Triton kernels guard theirs the same way).

constexpr int kElems = 8;  // bf16 elements per thread and step: one 16-byte access when aligned

// Loads up to 8 elements at p (count of them valid) as floats, 0 past the end. `fresh`: the
// buffer is written by peers during the kernel, so every load goes to memory (Triton's
// volatile=True loads: ld.volatile).
__device__ __forceinline__ void load8(const __nv_bfloat16* p, int64_t valid, bool fresh, float* f) {
  if (valid >= kElems && (reinterpret_cast<uintptr_t>(p) & 15) == 0) {
    uint4 v;
    if (fresh) {
      // "memory": never moved above the signal wait (an acquire) that made the peer's data visible
      asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "l"(p)
                   : "memory");
    } else {
      v = *reinterpret_cast<const uint4*>(p);
    }
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < kElems / 2; ++i) {
      float2 two = __bfloat1622float2(h[i]);
      f[2 * i] = two.x, f[2 * i + 1] = two.y;
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < kElems; ++i) {
    if (i < valid) {
      unsigned short bits = fresh ? *reinterpret_cast<const volatile unsigned short*>(p + i)
                                  : *reinterpret_cast<const unsigned short*>(p + i);
      f[i] = __bfloat162float(__ushort_as_bfloat16(bits));
    } else {
      f[i] = 0.f;
    }
  }
}

// Stores the first `valid` (at most 8) of f at p as bf16.
__device__ __forceinline__ void store8(__nv_bfloat16* p, int64_t valid, const float* f) {
  if (valid >= kElems && (reinterpret_cast<uintptr_t>(p) & 15) == 0) {
    uint4 v;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < kElems / 2; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    *reinterpret_cast<uint4*>(p) = v;
    return;
  }
#pragma unroll
  for (int i = 0; i < kElems; ++i)
    if (i < valid) p[i] = __float2bfloat16_rn(f[i]);
}

template <int NPES>
__device__ __forceinline__ void check_npes(const DeviceState* s, const char* what) {
  if (s->n_pes != NPES) {
    printf("mori selftest %s on PE %d: launched for %d PEs, the job has %d\n", what, s->my_pe, NPES, s->n_pes);
    __trap();
  }
}

// One block per PE: barrier, put my n elements into slot `me` of every peer's `gather` with an ADD
// to its `sig`, wait until every peer's put of this epoch landed (sig > epoch * (NPES - 1) - 1),
// sum my data and the peers' slots. `epoch` counts calls from 1; the opening barrier keeps a fast
// PE's next call from overwriting a slot a slow PE is still reading.
template <int NPES>
__global__ void oneshot_allreduce_kernel(const DeviceState* s, const __nv_bfloat16* data, __nv_bfloat16* gather,
                                         uint64_t* sig, __nv_bfloat16* out, uint64_t epoch, int64_t n) {
  check_npes<NPES>(s, "one-shot all-reduce");
  const int me = s->my_pe;
  dev::barrier_all_block(*s);
  const size_t nbytes = static_cast<size_t>(n) * sizeof(__nv_bfloat16);
#pragma unroll
  for (int i = 1; i < NPES; ++i)
    dev::putmem_signal_block(*s, gather + me * n, data, nbytes, sig, 1, dev::kSignalAdd, (me + i) % NPES);
  dev::wait_until<uint64_t>(*s, sig, dev::kCmpGt, epoch * (NPES - 1) - 1);
  const int64_t step = static_cast<int64_t>(kElems) * blockDim.x;
  for (int64_t start = 0; start < n; start += step) {
    const int64_t i = start + static_cast<int64_t>(kElems) * threadIdx.x;
    if (i >= n) continue;
    float acc[kElems], v[kElems];
    load8(data + i, n - i, false, acc);  // my own chunk, never put
#pragma unroll
    for (int p = 0; p < NPES; ++p) {
      if (p == me) continue;
      load8(gather + p * n + i, n - i, true, v);
#pragma unroll
      for (int e = 0; e < kElems; ++e) acc[e] += v[e];
    }
    store8(out + i, n - i, acc);
  }
}

// Element range [lo, hi) of chunk c that block `pid` owns (hi <= lo when empty).
__device__ __forceinline__ void ring_stripe(int64_t c, int64_t chunk, int64_t stripe, int64_t pid, int64_t n,
                                            int64_t* lo, int64_t* hi) {
  *lo = c * chunk + pid * stripe;
  int64_t h = *lo + stripe;
  if (h > (c + 1) * chunk) h = (c + 1) * chunk;
  if (h > n) h = n;
  *hi = h;
}

// Ring all-reduce of n elements: NPES-1 reduce-scatter steps (put my partial chunk into the right
// neighbour's `rs` with an ADD to its sig[pid]; when the left one's arrives, add it to my data into
// `work`), then NPES-1 all-gather steps (forward the reduced chunks into the right neighbour's `ag`).
// Chunks and stripes are whole multiples of 8 elements (the last ones shorter or empty), so every
// stripe starts 16-byte aligned. Each chunk is split into one stripe per block, each block with its
// own signal sig[pid] and ack ack[pid] (symmetric uint64, zero before the first call; `epoch` counts calls from 1). A
// block writes into its right neighbour only after that neighbour acknowledged the previous epoch.
template <int NPES>
__global__ void ring_allreduce_kernel(const DeviceState* s, const __nv_bfloat16* data, __nv_bfloat16* work,
                                      __nv_bfloat16* rs, __nv_bfloat16* ag, uint64_t* sig, uint64_t* ack,
                                      __nv_bfloat16* out, uint64_t epoch, int64_t n) {
  check_npes<NPES>(s, "ring all-reduce");
  const int64_t pid = blockIdx.x;
  const int me = s->my_pe, right = (me + 1) % NPES, left = (me + NPES - 1) % NPES;
  // chunks and stripes in whole 8-element (16-byte) units: every stripe starts 16-byte aligned
  const int64_t chunk = ((n + NPES - 1) / NPES + kElems - 1) & ~int64_t{kElems - 1};
  const int64_t stripe = ((chunk + gridDim.x - 1) / gridDim.x + kElems - 1) & ~int64_t{kElems - 1};
  const uint64_t base = (epoch - 1) * 2 * (NPES - 1);
  const int64_t step = static_cast<int64_t>(kElems) * blockDim.x, mine = static_cast<int64_t>(kElems) * threadIdx.x;
  int64_t lo, hi;
  dev::wait_until<uint64_t>(*s, ack + pid, dev::kCmpGe, epoch - 1);  // the right neighbour is done with the last call
  // reduce-scatter
#pragma unroll
  for (int k = 0; k < NPES - 1; ++k) {
    ring_stripe((me - k + NPES) % NPES, chunk, stripe, pid, n, &lo, &hi);
    size_t nbytes = static_cast<size_t>(hi > lo ? hi - lo : 0) * sizeof(__nv_bfloat16);
    if (k == 0) {
      dev::putmem_signal_block(*s, rs + lo, data + lo, nbytes, sig + pid, 1, dev::kSignalAdd, right);
    } else {
      __syncthreads();  // every thread's adds into work are in before the block's put reads them
      dev::putmem_signal_block(*s, rs + lo, work + lo, nbytes, sig + pid, 1, dev::kSignalAdd, right);
    }
    dev::wait_until<uint64_t>(*s, sig + pid, dev::kCmpGe, base + k + 1);
    ring_stripe((me - k - 1 + 2 * NPES) % NPES, chunk, stripe, pid, n, &lo, &hi);
    for (int64_t start = lo; start < hi; start += step) {
      const int64_t i = start + mine;
      if (i >= hi) continue;
      float acc[kElems], v[kElems];
      load8(data + i, hi - i, false, acc);
      load8(rs + i, hi - i, true, v);
#pragma unroll
      for (int e = 0; e < kElems; ++e) acc[e] += v[e];
      store8(work + i, hi - i, acc);
    }
  }
  // all-gather: work holds the reduced chunk me+1; the others arrive in ag
  __syncthreads();
#pragma unroll
  for (int k = 0; k < NPES - 1; ++k) {
    ring_stripe((me + 1 - k + NPES) % NPES, chunk, stripe, pid, n, &lo, &hi);
    size_t nbytes = static_cast<size_t>(hi > lo ? hi - lo : 0) * sizeof(__nv_bfloat16);
    dev::putmem_signal_block(*s, ag + lo, k == 0 ? work + lo : ag + lo, nbytes, sig + pid, 1, dev::kSignalAdd, right);
    dev::wait_until<uint64_t>(*s, sig + pid, dev::kCmpGe, base + NPES + k);
  }
#pragma unroll
  for (int c = 0; c < NPES; ++c) {
    ring_stripe(c, chunk, stripe, pid, n, &lo, &hi);
    const bool reduced_here = c == (me + 1) % NPES;
    for (int64_t start = lo; start < hi; start += step) {
      const int64_t i = start + mine;
      if (i >= hi) continue;
      float v[kElems];
      if (reduced_here)
        load8(work + i, hi - i, false, v);
      else
        load8(ag + i, hi - i, true, v);
      store8(out + i, hi - i, v);
    }
  }
  __syncthreads();  // every thread read its rs/ag before the left neighbour may write them again
  if (threadIdx.x == 0) dev::signal_op(*s, ack + pid, epoch, dev::kSignalSet, left);
}

// Launches kernel<NPES> for npes in [2, 8]; cudaErrorInvalidValue for any other count.
template <template <int> class Launch, typename... Args>
int launch_for_npes(int npes, Args... args) {
  switch (npes) {
    case 2: return Launch<2>::run(args...);
    case 3: return Launch<3>::run(args...);
    case 4: return Launch<4>::run(args...);
    case 5: return Launch<5>::run(args...);
    case 6: return Launch<6>::run(args...);
    case 7: return Launch<7>::run(args...);
    case 8: return Launch<8>::run(args...);
    default: return cudaErrorInvalidValue;
  }
}

template <int NPES>
struct OneshotLaunch {
  static int run(const DeviceState* s, const void* data, void* gather, void* sig, void* out, uint64_t epoch, int64_t n,
                 int threads, cudaStream_t stream) {
    oneshot_allreduce_kernel<NPES>
        <<<1, threads, 0, stream>>>(s, static_cast<const __nv_bfloat16*>(data), static_cast<__nv_bfloat16*>(gather),
                                    static_cast<uint64_t*>(sig), static_cast<__nv_bfloat16*>(out), epoch, n);
    return cudaGetLastError();
  }
};

template <int NPES>
struct RingLaunch {
  static int run(const DeviceState* s, const void* data, void* work, void* rs, void* ag, void* sig, void* ack,
                 void* out, uint64_t epoch, int64_t n, int blocks, int threads, cudaStream_t stream) {
    ring_allreduce_kernel<NPES><<<blocks, threads, 0, stream>>>(
        s, static_cast<const __nv_bfloat16*>(data), static_cast<__nv_bfloat16*>(work), static_cast<__nv_bfloat16*>(rs),
        static_cast<__nv_bfloat16*>(ag), static_cast<uint64_t*>(sig), static_cast<uint64_t*>(ack),
        static_cast<__nv_bfloat16*>(out), epoch, n);
    return cudaGetLastError();
  }
};

cudaStream_t st(void* s) { return static_cast<cudaStream_t>(s); }

}  // namespace

extern "C" {

int mori_selftest_put(const DeviceState* s, int scope, void* dst, const void* src, size_t n, int pe, int blocks,
                      int threads, void* stream) {
  put_kernel<<<blocks, threads, 0, st(stream)>>>(s, scope, static_cast<char*>(dst), static_cast<const char*>(src), n,
                                                 pe);
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
  get_kernel<<<blocks, threads, 0, st(stream)>>>(s, scope, static_cast<char*>(dst), static_cast<const char*>(src), n,
                                                 pe);
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

// bf16 all-reduces over `npes` PEs (2 to 8; the kernel traps if the job has another count).
int mori_selftest_allreduce_oneshot(const DeviceState* s, const void* data, void* gather, void* sig, void* out,
                                    uint64_t epoch, int64_t n, int npes, int threads, void* stream) {
  return launch_for_npes<OneshotLaunch>(npes, s, data, gather, sig, out, epoch, n, threads, st(stream));
}

int mori_selftest_allreduce_ring(const DeviceState* s, const void* data, void* work, void* rs, void* ag, void* sig,
                                 void* ack, void* out, uint64_t epoch, int64_t n, int npes, int blocks, int threads,
                                 void* stream) {
  return launch_for_npes<RingLaunch>(npes, s, data, work, rs, ag, sig, ack, out, epoch, n, blocks, threads, st(stream));
}

// Host-side reference of the pattern the signal test writes (for checks in Python).
uint64_t mori_selftest_pattern(uint64_t round, uint64_t i) {
  return (round * 0x9E3779B97F4A7C15ull) ^ (i * 0xBF58476D1CE4E5B9ull) ^ 0x5555;
}

}  // extern "C"
