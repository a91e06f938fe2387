// SPDX-License-Identifier: MIT
// Element types the EP layer moves and reduces, and their float conversions.
// Dispatch only copies bytes; combine decodes to fp32, sums, and encodes back.
#pragma once

#include <cstdint>
#include <cstring>

namespace mori::ep {

// Python maps torch dtypes onto these codes (ep/dtypes.py).
enum class DType : int {
  kFloat32 = 0,
  kBFloat16 = 1,
  kFloat16 = 2,
  kFloat8E4M3FN = 3,    // OCP fp8 (NVIDIA, CPU, gfx950)
  kFloat8E4M3FNUZ = 4,  // AMD gfx942 fp8
  kOpaque1 = 5,         // any other 1-byte type: dispatch-only
  kOpaque2 = 6,
  kOpaque4 = 7,
  kFloat4E2M1x2 = 8,    // fp4 e2m1, two values per byte (torch.float4_e2m1fn_x2): low nibble first
};

int dtype_size(DType t);
// Values per element: 2 for the packed fp4 type, else 1 (accumulators hold n * lanes floats).
int dtype_lanes(DType t);
const char* dtype_name(DType t);
// True when combine can reduce it.
bool dtype_reducible(DType t);

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

inline float bf16_to_float(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }
// Round to nearest, ties to even; NaN stays a quiet NaN (torch's rule).
inline uint16_t float_to_bf16(float f) {
  uint32_t b = float_to_bits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

float f16_to_float(uint16_t h);
uint16_t float_to_f16(float f);

// Decode tables (256 entries each) for the fp8 formats.
const float* fp8_e4m3fn_table();
const float* fp8_e4m3fnuz_table();
// Round to nearest even. e4m3fn: magnitudes past 448 saturate to +-448, like torch's cast.
uint8_t float_to_fp8_e4m3fn(float f);
// e4m3fnuz: magnitudes that round past 240 become NaN (0x80), like torch's cast.
uint8_t float_to_fp8_e4m3fnuz(float f);

// fp4 e2m1 (1 sign, 2 exponent, 1 mantissa bit; magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6).
const float* fp4_e2m1_table();  // 16 entries, by nibble
// Round to nearest even; magnitudes past 6 saturate to +-6; NaN becomes +6 (e2m1 has no NaN).
uint8_t float_to_fp4_e2m1(float f);

// Adds n elements of type t at src into acc (fp32; n * dtype_lanes(t) values).
void accumulate_row(float* acc, const void* src, DType t, int n);
// Encodes n fp32 values into type t at dst.
void store_row(void* dst, const float* src, DType t, int n);
// dst[i] = bf16(((0 + rows[0][i]) + rows[1][i]) + ... + rows[m-1][i]) summed in fp32: the same
// bits as accumulate_row over the rows then store_row, in one pass that keeps the sums in
// registers (combine's common case, bf16 rows).
void sum_rows_bf16(uint16_t* dst, const uint16_t* const* rows, int m, int n);
// Encodes a row of type `from` directly as fp8 e4m3fn (combine's fp8_direct_cast).
void cast_row_to_fp8(uint8_t* dst, const void* src, DType from, int n);

}  // namespace mori::ep
