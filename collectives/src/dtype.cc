// SPDX-License-Identifier: MIT
#include "mori/collectives/dtype.h"

#include "mori/core/status.h"

namespace mori::collectives {

size_t size_of(DataType t) {
  switch (t) {
    case DataType::kInt8: case DataType::kUint8: case DataType::kBool: return 1;
    case DataType::kInt16: case DataType::kUint16: case DataType::kFloat16: case DataType::kBFloat16: return 2;
    case DataType::kInt32: case DataType::kUint32: case DataType::kFloat32: return 4;
    case DataType::kInt64: case DataType::kUint64: case DataType::kFloat64: case DataType::kComplex64: return 8;
    case DataType::kComplex128: return 16;
  }
  return 0;
}

const char* dtype_name(DataType t) {
  static const char* names[kNumDataTypes] = {"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                                             "float16", "bfloat16", "float32", "float64", "bool", "complex64",
                                             "complex128"};
  int i = static_cast<int>(t);
  return i >= 0 && i < kNumDataTypes ? names[i] : "?";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

DataType check_dtype(int t, const char* caller) {
  if (t < 0 || t >= kNumDataTypes) raise(Status::kInvalidArgument, "%s: unknown dtype code %d", caller, t);
  return static_cast<DataType>(t);
}

ReduceOp check_reduce(DataType t, int op, const char* caller) {
  if (op < 0 || op > 2) raise(Status::kInvalidArgument, "%s: unknown reduce op code %d (sum=0, max=1, min=2)", caller, op);
  auto r = static_cast<ReduceOp>(op);
  if (r != ReduceOp::kSum && (t == DataType::kComplex64 || t == DataType::kComplex128))
    raise(Status::kInvalidArgument, "%s: op=%s is not defined for %s (complex numbers are not ordered)", caller,
          reduce_op_name(r), dtype_name(t));
  return r;
}

}  // namespace mori::collectives
