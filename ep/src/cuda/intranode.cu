// SPDX-License-Identifier: MIT
// CUDA IntraNode dispatch/combine kernels (see mori/ep/cuda/intranode.h for the protocols).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <type_traits>

#include "mori/core/cuda_check.h"
#include "mori/core/dtype.h"
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

// Copies `bytes` with the whole warp: 16-byte vectors, kU loads in flight per lane, when aligned.
template <int kU = 4>
__device__ __forceinline__ void warp_copy(uint8_t* __restrict__ dst, const uint8_t* __restrict__ src, int64_t bytes,
                                          int lane) {
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | static_cast<uintptr_t>(bytes)) & 15) !=
      0) {
    for (int64_t i = lane; i < bytes; i += 32) dst[i] = src[i];
    return;
  }
  const int4* s = reinterpret_cast<const int4*>(src);
  int4* d = reinterpret_cast<int4*>(dst);
  const int64_t n = bytes >> 4;
  int64_t i = lane;
  for (; i + 32 * (kU - 1) < n; i += 32 * kU) {
    int4 v[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) v[u] = __ldg(s + i + 32 * u);
#pragma unroll
    for (int u = 0; u < kU; ++u) d[i + 32 * u] = v[u];
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

// Warp 0: wait for every PE's (round, count) signal of `round`, publish the total, and free the
// counter parity (nobody reserves it again before my next round's signal reaches them).
__device__ void wait_dispatch(const Shape& s, const Peers& p, const Local& l, unsigned long long round) {
  if (threadIdx.x >= 32) return;
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
    atomicExch(p.counter[s.rank] + parity, 0ull);
  }
}

// Destination PE and slot of lane `lane`'s entry of token t in a replayed layout (a routing
// handle's dest map), or -1; entries that name no slot of this job are dropped like -1.
__device__ __forceinline__ int replay_route(const int64_t* replay, int64_t t, int lane, const Shape& s, int64_t& slot) {
  slot = 0;
  if (lane >= s.topk) return -1;
  const int64_t v = replay[t * s.topk + lane];
  if (v < 0 || v >= s.world * s.max_recv) return -1;
  slot = v % s.max_recv;
  return static_cast<int>(v / s.max_recv);
}

__global__ void __launch_bounds__(1024)
    k_dispatch_send(Shape s, Peers p, Local l, const uint8_t* in, int row_bytes, const float* w, const uint8_t* sc,
                    const int32_t* idx, int n, bool fused_recv, const int64_t* replay) {
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
    int64_t unused;
    int d = replay ? replay_route(replay, t, lane, s, unused) : route(idx, t, lane, s);
    if (d >= 0) atomicAdd(&cnt[d], 1u);
  }
  __syncthreads();
  // One remote atomic per destination for the whole block (a replay has its slots already).
  if (!replay && threadIdx.x < s.world && cnt[threadIdx.x]) {
    int d = threadIdx.x;
    base[d] = atomicAdd_system(p.counter[d] + parity, static_cast<unsigned long long>(cnt[d]));
    if (base[d] + cnt[d] > static_cast<unsigned long long>(s.max_recv)) ovf[d] = 1;
  }
  __syncthreads();
  for (int64_t t = lo + warp; t < hi; t += nwarps) {
    int64_t replay_slot = 0;
    const int d = replay ? replay_route(replay, t, lane, s, replay_slot) : route(idx, t, lane, s);
    int64_t entry = -1;
    for (int j = 0; j < s.topk; ++j) {
      const int dj = __shfl_sync(kFull, d, j);
      if (dj < 0 || ovf[dj]) continue;  // warp-uniform
      int64_t slot;
      if (replay) {
        slot = __shfl_sync(kFull, replay_slot, j);
      } else {
        unsigned int r = 0;
        if (lane == 0) r = atomicAdd(&run[dj], 1u);
        r = __shfl_sync(kFull, r, 0);
        slot = static_cast<int64_t>(base[dj] + r);
      }
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
      if (lane == 0) {
        p.disp_src[dj][slot] = static_cast<int32_t>(s.rank * s.max_send + t);
        p.disp_inv[dj][static_cast<int64_t>(s.rank) * s.max_inp + t] =
            (round << 32) | static_cast<unsigned long long>(slot);
      }
    }
    if (lane < s.topk) l.dest_map[t * s.topk + lane] = entry;
  }
  __syncthreads();
  if (threadIdx.x < s.world) {
    const int d = threadIdx.x;
    if (ovf[d])
      atomicOr(&l.state[3], 1ull << d);
    else if (cnt[d])
      atomicAdd(&l.state[4 + d], static_cast<unsigned long long>(cnt[d]));
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
  // IntraNode: the last block also waits for the peers (one launch less); AsyncLL waits in dispatch_recv.
  if (fused_recv) wait_dispatch(s, p, l, round);
}

