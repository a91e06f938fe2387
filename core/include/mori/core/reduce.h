// SPDX-License-Identifier: MIT
// The one reduction engine: element-wise combination of arrays over (element type, op), on the
// CPU. The C API's typed reductions instantiate it on their C types, MORI-CCL's host collectives
// call it by DataType, and EP's combine accumulates its rows with it in fp32.
//
// Every loop combines in source order (acc = op(acc, next)), so every PE that combines the same
// sources gets the same bits. Integers wrap (no signed-overflow UB); max/min keep the
// accumulator when a comparison is false (so a NaN already accumulated stays).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "mori/core/dtype.h"
#include "mori/core/float_formats.h"

namespace mori {

// Codes 0..2 are MORI-CCL's (mori.ccl.ReduceOp SUM = 0, MAX = 1, MIN = 2); the rest are the
// OpenSHMEM reductions.
enum class ReduceOp : int { kSum = 0, kMax = 1, kMin = 2, kProd = 3, kAnd = 4, kOr = 5, kXor = 6 };
constexpr int kNumReduceOps = 7;

const char* reduce_op_name(ReduceOp op);
// A code received from Python or C, checked against the type: InvalidArgument naming `caller`
// for an unknown code, max/min of complex numbers, bitwise ops on non-integers.
ReduceOp check_reduce(DataType t, int op, const char* caller);

// ---- the ops, on an accumulator type A

template <ReduceOp Op>
struct Combine {
  static constexpr ReduceOp kOp = Op;
  template <typename A>
  static A apply(A acc, A v) {
    if constexpr (Op == ReduceOp::kMax) {
      return acc < v ? v : acc;
    } else if constexpr (Op == ReduceOp::kMin) {
      return v < acc ? v : acc;
    } else if constexpr (Op == ReduceOp::kAnd) {
      return static_cast<A>(acc & v);
    } else if constexpr (Op == ReduceOp::kOr) {
      return static_cast<A>(acc | v);
    } else if constexpr (Op == ReduceOp::kXor) {
      return static_cast<A>(acc ^ v);
    } else if constexpr (std::is_integral_v<A>) {
      // Wrap in an unsigned type at least as wide as unsigned int (narrower ones would promote
      // to int, whose product can overflow).
      using W = std::conditional_t<(sizeof(A) < sizeof(unsigned)), unsigned, std::make_unsigned_t<A>>;
      const W a = static_cast<W>(acc), b = static_cast<W>(v);
      return static_cast<A>(Op == ReduceOp::kSum ? a + b : a * b);
    } else {
      return Op == ReduceOp::kSum ? acc + v : acc * v;
    }
  }
};

// ---- how a stored element loads into its accumulator and stores back

template <typename T>
struct NativeElement {
  using Storage = T;
  using Acc = T;
  static Acc load(T v) { return v; }
  static T store(Acc a) { return a; }
};
// float16 and bfloat16 accumulate in fp32 and round once, at the end.
struct Float16Element {
  using Storage = uint16_t;
  using Acc = float;
  static Acc load(uint16_t v) { return f16_to_float(v); }
  static uint16_t store(Acc a) { return float_to_f16(a); }
};
struct BFloat16Element {
  using Storage = uint16_t;
  using Acc = float;
  static Acc load(uint16_t v) { return bf16_to_float(v); }
  static uint16_t store(Acc a) { return float_to_bf16(a); }
};

// acc[i] = op(acc[i], load(in[i])) for i < n.
template <typename E, ReduceOp Op>
inline void combine_into(typename E::Acc* acc, const typename E::Storage* in, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = Combine<Op>::apply(acc[i], E::load(in[i]));
}

// dst[i] = op(srcs[0][i], ..., srcs[nsrc-1][i]) for i < count; dst may alias a source.
template <typename E, ReduceOp Op>
void reduce_sources(typename E::Storage* dst, const typename E::Storage* const* srcs, int nsrc, size_t count) {
  using A = typename E::Acc;
  using T = typename E::Storage;
  constexpr size_t kBlock = 512;  // the accumulator stays in L1 while the sources stream by
  A acc[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t m = std::min(kBlock, count - base);
    const T* s0 = srcs[0] + base;
    for (size_t j = 0; j < m; ++j) acc[j] = E::load(s0[j]);
    for (int s = 1; s < nsrc; ++s) combine_into<E, Op>(acc, srcs[s] + base, m);
    for (size_t j = 0; j < m; ++j) dst[base + j] = E::store(acc[j]);
  }
}

// The same by DataType (bool: sum and max are OR, min is AND; complex: sum only). InvalidArgument
// for an op `t` does not define (see check_reduce) or a type it cannot reduce (the fp8/fp4 ones).
void reduce_arrays(DataType t, ReduceOp op, void* dst, const void* const* srcs, int nsrc, size_t count);

// ---- fp32 accumulation of narrow rows (EP's combine)

// acc[j] += the values of n elements of type t at src (n * dtype_lanes(t) values); t is float32,
// bfloat16, float16, an fp8 e4m3 type or packed fp4. InvalidArgument for others.
void accumulate_row(float* acc, const void* src, DataType t, size_t n);
// Stores n elements of type t at dst from n * dtype_lanes(t) fp32 values, rounding once.
void store_row(void* dst, const float* src, DataType t, size_t n);
// dst[i] = bf16(((0 + rows[0][i]) + rows[1][i]) + ... + rows[m-1][i]) summed in fp32: the bits of
// accumulate_row over zeroed fp32 then store_row, in one vectorized pass.
void sum_rows_bf16(uint16_t* dst, const uint16_t* const* rows, int m, size_t n);

}  // namespace mori
