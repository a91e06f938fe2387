// SPDX-License-Identifier: MIT
// Element-wise reduction of several same-length arrays into one, on the CPU.
#pragma once

#include <cstddef>

#include "mori/collectives/dtype.h"

namespace mori::collectives {

// dst[i] = op(srcs[0][i], srcs[1][i], ..., srcs[nsrc-1][i]) for i < count, combined in
// source order, so every PE that reduces the same sources gets the same bits. float16 and
// bfloat16 accumulate in float32 and round once; integers wrap; bool sum/max is OR, min is AND.
// dst may alias one of the sources.
void reduce_arrays(DataType t, ReduceOp op, void* dst, const void* const* srcs, int nsrc, size_t count);

}  // namespace mori::collectives