__global__ void k_dispatch_recv(Shape s, Peers p, Local l) { wait_dispatch(s, p, l, l.state[0]); }

// ---------------------------------------------------------------- combine

__device__ __forceinline__ void st_release_sys_u32(unsigned* p, unsigned v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned ld_acquire_sys_u32(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Eight elements of a row <-> eight floats. kCoherent loads bypass L1 (rows peers write while
// the kernel runs); the others use the read-only path (the combine input).
struct Fp8 {};     // e4m3fn, combine's fp8_direct_cast wire type
struct Fp4 {};     // e2m1, two per byte (low nibble first): fp4_blockwise codes, float4_e2m1fn_x2 rows
struct Fp8Blk {};  // fp8_blockwise wire rows: e4m3fn codes, then one fp32 scale per block
struct Fp4Blk {};  // fp4_blockwise wire rows: packed e2m1 codes, then one fp32 scale per block

// The blockwise wire types: their code type and the largest code magnitude.
template <typename S>
struct Blockwise {
  static constexpr bool kIs = false;
};
template <>
struct Blockwise<Fp8Blk> {
  static constexpr bool kIs = true;
  using Code = Fp8;
  static constexpr float kMax = 448.0f;
};
template <>
struct Blockwise<Fp4Blk> {
  static constexpr bool kIs = true;
  using Code = Fp4;
  static constexpr float kMax = 6.0f;
};

template <typename T>
struct Row8;

template <>
struct Row8<__nv_bfloat16> {
  static constexpr int kBytes = 16;
  template <bool kCoherent>
  __device__ static void add(float* acc, const uint8_t* p) {
    const int4* q = reinterpret_cast<const int4*>(p);
    int4 v = kCoherent ? __ldcg(q) : __ldg(q);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 f = __bfloat1622float2(h[i]);
      acc[2 * i] += f.x;
      acc[2 * i + 1] += f.y;
    }
  }
  __device__ static void store(uint8_t* p, const float* acc) {
    int4 v;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
    *reinterpret_cast<int4*>(p) = v;
  }
};

template <>
struct Row8<float> {
  static constexpr int kBytes = 32;
  template <bool kCoherent>
  __device__ static void add(float* acc, const uint8_t* p) {
    const float4* q = reinterpret_cast<const float4*>(p);
    float4 a = kCoherent ? __ldcg(q) : __ldg(q);
    float4 b = kCoherent ? __ldcg(q + 1) : __ldg(q + 1);
    acc[0] += a.x, acc[1] += a.y, acc[2] += a.z, acc[3] += a.w;
    acc[4] += b.x, acc[5] += b.y, acc[6] += b.z, acc[7] += b.w;
  }
  __device__ static void store(uint8_t* p, const float* acc) {
    float4* q = reinterpret_cast<float4*>(p);
    q[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    q[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
  }
};

template <>
struct Row8<Fp8> {
  static constexpr int kBytes = 8;
  template <bool kCoherent>
  __device__ static void add(float* acc, const uint8_t* p) {
    const uint2* q = reinterpret_cast<const uint2*>(p);
    uint2 v = kCoherent ? __ldcg(q) : __ldg(q);
    const __nv_fp8x2_storage_t* e = reinterpret_cast<const __nv_fp8x2_storage_t*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(e[i], __NV_E4M3)));
      acc[2 * i] += f.x;
      acc[2 * i + 1] += f.y;
    }
  }
  __device__ static void store(uint8_t* p, const float* acc) {
    uint2 v;
    __nv_fp8x2_storage_t* e = reinterpret_cast<__nv_fp8x2_storage_t*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      e[i] = __nv_cvt_float2_to_fp8x2(make_float2(acc[2 * i], acc[2 * i + 1]), __NV_SATFINITE, __NV_E4M3);
    *reinterpret_cast<uint2*>(p) = v;
  }
};

__constant__ float kE2M1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// fp32 -> e2m1 code as the CPU path rounds (float_to_fp4_e2m1, mori/core/float_formats.h): nearest,
// ties to the even code, saturating at 6, NaN to +6.
__device__ __forceinline__ uint32_t fp4_e2m1_code(float f) {
  if (isnan(f)) return 7u;
  const float a = fabsf(f);
  const uint32_t code = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) + (a > 5.0f);
  return (signbit(f) ? 8u : 0u) | code;
}

