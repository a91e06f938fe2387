// SPDX-License-Identifier: MIT
// mori._C.DataType and mori._C.ReduceOp: the core's element types and reduction ops as Python
// IntEnums (mori.ccl and mori.ep re-export them), with their sizes and names.
#include <pybind11/native_enum.h>
#include <pybind11/pybind11.h>

#include <string>

#include "mori/core/dtype.h"
#include "mori/core/reduce.h"

namespace py = pybind11;

void bind_dtype(py::module_& m) {
  using mori::DataType;
  py::native_enum<DataType>(m, "DataType", "enum.IntEnum",
                            "Element types (mori/core/dtype.h); codes 0..11 are MORI's mori.ccl.DataType.")
      .value("Int8", DataType::kInt8)
      .value("Uint8", DataType::kUint8)
      .value("Int16", DataType::kInt16)
      .value("Uint16", DataType::kUint16)
      .value("Int32", DataType::kInt32)
      .value("Uint32", DataType::kUint32)
      .value("Int64", DataType::kInt64)
      .value("Uint64", DataType::kUint64)
      .value("Float16", DataType::kFloat16)
      .value("BFloat16", DataType::kBFloat16)
      .value("Float32", DataType::kFloat32)
      .value("Float64", DataType::kFloat64)
      .value("Bool", DataType::kBool)
      .value("Complex64", DataType::kComplex64)
      .value("Complex128", DataType::kComplex128)
      .value("Float8E4M3FN", DataType::kFloat8E4M3FN)
      .value("Float8E4M3FNUZ", DataType::kFloat8E4M3FNUZ)
      .value("Float4E2M1x2", DataType::kFloat4E2M1x2)
      .finalize();
  using mori::ReduceOp;
  py::native_enum<ReduceOp>(m, "ReduceOp", "enum.IntEnum",
                            "Reduction ops (mori/core/reduce.h); codes 0..2 are MORI's mori.ccl.ReduceOp.")
      .value("SUM", ReduceOp::kSum)
      .value("MAX", ReduceOp::kMax)
      .value("MIN", ReduceOp::kMin)
      .value("PROD", ReduceOp::kProd)
      .value("AND", ReduceOp::kAnd)
      .value("OR", ReduceOp::kOr)
      .value("XOR", ReduceOp::kXor)
      .finalize();
  m.def(
      "dtype_size", [](int t) { return mori::dtype_size(mori::check_dtype(t, "dtype_size")); }, py::arg("dtype"),
      "Bytes of one element of a DataType (the packed fp4 type: 1 byte for two values).");
  m.def(
      "dtype_name", [](int t) { return std::string(mori::dtype_name(mori::check_dtype(t, "dtype_name"))); },
      py::arg("dtype"), "torch's name of a DataType ('bfloat16', 'float8_e4m3fn', ...).");
}
