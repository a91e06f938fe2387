// SPDX-License-Identifier: MIT
#include "mori/ep/dtype.h"

#include "mori/core/status.h"

namespace mori::ep {

bool dtype_reducible(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kBFloat16 || t == DataType::kFloat16 ||
         t == DataType::kFloat8E4M3FN || t == DataType::kFloat8E4M3FNUZ || t == DataType::kFloat4E2M1x2;
}

void cast_row_to_fp8(uint8_t* dst, const void* src, DataType from, int n) {
  switch (from) {
    case DataType::kFloat32: {
      const float* s = static_cast<const float*>(src);
      for (int i = 0; i < n; ++i) dst[i] = float_to_fp8_e4m3fn(s[i]);
      return;
    }
    case DataType::kBFloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int i = 0; i < n; ++i) dst[i] = float_to_fp8_e4m3fn(bf16_to_float(s[i]));
      return;
    }
    case DataType::kFloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int i = 0; i < n; ++i) dst[i] = float_to_fp8_e4m3fn(f16_to_float(s[i]));
      return;
    }
    default:
      raise(Status::kInvalidArgument, "fp8_direct_cast needs float32/bfloat16/float16 combine input, got %s",
            dtype_name(from));
  }
}

}  // namespace mori::ep