template <>
struct Row8<Fp4> {
  static constexpr int kBytes = 4;
  template <bool kCoherent>
  __device__ static void add(float* acc, const uint8_t* p) {
    const unsigned* q = reinterpret_cast<const unsigned*>(p);
    const unsigned v = kCoherent ? __ldcg(q) : __ldg(q);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const unsigned c = (v >> (4 * i)) & 0xfu;
      const float m = kE2M1[c & 7u];
      acc[i] += (c & 8u) ? -m : m;
    }
  }
  __device__ static void store(uint8_t* p, const float* acc) {
    unsigned v = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) v |= fp4_e2m1_code(acc[i]) << (4 * i);
    *reinterpret_cast<unsigned*>(p) = v;
  }
};

// One row quantized blockwise by the warp: per block of `block_groups` groups its largest
// magnitude (a warp reduction), scale = amax / the code's largest value (448 e4m3, 6 e2m1),
// codes = value / scale (saturating).
template <typename T, typename S>
__device__ void send_row_blockwise(uint8_t* __restrict__ dst, const uint8_t* __restrict__ src, int groups,
                                   int block_groups, int lane) {
  using Code = typename Blockwise<S>::Code;
  float* scales = reinterpret_cast<float*>(dst + static_cast<int64_t>(groups) * Row8<Code>::kBytes);
  const int blocks = (groups + block_groups - 1) / block_groups;
  for (int b = 0; b < blocks; ++b) {
    const int g0 = b * block_groups, g1 = min(groups, g0 + block_groups);
    float amax = 0.0f;
    for (int c = g0 + lane; c < g1; c += 32) {
      float f[8] = {};
      Row8<T>::template add<false>(f, src + c * Row8<T>::kBytes);
#pragma unroll
      for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(f[i]));
    }
    for (int off = 16; off; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFull, amax, off));
    const float scale = amax / Blockwise<S>::kMax;
    for (int c = g0 + lane; c < g1; c += 32) {
      float f[8] = {};
      Row8<T>::template add<false>(f, src + c * Row8<T>::kBytes);
#pragma unroll
      for (int i = 0; i < 8; ++i) f[i] = scale > 0.0f ? f[i] / scale : 0.0f;
      Row8<Code>::store(dst + c * Row8<Code>::kBytes, f);
    }
    if (lane == 0) scales[b] = scale;
  }
}

// One row from the combine input (T) into a staging row (S: T, or fp8 when direct-cast, or
// blockwise-quantized fp8 / fp4).
template <typename T, typename S>
__device__ __forceinline__ void send_row(uint8_t* __restrict__ dst, const uint8_t* __restrict__ src, int groups,
                                         int lane, int block_groups) {
  if constexpr (Blockwise<S>::kIs) {
    send_row_blockwise<T, S>(dst, src, groups, block_groups, lane);
  } else if constexpr (std::is_same_v<T, S>) {
    warp_copy<8>(dst, src, static_cast<int64_t>(groups) * Row8<T>::kBytes, lane);
  } else {
#pragma unroll 4
    for (int c = lane; c < groups; c += 32) {
      float f[8] = {};
      Row8<T>::template add<false>(f, src + c * Row8<T>::kBytes);
      Row8<S>::store(dst + c * Row8<S>::kBytes, f);
    }
  }
}

struct CombineJob {
  const uint8_t* in;  // combine input rows (T), aligned with this PE's dispatch output
  const float* w;     // input weights or null
  bool with_w;
  int groups;  // hidden / 8
  int num_tokens;
  bool zero_copy;    // `in` is this PE's registered buffer (Peers::comb_in)
  bool pipelined;    // staged rows are flagged one by one (stage_per_row)
  int block_groups;  // blockwise wire types: groups per scale block
  int st_row;        // bytes of a staged row (the wire type's)
};

