// SPDX-License-Identifier: MIT
#include "mori/collectives/reduce.h"

#include <algorithm>
#include <complex>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "mori/core/status.h"

namespace mori::collectives {
namespace {

// ---- 16-bit floats: widen exactly, narrow with round-to-nearest-even.

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
  if (ax < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    if (ax < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to 0
    uint32_t e = ax >> 23, man = (ax & 0x7fffffu) | 0x800000u;
    int shift = 126 - static_cast<int>(e);  // 14 + (112 - (e - 127) ...) simplified: value = man * 2^(e-150)
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

// ---- how each storage type loads into its accumulator and stores back.

template <typename T>
struct Native {
  using Acc = T;
  static Acc load(T v) { return v; }
  static T store(Acc a) { return a; }
};
struct Half {
  using Acc = float;
  static Acc load(uint16_t v) { return half_to_float(v); }
  static uint16_t store(Acc a) { return float_to_half(a); }
};
struct BFloat {
  using Acc = float;
  static Acc load(uint16_t v) { return bf16_to_float(v); }
  static uint16_t store(Acc a) { return float_to_bf16(a); }
};

template <typename A>
A add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    // Wrap instead of signed overflow (undefined behaviour).
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template <typename T, typename Conv, ReduceOp Op>
void reduce_typed(void* dst, const void* const* srcs, int nsrc, size_t count) {
  using A = typename Conv::Acc;
  constexpr size_t kBlock = 512;  // accumulator stays in L1 while the sources stream by
  A acc[kBlock];
  T* out = static_cast<T*>(dst);
  for (size_t base = 0; base < count; base += kBlock) {
    size_t m = std::min(kBlock, count - base);
    const T* s0 = static_cast<const T*>(srcs[0]) + base;
    for (size_t j = 0; j < m; ++j) acc[j] = Conv::load(s0[j]);
    for (int s = 1; s < nsrc; ++s) {
      const T* sp = static_cast<const T*>(srcs[s]) + base;
      for (size_t j = 0; j < m; ++j) {
        A v = Conv::load(sp[j]);
        if constexpr (Op == ReduceOp::kSum) acc[j] = add(acc[j], v);
        else if constexpr (Op == ReduceOp::kMax) acc[j] = v > acc[j] ? v : acc[j];
        else acc[j] = v < acc[j] ? v : acc[j];
      }
    }
    for (size_t j = 0; j < m; ++j) out[base + j] = Conv::store(acc[j]);
  }
}

template <typename T, typename Conv>
void reduce_op(ReduceOp op, void* dst, const void* const* srcs, int nsrc, size_t count) {
  switch (op) {
    case ReduceOp::kSum: return reduce_typed<T, Conv, ReduceOp::kSum>(dst, srcs, nsrc, count);
    case ReduceOp::kMax: return reduce_typed<T, Conv, ReduceOp::kMax>(dst, srcs, nsrc, count);
    case ReduceOp::kMin: return reduce_typed<T, Conv, ReduceOp::kMin>(dst, srcs, nsrc, count);
  }
}

template <typename T>
void reduce_complex(void* dst, const void* const* srcs, int nsrc, size_t count) {
  T* out = static_cast<T*>(dst);
  for (size_t i = 0; i < count; ++i) {
    T acc = static_cast<const T*>(srcs[0])[i];
    for (int s = 1; s < nsrc; ++s) acc += static_cast<const T*>(srcs[s])[i];
    out[i] = acc;
  }
}

// bool: bytes are 0 or 1; sum and max are OR, min is AND (the result stays a valid bool).
void reduce_bool(ReduceOp op, void* dst, const void* const* srcs, int nsrc, size_t count) {
  uint8_t* out = static_cast<uint8_t*>(dst);
  for (size_t i = 0; i < count; ++i) {
    bool acc = static_cast<const uint8_t*>(srcs[0])[i] != 0;
    for (int s = 1; s < nsrc; ++s) {
      bool v = static_cast<const uint8_t*>(srcs[s])[i] != 0;
      acc = op == ReduceOp::kMin ? (acc && v) : (acc || v);
    }
    out[i] = acc ? 1 : 0;
  }
}

}  // namespace

void reduce_arrays(DataType t, ReduceOp op, void* dst, const void* const* srcs, int nsrc, size_t count) {
  if (nsrc <= 0 || count == 0) return;
  switch (t) {
    case DataType::kInt8: return reduce_op<int8_t, Native<int8_t>>(op, dst, srcs, nsrc, count);
    case DataType::kUint8: return reduce_op<uint8_t, Native<uint8_t>>(op, dst, srcs, nsrc, count);
    case DataType::kInt16: return reduce_op<int16_t, Native<int16_t>>(op, dst, srcs, nsrc, count);
    case DataType::kUint16: return reduce_op<uint16_t, Native<uint16_t>>(op, dst, srcs, nsrc, count);
    case DataType::kInt32: return reduce_op<int32_t, Native<int32_t>>(op, dst, srcs, nsrc, count);
    case DataType::kUint32: return reduce_op<uint32_t, Native<uint32_t>>(op, dst, srcs, nsrc, count);
    case DataType::kInt64: return reduce_op<int64_t, Native<int64_t>>(op, dst, srcs, nsrc, count);
    case DataType::kUint64: return reduce_op<uint64_t, Native<uint64_t>>(op, dst, srcs, nsrc, count);
    case DataType::kFloat16: return reduce_op<uint16_t, Half>(op, dst, srcs, nsrc, count);
    case DataType::kBFloat16: return reduce_op<uint16_t, BFloat>(op, dst, srcs, nsrc, count);
    case DataType::kFloat32: return reduce_op<float, Native<float>>(op, dst, srcs, nsrc, count);
    case DataType::kFloat64: return reduce_op<double, Native<double>>(op, dst, srcs, nsrc, count);
    case DataType::kBool: return reduce_bool(op, dst, srcs, nsrc, count);
    case DataType::kComplex64:
      check_reduce(t, static_cast<int>(op), "reduce");
      return reduce_complex<std::complex<float>>(dst, srcs, nsrc, count);
    case DataType::kComplex128:
      check_reduce(t, static_cast<int>(op), "reduce");
      return reduce_complex<std::complex<double>>(dst, srcs, nsrc, count);
  }
  raise(Status::kInvalidArgument, "reduce: unknown dtype %d", static_cast<int>(t));
}

}  // namespace mori::collectives
