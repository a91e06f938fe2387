// SPDX-License-Identifier: MIT
#include "mori/core/reduce.h"

#include <complex>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MORI_REDUCE_AVX2 1
#endif

#include "mori/core/status.h"

namespace mori {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kAnd: return "and";
    case ReduceOp::kOr: return "or";
    case ReduceOp::kXor: return "xor";
  }
  return "?";
}

namespace {

bool is_integer(DataType t) { return static_cast<int>(t) <= static_cast<int>(DataType::kUint64); }
bool is_complex(DataType t) { return t == DataType::kComplex64 || t == DataType::kComplex128; }

}  // namespace

ReduceOp check_reduce(DataType t, int op, const char* caller) {
  if (op < 0 || op >= kNumReduceOps)
    raise(Status::kInvalidArgument, "%s: unknown reduce op code %d (sum=0, max=1, min=2, prod=3, and=4, or=5, xor=6)",
          caller, op);
  const auto r = static_cast<ReduceOp>(op);
  const bool bitwise = r == ReduceOp::kAnd || r == ReduceOp::kOr || r == ReduceOp::kXor;
  if (is_complex(t) && r != ReduceOp::kSum && r != ReduceOp::kProd)
    raise(Status::kInvalidArgument, "%s: op=%s is not defined for %s (complex numbers are not ordered)", caller,
          reduce_op_name(r), dtype_name(t));
  if (bitwise && !is_integer(t) && t != DataType::kBool)
    raise(Status::kInvalidArgument, "%s: op=%s is not defined for %s (bitwise ops need integers)", caller,
          reduce_op_name(r), dtype_name(t));
  return r;
}

namespace {

template <typename E>
void reduce_by_op(ReduceOp op, void* dst, const void* const* srcs, int nsrc, size_t count) {
  using T = typename E::Storage;
  auto* out = static_cast<T*>(dst);
  auto* in = reinterpret_cast<const T* const*>(srcs);
  switch (op) {
    case ReduceOp::kSum: return reduce_sources<E, ReduceOp::kSum>(out, in, nsrc, count);
    case ReduceOp::kMax: return reduce_sources<E, ReduceOp::kMax>(out, in, nsrc, count);
    case ReduceOp::kMin: return reduce_sources<E, ReduceOp::kMin>(out, in, nsrc, count);
    case ReduceOp::kProd: return reduce_sources<E, ReduceOp::kProd>(out, in, nsrc, count);
    case ReduceOp::kAnd:
    case ReduceOp::kOr:
    case ReduceOp::kXor:
      if constexpr (std::is_integral_v<typename E::Acc>) {
        if (op == ReduceOp::kAnd) return reduce_sources<E, ReduceOp::kAnd>(out, in, nsrc, count);
        if (op == ReduceOp::kOr) return reduce_sources<E, ReduceOp::kOr>(out, in, nsrc, count);
        return reduce_sources<E, ReduceOp::kXor>(out, in, nsrc, count);
      }
      break;
  }
  raise(Status::kInternal, "reduce: op %s reached a type that does not define it", reduce_op_name(op));
}

template <typename C>
void reduce_complex(ReduceOp op, void* dst, const void* const* srcs, int nsrc, size_t count) {
  auto* out = static_cast<C*>(dst);
  auto* in = reinterpret_cast<const C* const*>(srcs);
  if (op == ReduceOp::kSum) return reduce_sources<NativeElement<C>, ReduceOp::kSum>(out, in, nsrc, count);
  return reduce_sources<NativeElement<C>, ReduceOp::kProd>(out, in, nsrc, count);
}

// bool: bytes are 0 or 1, and stay so: sum, max and or are OR; min, prod and and are AND.
void reduce_bool(ReduceOp op, void* dst, const void* const* srcs, int nsrc, size_t count) {
  auto* out = static_cast<uint8_t*>(dst);
  const bool all = op == ReduceOp::kMin || op == ReduceOp::kProd || op == ReduceOp::kAnd;
  for (size_t i = 0; i < count; ++i) {
    bool acc = static_cast<const uint8_t*>(srcs[0])[i] != 0;
    for (int s = 1; s < nsrc; ++s) {
      const bool v = static_cast<const uint8_t*>(srcs[s])[i] != 0;
      acc = op == ReduceOp::kXor ? acc != v : all ? (acc && v) : (acc || v);
    }
    out[i] = acc ? 1 : 0;
  }
}

}  // namespace