struct RowRef {
  const uint8_t* ptr;
  bool staged;  // stored as the wire type S, else as the input type T
};

__host__ __device__ constexpr int kSliceGroups(int elem_bytes) { return 32 * (elem_bytes == 4 ? 2 : 4); }

// Sums groups [base, base + kSliceGroups) of token t over its destination rows into comb_out (and, for
// the slice at 0, its weights). Lanes < topk hold the token's (rank, slot) entries, -1 for none;
// row(rank, slot) gives each row, weight(rank, slot) its weights.
template <typename T, typename S, typename RowFn, typename WeightFn>
__device__ __forceinline__ void sum_slice(const Shape& s, const Local& l, const CombineJob& j, int r, int64_t slot,
                                          int64_t t, int base, int lane, RowFn row, WeightFn weight) {
  constexpr int kU = kSliceGroups(sizeof(T)) / 32;  // groups in flight per lane (fp32: fewer, no spills)
  const int c0 = base + lane;
  float acc[kU][8] = {};
  for (int q = 0; q < s.topk; ++q) {  // every lane runs every step: the row list travels by shuffles
    const int rq = __shfl_sync(kFull, r, q);
    const int64_t sq = __shfl_sync(kFull, slot, q);
    if (rq < 0) continue;  // warp-uniform
    const RowRef ref = row(rq, sq);
    const uint8_t* ptr = ref.ptr;
    if (ref.staged) {
      if constexpr (Blockwise<S>::kIs) {
        using Code = typename Blockwise<S>::Code;
        const float* scales = reinterpret_cast<const float*>(ptr + static_cast<int64_t>(j.groups) * Row8<Code>::kBytes);
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int c = c0 + 32 * u;
          if (c >= j.groups) continue;
          float f[8] = {};
          Row8<Code>::template add<true>(f, ptr + c * Row8<Code>::kBytes);
          const float sc = __ldcg(scales + c / j.block_groups);
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[u][i] += f[i] * sc;
        }
      } else {
#pragma unroll
        for (int u = 0; u < kU; ++u)
          if (c0 + 32 * u < j.groups) Row8<S>::template add<true>(acc[u], ptr + (c0 + 32 * u) * Row8<S>::kBytes);
      }
    } else {
#pragma unroll
      for (int u = 0; u < kU; ++u)
        if (c0 + 32 * u < j.groups) Row8<T>::template add<true>(acc[u], ptr + (c0 + 32 * u) * Row8<T>::kBytes);
    }
  }
  uint8_t* out = l.comb_out + t * j.groups * Row8<T>::kBytes;
#pragma unroll
  for (int u = 0; u < kU; ++u)
    if (c0 + 32 * u < j.groups) Row8<T>::store(out + (c0 + 32 * u) * Row8<T>::kBytes, acc[u]);
  if (!j.with_w || base != 0) return;
  float wacc = 0.0f;
  for (int q = 0; q < s.topk; ++q) {
    const int rq = __shfl_sync(kFull, r, q);
    const int64_t sq = __shfl_sync(kFull, slot, q);
    if (rq >= 0 && lane < s.topk) wacc += __ldcg(weight(rq, sq) + lane);
  }
  if (lane < s.topk) l.comb_out_w[t * s.topk + lane] = wacc;
}

// Lanes < topk: (rank, slot) of token t's dispatch rows (rank -1: none).
__device__ __forceinline__ void token_rows(const Shape& s, const Local& l, int64_t t, int lane, int& r, int64_t& slot) {
  r = -1;
  slot = 0;
  if (lane >= s.topk) return;
  const int64_t v = l.dest_map[t * s.topk + lane];
  if (v < 0) return;
  r = static_cast<int>(v / s.max_recv);
  slot = v - r * s.max_recv;
}

