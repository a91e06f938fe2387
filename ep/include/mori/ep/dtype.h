// SPDX-License-Identifier: MIT
// What EP adds to the core's element types (mori/core/dtype.h): which ones combine can sum, and
// fp8_direct_cast's row encoding. Dispatch only copies bytes; combine decodes to fp32, sums with
// the core's reduction engine (mori/core/reduce.h) and encodes back.
#pragma once

#include <cstdint>

#include "mori/core/dtype.h"
#include "mori/core/float_formats.h"
#include "mori/core/reduce.h"

namespace mori::ep {

// True when combine can reduce it: float32, bfloat16, float16, the fp8 e4m3 types, packed fp4.
bool dtype_reducible(DataType t);

// Encodes a row of type `from` (float32, bfloat16 or float16) directly as fp8 e4m3fn (combine's
// fp8_direct_cast).
void cast_row_to_fp8(uint8_t* dst, const void* src, DataType from, int n);

}  // namespace mori::ep
