// SPDX-License-Identifier: MIT
#include "mori/ep/blockwise.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "mori/core/env.h"
#include "mori/core/status.h"

namespace mori::ep {

namespace {

constexpr float kFp8Max = 448.0f;  // e4m3fn
constexpr float kFp4Max = 6.0f;    // e2m1

// The row as fp32 (one switch per row, so the loops below vectorize).
void load_row(float* dst, const void* src, DataType t, int n) {
  switch (t) {
    case DataType::kFloat32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DataType::kBFloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int i = 0; i < n; ++i) dst[i] = bf16_to_float(s[i]);
      return;
    }
    case DataType::kFloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int i = 0; i < n; ++i) dst[i] = f16_to_float(s[i]);
      return;
    }
    default:
      raise(Status::kInvalidArgument, "blockwise combine quantizes float32/bfloat16/float16 rows, got %s",
            dtype_name(t));
  }
}

}  // namespace

int blockwise_scale_dim() {
  const int v = static_cast<int>(env::get().fp8_combine_scale_dim);
  MORI_CHECK_ARG(v > 0, "MORI_FP8_COMBINE_SCALE_DIM must be > 0 (scales per combine row), got %d", v);
  return v;
}

BlockwiseLayout blockwise_layout(bool fp4, int hidden, int scale_dim) {
  BlockwiseLayout l;
  l.fp4 = fp4;
  l.hidden = hidden;
  l.block = (hidden + scale_dim - 1) / scale_dim;
  l.blocks = (hidden + l.block - 1) / l.block;
  return l;
}

void quantize_row_blockwise(uint8_t* dst, const void* src, DataType from, const BlockwiseLayout& l) {
  const float qmax = l.fp4 ? kFp4Max : kFp8Max;
  float* scales_out = reinterpret_cast<float*>(dst + l.code_bytes());
  thread_local std::vector<float> v;
  v.resize(static_cast<size_t>(l.hidden));
  load_row(v.data(), src, from, l.hidden);
  if (l.fp4) std::memset(dst, 0, l.code_bytes());
  for (int b = 0; b < l.blocks; ++b) {
    const int lo = b * l.block, hi = std::min(l.hidden, lo + l.block);
    float amax = 0.0f;
    for (int i = lo; i < hi; ++i) amax = std::fmax(amax, std::fabs(v[i]));
    const float scale = amax / qmax;  // 0 for an all-zero block: its codes are 0
    std::memcpy(&scales_out[b], &scale, 4);
    for (int at = lo; at < hi; ++at) {
      const float q = scale > 0.0f ? v[at] / scale : 0.0f;
      if (l.fp4)
        dst[at / 2] |= static_cast<uint8_t>(float_to_fp4_e2m1(q) << ((at & 1) * 4));
      else
        dst[at] = float_to_fp8_e4m3fn(q);
    }
  }
}

void accumulate_row_blockwise(float* acc, const uint8_t* src, const BlockwiseLayout& l) {
  const float* lut = l.fp4 ? fp4_e2m1_table() : fp8_e4m3fn_table();
  const uint8_t* scales = src + l.code_bytes();
  for (int b = 0; b < l.blocks; ++b) {
    float scale;
    std::memcpy(&scale, scales + 4 * b, 4);
    const int lo = b * l.block, hi = std::min(l.hidden, lo + l.block);
    for (int at = lo; at < hi; ++at) {
      const uint8_t code = l.fp4 ? static_cast<uint8_t>((src[at / 2] >> ((at & 1) * 4)) & 0xf) : src[at];
      acc[at] += lut[code] * scale;
    }
  }
}

}  // namespace mori::ep