// The last block to finish (all blocks count in state[2]) tells the peers this PE read round
// `round` of their rows, and moves the combine round on.
__device__ __forceinline__ void finish_round(const Shape& s, const Peers& p, const Local& l, unsigned long long round) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(&l.state[2], 1ull) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  if (threadIdx.x < s.world && threadIdx.x != s.rank) st_release_sys(p.comb_done[threadIdx.x] + s.rank, round);
  if (threadIdx.x == 0) {
    l.state[2] = 0;
    l.state[4 + s.world] = 0;
    l.state[1] = round;
  }
}

// Waits (threads < world) until every peer read our rows of the previous round.
__device__ __forceinline__ void wait_peers_done(const Shape& s, const Peers& p, unsigned long long round) {
  if (threadIdx.x < s.world && threadIdx.x != s.rank)
    while (ld_acquire_sys(p.comb_done[s.rank] + threadIdx.x) + 1 < round) __nanosleep(32);
  __syncthreads();
}

// Pipelined staging, run by a few warps of every block: the rows other PEs need, visited in
// (token, source PE) order through the map dispatch left (disp_inv), each copied (or cast) into
// the staging at its slot and then flagged to its source PE, whose pulls go in the same token
// order. Lanes read 32 map entries at once (a warp's next 32, `ns` apart) to hide the latency
// of the scan; the rows are then staged in order.
template <typename T, typename S>
__device__ void stage_per_row(const Shape& s, const Peers& p, const Local& l, const CombineJob& j, int64_t sg,
                              int64_t ns, int lane, unsigned flag) {
  const unsigned long long disp_round = l.state[0];
  const int in_row = j.groups * Row8<T>::kBytes, st_row = j.st_row;
  const int64_t n = static_cast<int64_t>(s.max_inp) * s.world;
  const unsigned long long* inv = p.disp_inv[s.rank];
  for (int64_t k0 = sg; k0 < n; k0 += 32 * ns) {
    const int64_t k = k0 + lane * ns;  // entry (token k / world, source k % world)
    const int q = static_cast<int>(k % s.world);
    const int64_t t = k / s.world;
    unsigned long long e = 0;
    if (k < n && q != s.rank) e = inv[static_cast<int64_t>(q) * s.max_inp + t];
    unsigned todo = __ballot_sync(kFull, (e >> 32) == disp_round);
    while (todo) {
      const int src = __ffs(todo) - 1;
      todo &= todo - 1;
      const int qs = __shfl_sync(kFull, q, src);
      const int64_t ts = __shfl_sync(kFull, t, src);
      const int64_t slot = static_cast<int64_t>(__shfl_sync(kFull, e, src) & 0xffffffffull);
      send_row<T, S>(p.comb_stage[s.rank] + slot * st_row, j.in + slot * in_row, j.groups, lane, j.block_groups);
      if (j.w && lane < s.topk) p.comb_stage_w[s.rank][slot * s.topk + lane] = __ldg(j.w + slot * s.topk + lane);
      __threadfence_system();  // each lane's stores, then (after the warp barrier) the flag
      __syncwarp();
      if (lane == 0) st_release_sys_u32(p.comb_flag[qs] + static_cast<int64_t>(s.rank) * s.max_inp + ts, flag);
    }
  }
}

