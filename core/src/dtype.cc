// SPDX-License-Identifier: MIT
#include "mori/core/dtype.h"

#include "mori/core/status.h"

namespace mori {

size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::kInt8:
    case DataType::kUint8:
    case DataType::kBool:
    case DataType::kFloat8E4M3FN:
    case DataType::kFloat8E4M3FNUZ:
    case DataType::kFloat4E2M1x2: return 1;
    case DataType::kInt16:
    case DataType::kUint16:
    case DataType::kFloat16:
    case DataType::kBFloat16: return 2;
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kFloat32: return 4;
    case DataType::kInt64:
    case DataType::kUint64:
    case DataType::kFloat64:
    case DataType::kComplex64: return 8;
    case DataType::kComplex128: return 16;
  }
  raise(Status::kInvalidArgument, "unknown dtype code %d", static_cast<int>(t));
}

int dtype_lanes(DataType t) { return t == DataType::kFloat4E2M1x2 ? 2 : 1; }

const char* dtype_name(DataType t) {
  static const char* const names[kNumDataTypes] = {
      "int8",  "uint8",     "int16",      "uint16",        "int32",           "uint32",
      "int64", "uint64",    "float16",    "bfloat16",      "float32",         "float64",
      "bool",  "complex64", "complex128", "float8_e4m3fn", "float8_e4m3fnuz", "float4_e2m1fn_x2"};
  const int i = static_cast<int>(t);
  return i >= 0 && i < kNumDataTypes ? names[i] : "?";
}

DataType check_dtype(int code, const char* caller) {
  if (code < 0 || code >= kNumDataTypes) raise(Status::kInvalidArgument, "%s: unknown dtype code %d", caller, code);
  return static_cast<DataType>(code);
}

}  // namespace mori
