// SPDX-License-Identifier: MIT
// The element types every layer names: one enum, with sizes and names. Codes 0..11 follow
// MORI's mori.ccl.DataType (Int8 = 0 ... Float64 = 11); bool, the complex types and the
// narrow floats EP carries come after them. Python sees the enum as mori._C.DataType.
#pragma once

#include <cstddef>

namespace mori {

enum class DataType : int {
  kInt8 = 0,
  kUint8 = 1,
  kInt16 = 2,
  kUint16 = 3,
  kInt32 = 4,
  kUint32 = 5,
  kInt64 = 6,
  kUint64 = 7,
  kFloat16 = 8,
  kBFloat16 = 9,
  kFloat32 = 10,
  kFloat64 = 11,
  kBool = 12,
  kComplex64 = 13,
  kComplex128 = 14,
  kFloat8E4M3FN = 15,    // OCP fp8 (NVIDIA, CPU, gfx950)
  kFloat8E4M3FNUZ = 16,  // AMD gfx942 fp8: no infinities, no negative zero, NaN is 0x80
  kFloat4E2M1x2 = 17,    // fp4 e2m1, two values per byte (torch.float4_e2m1fn_x2), low nibble first
};
constexpr int kNumDataTypes = 18;

// Bytes of one element (the packed fp4 type: one byte for its two values).
size_t dtype_size(DataType t);
// Values per element: 2 for the packed fp4 type, else 1.
int dtype_lanes(DataType t);
// torch's spelling: "int8", "bfloat16", "float8_e4m3fn", "float4_e2m1fn_x2", ...
const char* dtype_name(DataType t);
// A code received from Python or C: InvalidArgument naming `caller` when out of range.
DataType check_dtype(int code, const char* caller);

}  // namespace mori
