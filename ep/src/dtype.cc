// SPDX-License-Identifier: MIT
#include "mori/ep/dtype.h"

#include <cmath>
#include <limits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MORI_EP_AVX2 1
#endif

#include "mori/core/status.h"

namespace mori::ep {

int dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32: case DType::kOpaque4: return 4;
    case DType::kBFloat16: case DType::kFloat16: case DType::kOpaque2: return 2;
    case DType::kFloat8E4M3FN: case DType::kFloat8E4M3FNUZ: case DType::kOpaque1: case DType::kFloat4E2M1x2:
      return 1;
  }
  raise(Status::kInvalidArgument, "unknown EP dtype code %d", static_cast<int>(t));
}

int dtype_lanes(DType t) { return t == DType::kFloat4E2M1x2 ? 2 : 1; }

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
    case DType::kFloat8E4M3FN: return "float8_e4m3fn";
    case DType::kFloat8E4M3FNUZ: return "float8_e4m3fnuz";
    case DType::kOpaque1: return "1-byte";
    case DType::kOpaque2: return "2-byte";
    case DType::kOpaque4: return "4-byte";
    case DType::kFloat4E2M1x2: return "float4_e2m1fn_x2";
  }
  return "?";
}

bool dtype_reducible(DType t) {
  return t == DType::kFloat32 || t == DType::kBFloat16 || t == DType::kFloat16 || t == DType::kFloat8E4M3FN ||
         t == DType::kFloat8E4M3FNUZ || t == DType::kFloat4E2M1x2;
}

// ---------------------------------------------------------------- fp4 e2m1

const float* fp4_e2m1_table() {
  static const float table[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                  -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  return table;
}

uint8_t float_to_fp4_e2m1(float f) {
  if (std::isnan(f)) return 7;
  const uint8_t sign = std::signbit(f) ? 8 : 0;
  const float a = std::fabs(f);
  // Each threshold is the midpoint to the next magnitude: strict where the lower code is even
  // (a tie stays there), inclusive where it is odd (a tie moves up to the even code).
  const uint8_t code = static_cast<uint8_t>((a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                                            (a >= 3.5f) + (a > 5.0f));
  return sign | code;
}

// ---------------------------------------------------------------- fp16

float f16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  int exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  return bits_to_float(sign | (static_cast<uint32_t>(exp - 15 + 127) << 23) | (mant << 13));
}

uint16_t float_to_f16(float f) {
  uint32_t b = float_to_bits(f);
  uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000u);
  uint32_t abs = b & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;             // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;            // rounds to >= 65520: inf
  if (abs < 0x38800000u) {                                  // below 2^-14: subnormal half
    // Scale so that one half-subnormal ulp (2^-24) is 1.0, then round to nearest even.
    float v = bits_to_float(abs) * 16777216.0f;
    float r = std::nearbyint(v);  // default rounding mode: ties to even
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xfffu + mant_odd;
  uint32_t exp = (abs >> 23) - 127 + 15;
  return sign | static_cast<uint16_t>((exp << 10) | ((abs >> 13) & 0x3ffu));
}

// ---------------------------------------------------------------- fp8

namespace {

// value = (-1)^s * 2^(e - bias) * (1 + m/8), subnormal when e == 0: 2^(1 - bias) * m/8.
float fp8_decode(uint8_t v, int bias, bool fnuz) {
  if (fnuz) {
    if (v == 0x80) return std::numeric_limits<float>::quiet_NaN();
  } else if ((v & 0x7f) == 0x7f) {
    return std::numeric_limits<float>::quiet_NaN();
  }
  int s = v >> 7, e = (v >> 3) & 0xf, m = v & 7;
  float mag = e == 0 ? std::ldexp(static_cast<float>(m) / 8.0f, 1 - bias)
                     : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - bias);
  return s ? -mag : mag;
}

struct Fp8Tables {
  float fn[256], fnuz[256];
  Fp8Tables() {
    for (int i = 0; i < 256; ++i) {
      fn[i] = fp8_decode(static_cast<uint8_t>(i), 7, false);
      fnuz[i] = fp8_decode(static_cast<uint8_t>(i), 8, true);
    }
  }
};
const Fp8Tables& tables() {
  static const Fp8Tables t;
  return t;
}

// Encodes |f| (given as fp32 bits without sign) into the 7 magnitude bits of an e4m3 code
// with exponent bias `bias`, rounding to nearest even. Returns 0x80 when the rounded magnitude
// does not fit in 7 bits (caller decides what overflow means).
uint32_t fp8_magnitude(uint32_t abs, int bias) {
  // Smallest normal is 2^(1-bias). Below it, the grid is uniform with step 2^(1-bias-3).
  uint32_t min_normal_bits = static_cast<uint32_t>(127 + 1 - bias) << 23;
  if (abs < min_normal_bits) {
    // Adding 2^(1-bias+...) aligned so that the grid step becomes one unit in the low mantissa
    // bits lets the FPU do the ties-to-even rounding for us.
    float magic = bits_to_float(static_cast<uint32_t>(127 + 1 - bias + 23 - 3) << 23);
    uint32_t r = float_to_bits(bits_to_float(abs) + magic) - float_to_bits(magic);
    return r;  // 0..8; 8 is the smallest normal, which is also the right code
  }
  uint32_t mant_odd = (abs >> 20) & 1u;
  abs += 0x7ffffu + mant_odd;  // round the 23-bit mantissa to 3 bits, ties to even
  uint32_t e = (abs >> 23) - 127 + bias;
  uint32_t code = (e << 3) | ((abs >> 20) & 7u);
  return code > 0x7f ? 0x80 : code;
}

}  // namespace