// Pull combine (IntraNode, IntraNodeLL): every PE first makes the rows other PEs need readable
// in its own symmetric memory (the registered input as is, else a copy, or an fp8 cast, into
// comb_stage by dispatch slot) and tells them (comb_ready); then every warp sums slices of
// tokens, reading its own rows from the input and the others' straight over NVLink. The sums
// overlap the transfer, no remote store needs a fence, and a slice per warp keeps the
// latency of small batches down. With pipelined staging the copy overlaps the pulls too.
template <typename T, typename S>
__global__ void __launch_bounds__(1024) k_combine_pull(Shape s, Peers p, Local l, CombineJob j) {
  __shared__ bool last;
  __shared__ unsigned direct_peers, per_row_peers;  // peers whose input is read as is / whose rows are flagged
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const unsigned long long round = l.state[1] + 1;  // bumped only by the last block, after all read it
  const int64_t gw = static_cast<int64_t>(blockIdx.x) * nwarps + warp, nw = static_cast<int64_t>(gridDim.x) * nwarps;
  const bool direct = j.zero_copy && std::is_same_v<T, S>;  // peers read the registered input itself
  const bool per_row = !direct && j.pipelined && s.world > 1;
  const int in_row = j.groups * Row8<T>::kBytes, st_row = j.st_row;
  wait_peers_done(s, p, round);
  if (per_row) {
    // Rows will be flagged one by one: say so at once.
    if (blockIdx.x == 0 && threadIdx.x < s.world && threadIdx.x != s.rank)
      st_release_sys(p.comb_ready[threadIdx.x] + s.rank, (round << 2) | kStagedPerRow);
  } else {
    // 1. Stage the rows that go to other PEs (direct: their weights only), then one flag.
    const int total = *l.total_recv;
    const int32_t* src = p.disp_src[s.rank];
    for (int64_t i = gw; i < total; i += nw) {
      if (static_cast<int>(src[i] / s.max_send) == s.rank) continue;  // summed here, from the input
      if (!direct) send_row<T, S>(p.comb_stage[s.rank] + i * st_row, j.in + i * in_row, j.groups, lane, j.block_groups);
      if (j.w && lane < s.topk) p.comb_stage_w[s.rank][i * s.topk + lane] = __ldg(j.w + i * s.topk + lane);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence_system();  // this block's staged rows, before it counts
      last = atomicAdd(&l.state[4 + s.world], 1ull) == gridDim.x - 1;
    }
    __syncthreads();
    if (last && threadIdx.x < s.world && threadIdx.x != s.rank) {
      __threadfence_system();
      st_release_sys(p.comb_ready[threadIdx.x] + s.rank, (round << 2) | (direct ? kDirect : kStagedAll));
    }
  }
  // 2. Learn where every peer's rows are (PEs may differ in that from call to call).
  if (threadIdx.x == 0) direct_peers = per_row_peers = 0;
  __syncthreads();
  if (threadIdx.x < s.world && threadIdx.x != s.rank) {
    unsigned long long v;
    while (((v = ld_acquire_sys(p.comb_ready[s.rank] + threadIdx.x)) >> 2) < round) __nanosleep(32);
    if ((v & 3) == kDirect) atomicOr(&direct_peers, 1u << threadIdx.x);
    if ((v & 3) == kStagedPerRow) atomicOr(&per_row_peers, 1u << threadIdx.x);
  }
  __syncthreads();
  // 3. Pipelined: a quarter of the warps stage (all of them when a block has few), the others pull.
  const unsigned flag = static_cast<unsigned>(round);
  int64_t pw = gw, np = nw;
  if (per_row) {
    const int stagers = nwarps >= 4 ? nwarps / 4 : nwarps;
    if (warp < stagers)
      stage_per_row<T, S>(s, p, l, j, static_cast<int64_t>(blockIdx.x) * stagers + warp,
                          static_cast<int64_t>(gridDim.x) * stagers, lane, flag);
    if (stagers < nwarps && warp < stagers) {
      np = 0;  // this stager is done
    } else if (stagers < nwarps) {
      pw = static_cast<int64_t>(blockIdx.x) * (nwarps - stagers) + warp - stagers;
      np = static_cast<int64_t>(gridDim.x) * (nwarps - stagers);
    }
  }
  // 4. Sum slices of tokens.
  constexpr int kSlice = kSliceGroups(sizeof(T));
  const int slices = (j.groups + kSlice - 1) / kSlice;
  const int64_t items = np ? static_cast<int64_t>(j.num_tokens) * slices : 0;
  for (int64_t e = pw; e < items; e += np) {
    const int64_t t = e / slices;
    int r;
    int64_t slot;
    token_rows(s, l, t, lane, r, slot);
    if (r >= 0 && ((per_row_peers >> r) & 1))
      while (ld_acquire_sys_u32(p.comb_flag[s.rank] + static_cast<int64_t>(r) * s.max_inp + t) != flag) {
      }
    __syncwarp();
    sum_slice<T, S>(
        s, l, j, r, slot, t, static_cast<int>(e - t * slices) * kSlice, lane,
        [&](int rq, int64_t sq) {
          if (rq == s.rank) return RowRef{j.in + sq * in_row, false};
          if ((direct_peers >> rq) & 1) return RowRef{p.comb_in[rq] + sq * in_row, false};
          return RowRef{p.comb_stage[rq] + sq * st_row, true};
        },
        [&](int rq, int64_t sq) { return (rq == s.rank ? j.w : p.comb_stage_w[rq]) + sq * s.topk; });
  }
  finish_round(s, p, l, round);
}

