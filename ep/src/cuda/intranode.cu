// SPDX-License-Identifier: MIT
// CUDA IntraNode dispatch/combine kernels (see mori/ep/cuda/intranode.h for the protocol).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>

#include "mori/core/status.h"
#include "mori/ep/cuda/intranode.h"

namespace mori::ep::cuda {
namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kMaxTopk = 16;
constexpr unsigned long long kOverflow = 1ull << 31;
constexpr unsigned long long kCountMask = kOverflow - 1;

__device__ __forceinline__ unsigned long long ld_acquire_sys(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_release_sys(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Copies `bytes` with the whole warp: 16-byte vectors (four in flight per lane) when aligned.
__device__ __forceinline__ void warp_copy(uint8_t* dst, const uint8_t* src, int64_t bytes, int lane) {
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | static_cast<uintptr_t>(bytes)) & 15) !=
      0) {
    for (int64_t i = lane; i < bytes; i += 32) dst[i] = src[i];
    return;
  }
  const int4* s = reinterpret_cast<const int4*>(src);
  int4* d = reinterpret_cast<int4*>(dst);
  const int64_t n = bytes >> 4;
  int64_t i = lane;
  for (; i + 96 < n; i += 128) {
    int4 a = __ldg(s + i), b = __ldg(s + i + 32), c = __ldg(s + i + 64), e = __ldg(s + i + 96);
    d[i] = a;
    d[i + 32] = b;
    d[i + 64] = c;
    d[i + 96] = e;
  }
  for (; i < n; i += 32) d[i] = __ldg(s + i);
}

// Destination PE of lane `lane`'s expert of token t, or -1 (no expert, or a PE an earlier
// expert of the same token already chose: one copy per destination PE).
__device__ __forceinline__ int route(const int32_t* idx, int64_t t, int lane, const Shape& s) {
  int d = -1;
  if (lane < s.topk) {
    int e = idx[t * s.topk + lane];
    // Ids past the last expert are dropped like -1 (the host cannot check them without a sync).
    d = e >= 0 && e < s.world * s.experts_per_rank ? e / s.experts_per_rank : -1;
  }
  bool dup = false;
  for (int q = 0; q < s.topk; ++q) {
    int dq = __shfl_sync(kFull, d, q);
    if (q < lane && d >= 0 && dq == d) dup = true;
  }
  return dup ? -1 : d;
}

__global__ void k_dispatch_send(Shape s, Peers p, Local l, const uint8_t* in, int row_bytes, const float* w,
                                const uint8_t* sc, const int32_t* idx, int n) {
  __shared__ unsigned int cnt[kMaxPes], run[kMaxPes];
  __shared__ unsigned long long base[kMaxPes];
  __shared__ int ovf[kMaxPes];
  __shared__ bool last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const int64_t lo = static_cast<int64_t>(n) * blockIdx.x / gridDim.x;
  const int64_t hi = static_cast<int64_t>(n) * (blockIdx.x + 1) / gridDim.x;
  // Bumped only by the last block, after every block has read it.
  const unsigned long long round = l.state[0] + 1;
  const int parity = static_cast<int>(round & 1);
  if (threadIdx.x < kMaxPes) {
    cnt[threadIdx.x] = 0;
    run[threadIdx.x] = 0;
    ovf[threadIdx.x] = 0;
  }
  __syncthreads();
  for (int64_t t = lo + warp; t < hi; t += nwarps) {
    int d = route(idx, t, lane, s);
    if (d >= 0) atomicAdd(&cnt[d], 1u);
  }
  __syncthreads();
  // One remote atomic per destination for the whole block.
  if (threadIdx.x < s.world && cnt[threadIdx.x]) {
    int d = threadIdx.x;
    base[d] = atomicAdd_system(p.counter[d] + parity, static_cast<unsigned long long>(cnt[d]));
    if (base[d] + cnt[d] > static_cast<unsigned long long>(s.max_recv)) ovf[d] = 1;
  }
  __syncthreads();
  for (int64_t t = lo + warp; t < hi; t += nwarps) {
    const int d = route(idx, t, lane, s);
    int64_t entry = -1;
    for (int j = 0; j < s.topk; ++j) {
      const int dj = __shfl_sync(kFull, d, j);
      if (dj < 0 || ovf[dj]) continue;  // warp-uniform
      unsigned int r = 0;
      if (lane == 0) r = atomicAdd(&run[dj], 1u);
      r = __shfl_sync(kFull, r, 0);
      const int64_t slot = static_cast<int64_t>(base[dj] + r);
      if (lane == j) entry = dj * s.max_recv + slot;
      warp_copy(p.disp_tok[dj] + slot * row_bytes, in + t * row_bytes, row_bytes, lane);
      if (lane < s.topk) {
        if (w) p.disp_w[dj][slot * s.topk + lane] = w[t * s.topk + lane];
        p.disp_idx[dj][slot * s.topk + lane] = idx[t * s.topk + lane];
      }
      if (sc && s.scale_bytes) {
        for (int b = lane; b < s.scale_bytes; b += 32)
          p.disp_scale[dj][slot * s.scale_bytes + b] = sc[t * s.scale_bytes + b];
      }
      if (lane == 0) p.disp_src[dj][slot] = static_cast<int32_t>(s.rank * s.max_send + t);
    }
    if (lane < s.topk) l.dest_map[t * s.topk + lane] = entry;
  }
  __syncthreads();
  if (threadIdx.x < s.world) {
    const int d = threadIdx.x;
    if (ovf[d]) atomicOr(&l.state[3], 1ull << d);
    else if (cnt[d]) atomicAdd(&l.state[4 + d], static_cast<unsigned long long>(cnt[d]));
  }
  __threadfence_system();  // this block's rows are visible system-wide before it counts as done
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&l.state[2], 1ull) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence_system();
  if (threadIdx.x < s.world) {
    const int d = threadIdx.x;
    const unsigned long long c = atomicExch(&l.state[4 + d], 0ull);
    const bool o = (atomicAdd(&l.state[3], 0ull) >> d) & 1ull;
    st_release_sys(p.disp_sig[d] + parity * s.world + s.rank, (round << 32) | (o ? kOverflow : 0ull) | c);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    l.state[2] = 0;
    l.state[3] = 0;
    l.state[0] = round;
  }
}