const float* fp8_e4m3fn_table() { return tables().fn; }
const float* fp8_e4m3fnuz_table() { return tables().fnuz; }

uint8_t float_to_fp8_e4m3fn(float f) {
  uint32_t b = float_to_bits(f);
  uint8_t sign = static_cast<uint8_t>((b >> 24) & 0x80u);
  uint32_t abs = b & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7f;  // NaN
  // Past 448 (infinities included) saturates to +-448, as torch's cast does.
  if (abs == 0x7f800000u) return sign | 0x7e;
  uint32_t code = fp8_magnitude(abs, 7);
  if (code >= 0x7f) return sign | 0x7e;
  return sign | static_cast<uint8_t>(code);
}

uint8_t float_to_fp8_e4m3fnuz(float f) {
  uint32_t b = float_to_bits(f);
  uint32_t abs = b & 0x7fffffffu;
  if (abs >= 0x7f800000u) return 0x80;
  uint32_t code = fp8_magnitude(abs, 8);
  if (code > 0x7f) return 0x80;
  if (code == 0) return 0;  // no negative zero in fnuz
  return static_cast<uint8_t>(((b >> 24) & 0x80u) | code);
}

// ---------------------------------------------------------------- rows

void accumulate_row(float* acc, const void* src, DType t, int n) {
  switch (t) {
    case DType::kFloat32: {
      const float* s = static_cast<const float*>(src);
      for (int i = 0; i < n; ++i) acc[i] += s[i];
      return;
    }
    case DType::kBFloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int i = 0; i < n; ++i) acc[i] += bits_to_float(static_cast<uint32_t>(s[i]) << 16);
      return;
    }
    case DType::kFloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int i = 0; i < n; ++i) acc[i] += f16_to_float(s[i]);
      return;
    }
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E4M3FNUZ: {
      const float* lut = t == DType::kFloat8E4M3FN ? fp8_e4m3fn_table() : fp8_e4m3fnuz_table();
      const uint8_t* s = static_cast<const uint8_t*>(src);
      for (int i = 0; i < n; ++i) acc[i] += lut[s[i]];
      return;
    }
    case DType::kFloat4E2M1x2: {
      const float* lut = fp4_e2m1_table();
      const uint8_t* s = static_cast<const uint8_t*>(src);
      for (int i = 0; i < n; ++i) {
        acc[2 * i] += lut[s[i] & 0xf];
        acc[2 * i + 1] += lut[s[i] >> 4];
      }
      return;
    }
    default:
      raise(Status::kInvalidArgument, "combine cannot reduce %s elements", dtype_name(t));
  }
}