// AsyncLL's halves, by push. kSend: every row of this PE's dispatch output goes into its source
// PE's staging at (this PE, token), then that slot's 32-bit flag is set to the round (after a
// system fence, so the row is visible first). kRecv: each token waits for its rows' flags and
// sums them from the staging.
template <typename T, typename S>
__global__ void __launch_bounds__(1024) k_combine_push(Shape s, Peers p, Local l, CombineJob j, bool send) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const unsigned long long round = l.state[1] + 1;
  const unsigned flag = static_cast<unsigned>(round);
  const int64_t gw = static_cast<int64_t>(blockIdx.x) * nwarps + warp, nw = static_cast<int64_t>(gridDim.x) * nwarps;
  const int in_row = j.groups * Row8<T>::kBytes, st_row = j.st_row;
  if (send) {
    wait_peers_done(s, p, round);
    const int total = *l.total_recv;
    const int32_t* src = p.disp_src[s.rank];
    for (int64_t i = gw; i < total; i += nw) {
      const int64_t pos = src[i];
      const int pe = static_cast<int>(pos / s.max_send);
      const int64_t at = static_cast<int64_t>(s.rank) * s.max_inp + pos % s.max_send;
      send_row<T, S>(p.comb_stage[pe] + at * st_row, j.in + i * in_row, j.groups, lane, j.block_groups);
      if (j.w && lane < s.topk) p.comb_stage_w[pe][at * s.topk + lane] = __ldg(j.w + i * s.topk + lane);
      __threadfence_system();  // each lane's stores, then (after the warp barrier) the flag
      __syncwarp();
      if (lane == 0) st_release_sys_u32(p.comb_flag[pe] + at, flag);
    }
    return;
  }
  constexpr int kSlice = kSliceGroups(sizeof(T));
  for (int64_t t = gw; t < j.num_tokens; t += nw) {
    int r;
    int64_t slot;
    token_rows(s, l, t, lane, r, slot);
    if (r >= 0)
      while (ld_acquire_sys_u32(p.comb_flag[s.rank] + static_cast<int64_t>(r) * s.max_inp + t) != flag) {
      }
    __syncwarp();
    for (int base = 0; base < j.groups; base += kSlice)
      sum_slice<T, S>(
          s, l, j, r, slot, t, base, lane,
          [&](int rq, int64_t) {
            return RowRef{p.comb_stage[s.rank] + (static_cast<int64_t>(rq) * s.max_inp + t) * st_row, true};
          },
          [&](int rq, int64_t) {
            return p.comb_stage_w[s.rank] + (static_cast<int64_t>(rq) * s.max_inp + t) * s.topk;
          });
  }
  finish_round(s, p, l, round);
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
                   int warps, bool with_recv, void* stream, const int64_t* replay_dest_map) {
  check_shape(s, blocks, warps);
  k_dispatch_send<<<blocks, warps * 32, 0, static_cast<cudaStream_t>(stream)>>>(
      s, p, l, static_cast<const uint8_t*>(input), row_bytes, weights, static_cast<const uint8_t*>(scales), indices,
      num_tokens, with_recv, replay_dest_map);
  check_cuda(cudaGetLastError(), "dispatch_send launch");
}

void dispatch_recv(const Shape& s, const Peers& p, const Local& l, void* stream) {
  k_dispatch_recv<<<1, 32, 0, static_cast<cudaStream_t>(stream)>>>(s, p, l);
  check_cuda(cudaGetLastError(), "dispatch_recv launch");
}

namespace {

// Bytes of a staged row of the wire type S (blockwise: codes, then the scales, padded to 16).
template <typename S>
int staged_row_bytes(int groups, int block_groups) {
  if constexpr (Blockwise<S>::kIs) {
    const int blocks = (groups + block_groups - 1) / block_groups;
    return (groups * Row8<typename Blockwise<S>::Code>::kBytes + 4 * blocks + 15) / 16 * 16;
  } else {
    return groups * Row8<S>::kBytes;
  }
}

// Receivers of the fused kernel spin on peers' senders: every block must be resident at once.
int resident_blocks(const void* kernel, int threads) {
  int dev = 0, sms = 0, per_sm = 0;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0),
             "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  return per_sm * sms;
}