void reduce_arrays(DataType t, ReduceOp op, void* dst, const void* const* srcs, int nsrc, size_t count) {
  check_reduce(t, static_cast<int>(op), "reduce");
  if (nsrc <= 0 || count == 0) return;
  switch (t) {
    case DataType::kInt8: return reduce_by_op<NativeElement<int8_t>>(op, dst, srcs, nsrc, count);
    case DataType::kUint8: return reduce_by_op<NativeElement<uint8_t>>(op, dst, srcs, nsrc, count);
    case DataType::kInt16: return reduce_by_op<NativeElement<int16_t>>(op, dst, srcs, nsrc, count);
    case DataType::kUint16: return reduce_by_op<NativeElement<uint16_t>>(op, dst, srcs, nsrc, count);
    case DataType::kInt32: return reduce_by_op<NativeElement<int32_t>>(op, dst, srcs, nsrc, count);
    case DataType::kUint32: return reduce_by_op<NativeElement<uint32_t>>(op, dst, srcs, nsrc, count);
    case DataType::kInt64: return reduce_by_op<NativeElement<int64_t>>(op, dst, srcs, nsrc, count);
    case DataType::kUint64: return reduce_by_op<NativeElement<uint64_t>>(op, dst, srcs, nsrc, count);
    case DataType::kFloat16: return reduce_by_op<Float16Element>(op, dst, srcs, nsrc, count);
    case DataType::kBFloat16: return reduce_by_op<BFloat16Element>(op, dst, srcs, nsrc, count);
    case DataType::kFloat32: return reduce_by_op<NativeElement<float>>(op, dst, srcs, nsrc, count);
    case DataType::kFloat64: return reduce_by_op<NativeElement<double>>(op, dst, srcs, nsrc, count);
    case DataType::kBool: return reduce_bool(op, dst, srcs, nsrc, count);
    case DataType::kComplex64: return reduce_complex<std::complex<float>>(op, dst, srcs, nsrc, count);
    case DataType::kComplex128: return reduce_complex<std::complex<double>>(op, dst, srcs, nsrc, count);
    default: break;
  }
  raise(Status::kInvalidArgument, "reduce: %s elements cannot be reduced here", dtype_name(t));
}

// ---------------------------------------------------------------- fp32 rows

void accumulate_row(float* acc, const void* src, DataType t, size_t n) {
  switch (t) {
    case DataType::kFloat32:
      return combine_into<NativeElement<float>, ReduceOp::kSum>(acc, static_cast<const float*>(src), n);
    case DataType::kBFloat16:
      return combine_into<BFloat16Element, ReduceOp::kSum>(acc, static_cast<const uint16_t*>(src), n);
    case DataType::kFloat16:
      return combine_into<Float16Element, ReduceOp::kSum>(acc, static_cast<const uint16_t*>(src), n);
    case DataType::kFloat8E4M3FN:
    case DataType::kFloat8E4M3FNUZ: {
      const float* lut = t == DataType::kFloat8E4M3FN ? fp8_e4m3fn_table() : fp8_e4m3fnuz_table();
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) acc[i] += lut[s[i]];
      return;
    }
    case DataType::kFloat4E2M1x2: {
      const float* lut = fp4_e2m1_table();
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) {
        acc[2 * i] += lut[s[i] & 0xf];
        acc[2 * i + 1] += lut[s[i] >> 4];
      }
      return;
    }
    default: raise(Status::kInvalidArgument, "cannot sum %s elements in fp32", dtype_name(t));
  }
}

namespace {

template <typename T, T (*encode)(float)>
void narrow(void* dst, const float* src, size_t n) {
  auto* d = static_cast<T*>(dst);
  for (size_t i = 0; i < n; ++i) d[i] = encode(src[i]);
}

}  // namespace

void store_row(void* dst, const float* src, DataType t, size_t n) {
  switch (t) {
    case DataType::kFloat32: std::memcpy(dst, src, n * 4); return;
    case DataType::kBFloat16: return narrow<uint16_t, float_to_bf16>(dst, src, n);
    case DataType::kFloat16: return narrow<uint16_t, float_to_f16>(dst, src, n);
    case DataType::kFloat8E4M3FN: return narrow<uint8_t, float_to_fp8_e4m3fn>(dst, src, n);
    case DataType::kFloat8E4M3FNUZ: return narrow<uint8_t, float_to_fp8_e4m3fnuz>(dst, src, n);
    case DataType::kFloat4E2M1x2: {
      auto* d = static_cast<uint8_t*>(dst);
      for (size_t i = 0; i < n; ++i)
        d[i] = static_cast<uint8_t>(float_to_fp4_e2m1(src[2 * i]) | (float_to_fp4_e2m1(src[2 * i + 1]) << 4));
      return;
    }
    default: raise(Status::kInvalidArgument, "cannot store fp32 sums as %s elements", dtype_name(t));
  }
}

