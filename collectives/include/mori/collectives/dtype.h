// SPDX-License-Identifier: MIT
// Element types and reduction operators the collectives understand. The numbering of
// DataType follows MORI's mori.ccl.DataType (Int8 = 0 ... Float64 = 11); bool and the
// complex types come after it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mori::collectives {

enum class DataType : int {
  kInt8 = 0, kUint8, kInt16, kUint16, kInt32, kUint32, kInt64, kUint64,
  kFloat16, kBFloat16, kFloat32, kFloat64,
  kBool, kComplex64, kComplex128,
};
constexpr int kNumDataTypes = 15;

enum class ReduceOp : int { kSum = 0, kMax = 1, kMin = 2 };

size_t size_of(DataType t);
const char* dtype_name(DataType t);
const char* reduce_op_name(ReduceOp op);
// Throws InvalidArgument (naming `caller`) for an out-of-range enum value.
DataType check_dtype(int t, const char* caller);
// Throws InvalidArgument when `op` is not defined on `t` (max/min of complex numbers).
ReduceOp check_reduce(DataType t, int op, const char* caller);

}  // namespace mori::collectives