template <typename T, typename S>
void launch_combine(const Shape& s, const Peers& p, const Local& l, CombineJob j, CombinePhase phase, int blocks,
                    int warps, cudaStream_t stream) {
  j.st_row = staged_row_bytes<S>(j.groups, j.block_groups);
  if (phase == CombinePhase::kFused) {
    const void* kernel = reinterpret_cast<const void*>(&k_combine_pull<T, S>);
    blocks = std::max(1, std::min(blocks, resident_blocks(kernel, warps * 32)));
    k_combine_pull<T, S><<<blocks, warps * 32, 0, stream>>>(s, p, l, j);
  } else {
    k_combine_push<T, S><<<blocks, warps * 32, 0, stream>>>(s, p, l, j, phase == CombinePhase::kSend);
  }
  check_cuda(cudaGetLastError(), "combine launch");
}

}  // namespace

void combine(const Shape& s, const Peers& p, const Local& l, const CombineArgs& a, CombinePhase phase, int blocks,
             int warps, void* stream) {
  check_shape(s, blocks, warps);
  constexpr int kFloat32 = static_cast<int>(DataType::kFloat32), kBFloat16 = static_cast<int>(DataType::kBFloat16);
  constexpr int kFp4Rows = static_cast<int>(DataType::kFloat4E2M1x2);  // two values per element
  MORI_CHECK_ARG(a.dtype == kFloat32 || a.dtype == kBFloat16 || a.dtype == kFp4Rows,
                 "CUDA combine supports float32, bfloat16 and float4_e2m1fn_x2, got dtype code %d", a.dtype);
  // fp4 rows are summed in fp32 and rounded back to e2m1, as on CPU; casting them is refused there too.
  MORI_CHECK_ARG(a.dtype != kFp4Rows || (!a.fp8 && a.block == 0),
                 "CUDA combine of float4_e2m1fn_x2 rows takes quant_type none (fp8_direct_cast and the blockwise "
                 "combines need float32/bfloat16 input)");
  MORI_CHECK_ARG(a.hidden > 0 && a.hidden % 8 == 0, "CUDA combine needs a hidden size that is a multiple of 8, got %d",
                 a.hidden);
  MORI_CHECK_ARG(a.num_tokens >= 0 && a.num_tokens <= s.max_inp, "combine: %d tokens, max_num_inp_token_per_rank %d",
                 a.num_tokens, s.max_inp);
  MORI_CHECK_ARG(a.block == 0 || (a.block > 0 && a.block % 8 == 0 && a.dtype == kBFloat16 && !a.fp8),
                 "CUDA blockwise combine needs bfloat16 rows and a block of a multiple of 8 values, got dtype "
                 "code %d, block %d",
                 a.dtype, a.block);
  const int groups = a.dtype == kFp4Rows ? a.hidden / 4 : a.hidden / 8;  // of 8 values
  CombineJob j{static_cast<const uint8_t*>(a.input),
               a.weights,
               a.with_weights,
               groups,
               a.num_tokens,
               a.zero_copy,
               a.pipelined,
               a.block / 8,
               0};
  auto st = static_cast<cudaStream_t>(stream);
  if (a.dtype == kFp4Rows) {
    launch_combine<Fp4, Fp4>(s, p, l, j, phase, blocks, warps, st);
  } else if (a.block > 0 && a.fp4) {
    launch_combine<__nv_bfloat16, Fp4Blk>(s, p, l, j, phase, blocks, warps, st);
  } else if (a.block > 0) {
    launch_combine<__nv_bfloat16, Fp8Blk>(s, p, l, j, phase, blocks, warps, st);
  } else if (a.dtype == kBFloat16) {
    if (a.fp8)
      launch_combine<__nv_bfloat16, Fp8>(s, p, l, j, phase, blocks, warps, st);
    else
      launch_combine<__nv_bfloat16, __nv_bfloat16>(s, p, l, j, phase, blocks, warps, st);
  } else {
    if (a.fp8)
      launch_combine<float, Fp8>(s, p, l, j, phase, blocks, warps, st);
    else
      launch_combine<float, float>(s, p, l, j, phase, blocks, warps, st);
  }
}

}  // namespace mori::ep::cuda
