// SPDX-License-Identifier: MIT
// Checks core/include/mori/core/float_formats.h bit for bit against the two implementations it
// replaced (issue 30: collectives/src/reduce.cc's fp16/bf16 and ep/src/dtype.cc's fp16/bf16/fp8/
// fp4), kept below verbatim as the oracle. Decoding is checked on every 16-bit / 8-bit / 4-bit
// pattern; encoding on every fp32 whose high 16 bits are any pattern and whose low 16 bits are
// each of a set chosen around every rounding boundary (plus seeded random ones), and on every
// exact midpoint between neighbouring codes and its fp32 neighbours. `--all-floats` encodes
// all 2^32 fp32 patterns instead (minutes; not run by the test suite).
// Prints one JSON line with the counts checked; exits 1 at the first difference, naming it.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mori/core/float_formats.h"

namespace before_collectives {  // collectives/src/reduce.cc before issue 30

float half_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal: normalize
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    bits = sign | ((112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (ax < 0x38800000u) {                                      // below the smallest normal half: subnormal or zero
    if (ax < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to 0
    uint32_t e = ax >> 23, man = (ax & 0x7fffffu) | 0x800000u;
    int shift = 126 - static_cast<int>(e);
    uint32_t h = man >> shift, rem = man & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = ((ax - 0x38000000u) >> 13), rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float bf16_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet nan
  x += 0x7fffu + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace before_collectives

namespace before_ep {  // ep/include/mori/ep/dtype.h + ep/src/dtype.cc before issue 30

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
inline uint16_t float_to_bf16(float f) {
  uint32_t b = float_to_bits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

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
  if (abs > 0x7f800000u) return sign | 0x7e00u;
  if (abs >= 0x477ff000u) return sign | 0x7c00u;
  if (abs < 0x38800000u) {
    float v = bits_to_float(abs) * 16777216.0f;
    float r = std::nearbyint(v);
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xfffu + mant_odd;
  uint32_t exp = (abs >> 23) - 127 + 15;
  return sign | static_cast<uint16_t>((exp << 10) | ((abs >> 13) & 0x3ffu));
}

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

uint32_t fp8_magnitude(uint32_t abs, int bias) {
  uint32_t min_normal_bits = static_cast<uint32_t>(127 + 1 - bias) << 23;
  if (abs < min_normal_bits) {
    float magic = bits_to_float(static_cast<uint32_t>(127 + 1 - bias + 23 - 3) << 23);
    uint32_t r = float_to_bits(bits_to_float(abs) + magic) - float_to_bits(magic);
    return r;
  }
  uint32_t mant_odd = (abs >> 20) & 1u;
  abs += 0x7ffffu + mant_odd;
  uint32_t e = (abs >> 23) - 127 + bias;
  uint32_t code = (e << 3) | ((abs >> 20) & 7u);
  return code > 0x7f ? 0x80 : code;
}

uint8_t float_to_fp8_e4m3fn(float f) {
  uint32_t b = float_to_bits(f);
  uint8_t sign = static_cast<uint8_t>((b >> 24) & 0x80u);
  uint32_t abs = b & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7f;
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
  if (code == 0) return 0;
  return static_cast<uint8_t>(((b >> 24) & 0x80u) | code);
}

const float kFp4[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                        -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

uint8_t float_to_fp4_e2m1(float f) {
  if (std::isnan(f)) return 7;
  const uint8_t sign = std::signbit(f) ? 8 : 0;
  const float a = std::fabs(f);
  const uint8_t code = static_cast<uint8_t>((a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                                            (a >= 3.5f) + (a > 5.0f));
  return sign | code;
}

}  // namespace before_ep

namespace {

using mori::bits_to_float;
using mori::float_to_bits;

uint64_t g_checked = 0;

[[noreturn]] void differ(const char* what, uint32_t input, uint32_t kept, uint32_t old, const char* which) {
  std::printf("{\"ok\": false, \"check\": \"%s\", \"input\": \"0x%08x\", \"kept\": \"0x%08x\", \"%s\": \"0x%08x\"}\n",
              what, input, kept, which, old);
  std::exit(1);
}

void expect(const char* what, uint32_t input, uint32_t kept, uint32_t old, const char* which) {
  ++g_checked;
  if (kept != old) differ(what, input, kept, old, which);
}

// Decoding: every pattern of each format.
void check_decoders() {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t v = static_cast<uint16_t>(h);
    const uint32_t kept_f16 = float_to_bits(mori::f16_to_float(v));
    expect("f16_to_float", h, kept_f16, float_to_bits(before_collectives::half_to_float(v)), "collectives");
    expect("f16_to_float", h, kept_f16, float_to_bits(before_ep::f16_to_float(v)), "ep");
    const uint32_t kept_bf16 = float_to_bits(mori::bf16_to_float(v));
    expect("bf16_to_float", h, kept_bf16, float_to_bits(before_collectives::bf16_to_float(v)), "collectives");
    expect("bf16_to_float", h, kept_bf16, float_to_bits(before_ep::bf16_to_float(v)), "ep");
  }
  for (uint32_t b = 0; b < 256; ++b) {
    const uint8_t v = static_cast<uint8_t>(b);
    expect("fp8_e4m3fn_to_float", b, float_to_bits(mori::fp8_e4m3fn_to_float(v)),
           float_to_bits(before_ep::fp8_decode(v, 7, false)), "ep");
    expect("fp8_e4m3fnuz_to_float", b, float_to_bits(mori::fp8_e4m3fnuz_to_float(v)),
           float_to_bits(before_ep::fp8_decode(v, 8, true)), "ep");
  }
  for (uint32_t n = 0; n < 16; ++n)
    expect("fp4_e2m1_table", n, float_to_bits(mori::fp4_e2m1_table()[n]), float_to_bits(before_ep::kFp4[n]), "ep");
}

// Encoding one fp32 pattern into every format.
inline void check_encoders(uint32_t x) {
  const float f = bits_to_float(x);
  const uint32_t f16 = mori::float_to_f16(f);
  expect("float_to_f16", x, f16, before_collectives::float_to_half(f), "collectives");
  expect("float_to_f16", x, f16, before_ep::float_to_f16(f), "ep");
  const uint32_t bf16 = mori::float_to_bf16(f);
  expect("float_to_bf16", x, bf16, before_collectives::float_to_bf16(f), "collectives");
  expect("float_to_bf16", x, bf16, before_ep::float_to_bf16(f), "ep");
  expect("float_to_fp8_e4m3fn", x, mori::float_to_fp8_e4m3fn(f), before_ep::float_to_fp8_e4m3fn(f), "ep");
  expect("float_to_fp8_e4m3fnuz", x, mori::float_to_fp8_e4m3fnuz(f), before_ep::float_to_fp8_e4m3fnuz(f), "ep");
  expect("float_to_fp4_e2m1", x, mori::float_to_fp4_e2m1(f), before_ep::float_to_fp4_e2m1(f), "ep");
}

// Every decoded code, each midpoint between neighbouring codes, and their fp32 neighbours.
void check_midpoints(const std::vector<float>& codes) {
  for (size_t i = 0; i < codes.size(); ++i) {
    const float a = codes[i];
    if (std::isnan(a)) continue;
    for (size_t j = i + 1; j < codes.size() && j < i + 2; ++j) {
      const float b = codes[j];
      if (std::isnan(b) || std::signbit(a) != std::signbit(b)) continue;
      const uint32_t mid = float_to_bits(static_cast<float>((static_cast<double>(a) + b) / 2));
      for (uint32_t d : {mid - 1, mid, mid + 1}) check_encoders(d);
    }
    const uint32_t x = float_to_bits(a);
    for (uint32_t d : {x - 1, x, x + 1}) check_encoders(d);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool all_floats = argc > 1 && std::string(argv[1]) == "--all-floats";
  check_decoders();
  const uint64_t decoded = g_checked;
  if (all_floats) {
    for (uint64_t x = 0; x <= 0xffffffffull; ++x) check_encoders(static_cast<uint32_t>(x));
  } else {
    // fp16 rounds at bit 12 (sticky bits 0..11), bf16 at bit 15, fp8 at bit 19: these low halves
    // put every format exactly on, just below and just above a tie, with and without sticky bits.
    std::vector<uint32_t> lows = {0x0000, 0x0001, 0x0800, 0x0fff, 0x1000, 0x1001, 0x1fff,
                                  0x2000, 0x2fff, 0x3000, 0x3001, 0x6000, 0x7fff, 0x8000,
                                  0x8001, 0x9000, 0xc000, 0xefff, 0xf000, 0xf001, 0xffff};
    std::mt19937 rng(30);
    for (int i = 0; i < 11; ++i) lows.push_back(rng() & 0xffffu);
    for (uint32_t hi = 0; hi < 65536; ++hi)
      for (uint32_t lo : lows) check_encoders((hi << 16) | lo);
    for (int fmt = 0; fmt < 4; ++fmt) {
      std::vector<float> codes;  // ascending magnitude per sign, so neighbours are adjacent
      if (fmt == 0)
        for (uint32_t s : {0u, 0x8000u})
          for (uint32_t m = 0; m < 0x7c01; ++m) codes.push_back(mori::f16_to_float(static_cast<uint16_t>(s | m)));
      if (fmt == 1)
        for (uint32_t s : {0u, 0x80u})
          for (uint32_t m = 0; m < 0x7f; ++m) codes.push_back(mori::fp8_e4m3fn_to_float(static_cast<uint8_t>(s | m)));
      if (fmt == 2)
        for (uint32_t s : {0u, 0x80u})
          for (uint32_t m = 0; m < 0x80; ++m) codes.push_back(mori::fp8_e4m3fnuz_to_float(static_cast<uint8_t>(s | m)));
      if (fmt == 3)
        for (uint32_t n = 0; n < 16; ++n) codes.push_back(mori::fp4_e2m1_table()[n]);
      check_midpoints(codes);
    }
  }
  std::printf("{\"ok\": true, \"decoded\": %" PRIu64 ", \"encoded\": %" PRIu64 ", \"all_floats\": %s}\n", decoded,
              (g_checked - decoded) / 7, all_floats ? "true" : "false");
  return 0;
}
