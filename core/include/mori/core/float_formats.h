// SPDX-License-Identifier: MIT
// The narrow float formats, to and from fp32: float16, bfloat16, fp8 e4m3fn / e4m3fnuz and
// fp4 e2m1. Widening is exact; narrowing rounds to nearest, ties to even, and keeps torch's
// rules for what does not fit (noted per function). Header-only: the reduction loops inline
// them. tests/core/test_float_formats.py checks every 16-bit and 8-bit pattern.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace mori {

inline float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// ---- bfloat16: the high half of an fp32.

inline float bf16_to_float(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }

// A NaN keeps its sign and payload's high bits and becomes quiet.
inline uint16_t float_to_bf16(float f) {
  uint32_t b = float_to_bits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

// ---- float16 (IEEE binary16).

inline float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (mant << 13));  // inf, NaN (payload kept)
  if (exp != 0) return bits_to_float(sign | ((exp + 112) << 23) | (mant << 13));
  // Zero or subnormal: mant * 2^-24, exact in fp32.
  return bits_to_float(sign | float_to_bits(static_cast<float>(mant) * 0x1p-24f));
}

// Overflow (|f| rounds to 65520 or more) gives infinity; every NaN becomes the quiet NaN 0x7e00
// with f's sign.
inline uint16_t float_to_f16(float f) {
  const uint32_t b = float_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000u);
  const uint32_t abs = b & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;
  if (abs >= 0x477ff000u) return sign | 0x7c00u;
  if (abs < 0x38800000u) {               // below 2^-14: a subnormal half (or zero)
    if (abs < 0x33000000u) return sign;  // below 2^-25: rounds to zero
    // value = man * 2^(e - 150); one half ulp is 2^-24, so shift man right by 126 - e.
    const uint32_t e = abs >> 23, man = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(e);
    uint32_t h = man >> shift;
    const uint32_t rem = man & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
    return sign | static_cast<uint16_t>(h);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 23-bit mantissa to 10 bits; a carry
  // out of the mantissa correctly bumps the exponent.
  const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

// ---- fp8 e4m3: 1 sign, 4 exponent, 3 mantissa bits. e4m3fn (bias 7) has no infinities and one
// NaN magnitude (0x7f); e4m3fnuz (bias 8) has no negative zero and one NaN, 0x80.

namespace float_formats_detail {

// value = (-1)^s * 2^(e - bias) * (1 + m/8); e == 0 is subnormal: 2^(1 - bias) * m/8.
inline float fp8_decode(uint8_t v, int bias) {
  const int e = (v >> 3) & 0xf, m = v & 7;
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m) / 8.0f, 1 - bias)
                           : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - bias);
  return (v & 0x80) ? -mag : mag;
}

struct Fp8Tables {
  static constexpr float kQuietNaN = __builtin_nanf("");  // positive, whatever the code's sign
  float fn[256], fnuz[256];
  Fp8Tables() {
    for (int i = 0; i < 256; ++i) {
      const uint8_t v = static_cast<uint8_t>(i);
      fn[i] = (v & 0x7f) == 0x7f ? kQuietNaN : fp8_decode(v, 7);
      fnuz[i] = v == 0x80 ? kQuietNaN : fp8_decode(v, 8);
    }
  }
};

inline const Fp8Tables& fp8_tables() {
  static const Fp8Tables tables;
  return tables;
}

// The 7 magnitude bits of |f| (fp32 bits without the sign) in e4m3 with exponent bias `bias`,
// rounded to nearest even; 0x80 when the rounded magnitude needs more than 7 bits.
inline uint32_t fp8_magnitude(uint32_t abs, int bias) {
  const uint32_t min_normal = static_cast<uint32_t>(127 + 1 - bias) << 23;
  if (abs < min_normal) {
    // Adding a power of two whose ulp is the subnormal step lets the FPU round, ties to even.
    const float magic = bits_to_float(static_cast<uint32_t>(127 + 1 - bias + 23 - 3) << 23);
    return float_to_bits(bits_to_float(abs) + magic) - float_to_bits(magic);  // 8: the smallest normal
  }
  abs += 0x7ffffu + ((abs >> 20) & 1u);
  const uint32_t code = (((abs >> 23) - 127 + bias) << 3) | ((abs >> 20) & 7u);
  return code > 0x7f ? 0x80 : code;
}

}  // namespace float_formats_detail

// 256-entry decode tables (NaN codes decode to the positive quiet NaN).
inline const float* fp8_e4m3fn_table() { return float_formats_detail::fp8_tables().fn; }
inline const float* fp8_e4m3fnuz_table() { return float_formats_detail::fp8_tables().fnuz; }
inline float fp8_e4m3fn_to_float(uint8_t v) { return fp8_e4m3fn_table()[v]; }
inline float fp8_e4m3fnuz_to_float(uint8_t v) { return fp8_e4m3fnuz_table()[v]; }

// Magnitudes past 448 (infinities included) saturate to +-448, as torch's cast does; NaN is 0x7f
// with f's sign.
inline uint8_t float_to_fp8_e4m3fn(float f) {
  const uint32_t b = float_to_bits(f);
  const uint8_t sign = static_cast<uint8_t>((b >> 24) & 0x80u);
  const uint32_t abs = b & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7f;
  if (abs == 0x7f800000u) return sign | 0x7e;
  const uint32_t code = float_formats_detail::fp8_magnitude(abs, 7);
  return sign | static_cast<uint8_t>(code >= 0x7f ? 0x7e : code);
}

// Magnitudes that round past 240, infinities and NaN become NaN (0x80), as torch's cast does;
// a result of zero is +0 (fnuz has no -0).
inline uint8_t float_to_fp8_e4m3fnuz(float f) {
  const uint32_t b = float_to_bits(f);
  const uint32_t abs = b & 0x7fffffffu;
  if (abs >= 0x7f800000u) return 0x80;
  const uint32_t code = float_formats_detail::fp8_magnitude(abs, 8);
  if (code > 0x7f) return 0x80;
  if (code == 0) return 0;
  return static_cast<uint8_t>(((b >> 24) & 0x80u) | code);
}

// ---- fp4 e2m1: 1 sign, 2 exponent, 1 mantissa bit; magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6.

inline const float* fp4_e2m1_table() {
  static constexpr float kTable[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                       -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  return kTable;
}

// Round to nearest even; magnitudes past 6 saturate to +-6; NaN becomes +6 (e2m1 has no NaN).
inline uint8_t float_to_fp4_e2m1(float f) {
  if (std::isnan(f)) return 7;
  const uint8_t sign = std::signbit(f) ? 8 : 0;
  const float a = std::fabs(f);
  // Each threshold is the midpoint to the next magnitude: strict where the lower code is even
  // (a tie stays there), inclusive where it is odd (a tie moves up to the even code).
  return sign | static_cast<uint8_t>((a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                                     (a >= 3.5f) + (a > 5.0f));
}

}  // namespace mori
