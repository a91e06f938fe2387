// SPDX-License-Identifier: MIT
// Blockwise-quantized combine rows (MORI's quant_type "fp8_blockwise" / "fp4_blockwise"): each
// row of `hidden` values is cut into blocks of ceil(hidden / scale_dim) values; each block gets
// one float32 scale (its largest magnitude over the format's largest value) and its values are
// sent as value / scale in fp8 e4m3fn or packed fp4 e2m1. The receiver multiplies back and sums
// in fp32. Wire row: the codes, then the scales (float32, one per block).
#pragma once

#include <cstddef>
#include <cstdint>

#include "mori/ep/dtype.h"

namespace mori::ep {

// Combine scales per row: MORI_FP8_COMBINE_SCALE_DIM (MORI's default 56), checked to be > 0.
int blockwise_scale_dim();

struct BlockwiseLayout {
  bool fp4 = false;
  int hidden = 0;
  int block = 0;   // values per block
  int blocks = 0;  // scales per row (<= scale_dim)
  size_t code_bytes() const { return fp4 ? (static_cast<size_t>(hidden) + 1) / 2 : static_cast<size_t>(hidden); }
  size_t row_bytes() const { return code_bytes() + static_cast<size_t>(blocks) * 4; }
};

BlockwiseLayout blockwise_layout(bool fp4, int hidden, int scale_dim);
// Quantizes one row of `from` (float32, bfloat16 or float16) into dst (layout.row_bytes()).
void quantize_row_blockwise(uint8_t* dst, const void* src, DataType from, const BlockwiseLayout& l);
// acc[0..hidden) += the dequantized row at src.
void accumulate_row_blockwise(float* acc, const uint8_t* src, const BlockwiseLayout& l);

}  // namespace mori::ep