namespace {

#if defined(__SSE2__)
// 8 bf16 -> two vectors of 4 floats (a bf16 is the high half of its float).
inline void load_bf16x8(const uint16_t* p, __m128& lo, __m128& hi) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i zero = _mm_setzero_si128();
  lo = _mm_castsi128_ps(_mm_unpacklo_epi16(zero, v));
  hi = _mm_castsi128_ps(_mm_unpackhi_epi16(zero, v));
}

// float_to_bf16 on 4 lanes, as sign-extended 32-bit values (so that packs_epi32 keeps the bits).
inline __m128i to_bf16x4(__m128 f) {
  const __m128i b = _mm_castps_si128(f);
  const __m128i lsb = _mm_and_si128(_mm_srli_epi32(b, 16), _mm_set1_epi32(1));
  const __m128i rounded = _mm_srai_epi32(_mm_add_epi32(_mm_add_epi32(b, _mm_set1_epi32(0x7fff)), lsb), 16);
  const __m128i nan = _mm_or_si128(_mm_srai_epi32(b, 16), _mm_set1_epi32(0x40));
  const __m128i is_nan = _mm_castps_si128(_mm_cmpunord_ps(f, f));
  return _mm_or_si128(_mm_and_si128(is_nan, nan), _mm_andnot_si128(is_nan, rounded));
}
#endif

#if defined(MORI_REDUCE_AVX2)
// The same sums 8 lanes wide, for CPUs that have AVX2 (the build targets plain x86-64). Each
// element is still summed row by row in fp32, so the result is bit-identical to the SSE2 path.
__attribute__((target("avx2"))) inline __m256 load_bf16x8_avx2(const uint16_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

__attribute__((target("avx2"))) inline __m256i to_bf16x8_avx2(__m256 f) {
  const __m256i b = _mm256_castps_si256(f);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srai_epi32(_mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i nan = _mm256_or_si256(_mm256_srai_epi32(b, 16), _mm256_set1_epi32(0x40));
  const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(rounded, nan, is_nan);
}

// Two 8-lane results as 16 bf16 in order (packs works per 128-bit half: undo its interleave).
__attribute__((target("avx2"))) inline __m256i pack_bf16x16_avx2(__m256 a, __m256 b) {
  return _mm256_permute4x64_epi64(_mm256_packs_epi32(to_bf16x8_avx2(a), to_bf16x8_avx2(b)), 0xD8);
}

// Columns [0, n - n % 32); returns where it stopped.
__attribute__((target("avx2"))) size_t sum_rows_bf16_avx2(uint16_t* dst, const uint16_t* const* rows, int m, size_t n) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int r = 0; r < m; ++r) {
      const uint16_t* p = rows[r] + i;
      a0 = _mm256_add_ps(a0, load_bf16x8_avx2(p));
      a1 = _mm256_add_ps(a1, load_bf16x8_avx2(p + 8));
      a2 = _mm256_add_ps(a2, load_bf16x8_avx2(p + 16));
      a3 = _mm256_add_ps(a3, load_bf16x8_avx2(p + 24));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), pack_bf16x16_avx2(a0, a1));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 16), pack_bf16x16_avx2(a2, a3));
  }
  return i;
}

// Initialized before main (or at dlopen), possibly before libgcc's own CPU probe ran.
const bool kHasAvx2 = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0;
}();
#endif

}  // namespace

void sum_rows_bf16(uint16_t* dst, const uint16_t* const* rows, int m, size_t n) {
  size_t i = 0;
#if defined(MORI_REDUCE_AVX2)
  if (kHasAvx2) i = sum_rows_bf16_avx2(dst, rows, m, n);
#endif
#if defined(__SSE2__)
  for (; i + 16 <= n; i += 16) {
    __m128 a0 = _mm_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int r = 0; r < m; ++r) {
      __m128 lo, hi;
      load_bf16x8(rows[r] + i, lo, hi);
      a0 = _mm_add_ps(a0, lo);
      a1 = _mm_add_ps(a1, hi);
      load_bf16x8(rows[r] + i + 8, lo, hi);
      a2 = _mm_add_ps(a2, lo);
      a3 = _mm_add_ps(a3, hi);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm_packs_epi32(to_bf16x4(a0), to_bf16x4(a1)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + 8), _mm_packs_epi32(to_bf16x4(a2), to_bf16x4(a3)));
  }
#endif
  for (; i < n; ++i) {
    float acc = 0.0f;
    for (int r = 0; r < m; ++r) acc += bf16_to_float(rows[r][i]);
    dst[i] = float_to_bf16(acc);
  }
}

}  // namespace mori