__global__ void k_dispatch_recv(Shape s, Peers p, Local l) {
  const unsigned long long round = l.state[0];
  const int parity = static_cast<int>(round & 1);
  const unsigned long long* sig = p.disp_sig[s.rank] + parity * s.world;
  unsigned long long c = 0;
  if (threadIdx.x < s.world) {
    unsigned long long v;
    while (((v = ld_acquire_sys(sig + threadIdx.x)) >> 32) != round) __nanosleep(64);
    c = v & kCountMask;
  }
  for (int off = 16; off; off >>= 1) c += __shfl_down_sync(kFull, c, off);
  if (threadIdx.x == 0) {
    *l.total_recv = static_cast<int32_t>(c);
    // Nobody reserves this parity again before my next round's signal reaches them.
    atomicExch(p.counter[s.rank] + parity, 0ull);
  }
}

__global__ void k_combine_send(Shape s, Peers p, Local l, const uint8_t* in, int row_bytes, const float* w) {
  __shared__ bool last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const unsigned long long round = l.state[1] + 1;
  const int total = *l.total_recv;
  const int32_t* src = p.disp_src[s.rank];
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * nwarps + warp; i < total;
       i += static_cast<int64_t>(gridDim.x) * nwarps) {
    const int64_t pos = src[i];
    const int pe = static_cast<int>(pos / s.max_send);
    const int64_t slot = s.rank * static_cast<int64_t>(s.max_inp) + pos % s.max_send;
    warp_copy(p.comb_stage[pe] + slot * row_bytes, in + i * row_bytes, row_bytes, lane);
    if (w && lane < s.topk) p.comb_stage_w[pe][slot * s.topk + lane] = w[i * s.topk + lane];
  }
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&l.state[2], 1ull) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence_system();
  if (threadIdx.x < s.world) st_release_sys(p.comb_sig[threadIdx.x] + s.rank, round);
  __syncthreads();
  if (threadIdx.x == 0) {
    l.state[2] = 0;
    l.state[1] = round;
  }
}

template <typename T>
struct Vec;  // 16 bytes of T <-> 8 or 4 floats
template <>
struct Vec<__nv_bfloat16> {
  static constexpr int kN = 8;
  __device__ static void add(float* acc, int4 v) {
    const __nv_bfloat16* h = reinterpret_cast<const __nv_bfloat16*>(&v);
#pragma unroll
    for (int i = 0; i < kN; ++i) acc[i] += __bfloat162float(h[i]);
  }
  __device__ static int4 pack(const float* acc) {
    int4 v;
    __nv_bfloat16* h = reinterpret_cast<__nv_bfloat16*>(&v);
#pragma unroll
    for (int i = 0; i < kN; ++i) h[i] = __float2bfloat16_rn(acc[i]);
    return v;
  }
};
template <>
struct Vec<float> {
  static constexpr int kN = 4;
  __device__ static void add(float* acc, int4 v) {
    const float* f = reinterpret_cast<const float*>(&v);
#pragma unroll
    for (int i = 0; i < kN; ++i) acc[i] += f[i];
  }
  __device__ static int4 pack(const float* acc) {
    int4 v;
    float* f = reinterpret_cast<float*>(&v);
#pragma unroll
    for (int i = 0; i < kN; ++i) f[i] = acc[i];
    return v;
  }
};