void store_row(void* dst, const float* src, DType t, int n) {
  switch (t) {
    case DType::kFloat32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::kBFloat16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int i = 0; i < n; ++i) d[i] = float_to_bf16(src[i]);
      return;
    }
    case DType::kFloat16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int i = 0; i < n; ++i) d[i] = float_to_f16(src[i]);
      return;
    }
    case DType::kFloat8E4M3FN: {
      uint8_t* d = static_cast<uint8_t*>(dst);
      for (int i = 0; i < n; ++i) d[i] = float_to_fp8_e4m3fn(src[i]);
      return;
    }
    case DType::kFloat8E4M3FNUZ: {
      uint8_t* d = static_cast<uint8_t*>(dst);
      for (int i = 0; i < n; ++i) d[i] = float_to_fp8_e4m3fnuz(src[i]);
      return;
    }
    case DType::kFloat4E2M1x2: {
      uint8_t* d = static_cast<uint8_t*>(dst);
      for (int i = 0; i < n; ++i)
        d[i] = static_cast<uint8_t>(float_to_fp4_e2m1(src[2 * i]) | (float_to_fp4_e2m1(src[2 * i + 1]) << 4));
      return;
    }
    default:
      raise(Status::kInvalidArgument, "combine cannot produce %s elements", dtype_name(t));
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

#if defined(MORI_EP_AVX2)
// The same sums 8 lanes wide, for CPUs that have AVX2 (the build targets plain x86-64). Each
// element is still summed row by row in fp32, so the result is bit-identical to the SSE2 path.
__attribute__((target("avx2"))) inline __m256 load_bf16x8_avx2(const uint16_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

__attribute__((target("avx2"))) inline __m256i to_bf16x8_avx2(__m256 f) {
  const __m256i b = _mm256_castps_si256(f);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srai_epi32(_mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i nan = _mm256_or_si256(_mm256_srai_epi32(b, 16), _mm256_set1_epi32(0x40));
  const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(rounded, nan, is_nan);
}

// Two 8-lane results as 16 bf16 in order (packs works per 128-bit half: undo its interleave).
__attribute__((target("avx2"))) inline __m256i pack_bf16x16_avx2(__m256 a, __m256 b) {
  return _mm256_permute4x64_epi64(_mm256_packs_epi32(to_bf16x8_avx2(a), to_bf16x8_avx2(b)), 0xD8);
}

// Columns [0, n - n % 32); returns where it stopped.
__attribute__((target("avx2"))) int sum_rows_bf16_avx2(uint16_t* dst, const uint16_t* const* rows, int m, int n) {
  int i = 0;
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

void sum_rows_bf16(uint16_t* dst, const uint16_t* const* rows, int m, int n) {
  int i = 0;
#if defined(MORI_EP_AVX2)
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

void cast_row_to_fp8(uint8_t* dst, const void* src, DType from, int n) {
  switch (from) {
    case DType::kFloat32: {
      const float* s = static_cast<const float*>(src);
      for (int i = 0; i < n; ++i) dst[i] = float_to_fp8_e4m3fn(s[i]);
      return;
    }
    case DType::kBFloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int i = 0; i < n; ++i) dst[i] = float_to_fp8_e4m3fn(bf16_to_float(s[i]));
      return;
    }
    case DType::kFloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int i = 0; i < n; ++i) dst[i] = float_to_fp8_e4m3fn(f16_to_float(s[i]));
      return;
    }
    default:
      raise(Status::kInvalidArgument, "fp8_direct_cast needs float32/bfloat16/float16 combine input, got %s",
            dtype_name(from));
  }
}

}  // namespace mori::ep
