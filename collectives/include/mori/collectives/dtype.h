// SPDX-License-Identifier: MIT
// Which of the core's element types and reduction ops MORI-CCL takes: the types up to
// Complex128 (MORI's Int8 = 0 ... Float64 = 11, then bool and complex) and sum, max, min.
// The enums, sizes, names and the reduction engine are the core's (mori/core/dtype.h,
// mori/core/reduce.h).
#pragma once

#include "mori/core/dtype.h"
#include "mori/core/reduce.h"

namespace mori::collectives {

// InvalidArgument (naming `caller`) for a code that is not one of MORI-CCL's types.
DataType check_dtype(int t, const char* caller);
// InvalidArgument when `op` is not sum, max or min, or not defined on `t` (max/min of complex).
ReduceOp check_reduce(DataType t, int op, const char* caller);

}  // namespace mori::collectives