template <typename T>
__global__ void k_combine_recv(Shape s, Peers p, Local l, int row_bytes, bool weights, int n) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const unsigned long long round = l.state[1];
  if (threadIdx.x < s.world)
    while (ld_acquire_sys(p.comb_sig[s.rank] + threadIdx.x) < round) __nanosleep(64);
  __syncthreads();
  const uint8_t* stage = p.comb_stage[s.rank];
  const float* stage_w = p.comb_stage_w[s.rank];
  const int nvec = row_bytes >> 4;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * nwarps + warp; t < n;
       t += static_cast<int64_t>(gridDim.x) * nwarps) {
    int r = -1;
    if (lane < s.topk) {
      int64_t v = l.dest_map[t * s.topk + lane];
      r = v >= 0 ? static_cast<int>(v / s.max_recv) : -1;
    }
    int rows[kMaxTopk];
    int m = 0;
    for (int j = 0; j < s.topk; ++j) {
      int rj = __shfl_sync(kFull, r, j);
      if (rj >= 0) rows[m++] = rj;
    }
    for (int c = lane; c < nvec; c += 32) {
      float acc[Vec<T>::kN] = {};
      for (int j = 0; j < m; ++j) {
        const int4* row = reinterpret_cast<const int4*>(stage + (rows[j] * static_cast<int64_t>(s.max_inp) + t) * row_bytes);
        Vec<T>::add(acc, row[c]);
      }
      reinterpret_cast<int4*>(l.comb_out + t * row_bytes)[c] = Vec<T>::pack(acc);
    }
    if (weights && lane < s.topk) {
      float acc = 0.0f;
      for (int j = 0; j < m; ++j) acc += stage_w[(rows[j] * static_cast<int64_t>(s.max_inp) + t) * s.topk + lane];
      l.comb_out_w[t * s.topk + lane] = acc;
    }
  }
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) raise(Status::kInternal, "%s: %s", what, cudaGetErrorString(e));
}

void check_shape(const Shape& s, int blocks, int warps) {
  MORI_CHECK_ARG(s.world >= 1 && s.world <= kMaxPes, "CUDA IntraNode kernels support 1..%d PEs, got %d", kMaxPes,
                 s.world);
  MORI_CHECK_ARG(s.topk >= 1 && s.topk <= kMaxTopk, "CUDA IntraNode kernels support top-k 1..%d, got %d", kMaxTopk,
                 s.topk);
  MORI_CHECK_ARG(blocks > 0 && warps > 0 && warps <= 32, "block_num %d and warp_per_block %d must be > 0 (warps <= 32)",
                 blocks, warps);
}

}  // namespace

void dispatch_send(const Shape& s, const Peers& p, const Local& l, const void* input, int row_bytes,
                   const float* weights, const void* scales, const int32_t* indices, int num_tokens, int blocks,
                   int warps, void* stream) {
  check_shape(s, blocks, warps);
  k_dispatch_send<<<blocks, warps * 32, 0, static_cast<cudaStream_t>(stream)>>>(
      s, p, l, static_cast<const uint8_t*>(input), row_bytes, weights, static_cast<const uint8_t*>(scales), indices,
      num_tokens);
  check(cudaGetLastError(), "dispatch_send launch");
}

void dispatch_recv(const Shape& s, const Peers& p, const Local& l, void* stream) {
  k_dispatch_recv<<<1, 32, 0, static_cast<cudaStream_t>(stream)>>>(s, p, l);
  check(cudaGetLastError(), "dispatch_recv launch");
}

void combine_send(const Shape& s, const Peers& p, const Local& l, const void* input, int dtype, int hidden,
                  const float* weights, int blocks, int warps, void* stream) {
  check_shape(s, blocks, warps);
  MORI_CHECK_ARG(dtype == 0 || dtype == 1, "CUDA combine supports float32 and bfloat16, got dtype code %d", dtype);
  const int row_bytes = hidden * (dtype == 0 ? 4 : 2);
  k_combine_send<<<blocks, warps * 32, 0, static_cast<cudaStream_t>(stream)>>>(
      s, p, l, static_cast<const uint8_t*>(input), row_bytes, weights);
  check(cudaGetLastError(), "combine_send launch");
}

void combine_recv(const Shape& s, const Peers& p, const Local& l, int dtype, int hidden, bool weights, int num_tokens,
                  int blocks, int warps, void* stream) {
  check_shape(s, blocks, warps);
  const int row_bytes = hidden * (dtype == 0 ? 4 : 2);
  MORI_CHECK_ARG(row_bytes % 16 == 0, "CUDA combine needs hidden * element size to be a multiple of 16 bytes, got %d",
                 row_bytes);
  auto st = static_cast<cudaStream_t>(stream);
  if (dtype == 1)
    k_combine_recv<__nv_bfloat16><<<blocks, warps * 32, 0, st>>>(s, p, l, row_bytes, weights, num_tokens);
  else if (dtype == 0)
    k_combine_recv<float><<<blocks, warps * 32, 0, st>>>(s, p, l, row_bytes, weights, num_tokens);
  else
    raise(Status::kInvalidArgument, "CUDA combine supports float32 and bfloat16, got dtype code %d", dtype);
  check(cudaGetLastError(), "combine_recv launch");
}

}  // namespace mori::ep::cuda
