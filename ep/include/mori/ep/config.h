// SPDX-License-Identifier: MIT
// EpConfig: the C++ side of mori.ops.EpDispatchCombineConfig, plus the sizes derived from it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mori::ep {

// Values are MORI's (EpDispatchCombineKernelType).
enum class KernelType : int {
  kIntraNode = 0,
  kInterNode = 1,
  kInterNodeV1 = 2,
  kInterNodeV1LL = 3,
  kAsyncLL = 4,
  kIntraNodeLL = 5,
};
const char* kernel_type_name(KernelType t);

// How combine moves expert outputs on the wire (MORI's EpDispatchCombineQuantType values).
enum class QuantType : int { kNone = 0, kFp8DirectCast = 1, kFp8Blockwise = 2, kFp4Blockwise = 3 };

// The fields of mori.ops.EpDispatchCombineConfig after data_type, in MORI's order, with the
// defaults of this struct: X(type, field, default). The struct, the binding's dict reader and
// mori._C.ep.config_fields() (which EpDispatchCombineConfig.native() walks) all expand it.
#define MORI_EP_CONFIG_FIELDS(X)                     \
  X(int, rank, 0)                                    \
  X(int, world_size, 1)                              \
  X(int, hidden_dim, 0)                              \
  X(int, scale_dim, 0)                               \
  X(int, scale_type_size, 0)                         \
  X(int, max_token_type_size, 4)                     \
  X(int, max_num_inp_token_per_rank, 0)              \
  X(int, num_experts_per_rank, 0)                    \
  X(int, num_experts_per_token, 0)                   \
  X(int, warp_num_per_block, 8)                      \
  X(int, block_num, 80)                              \
  X(int, max_total_recv_tokens, 0)                   \
  X(bool, use_external_inp_buf, true)                \
  X(KernelType, kernel_type, KernelType::kIntraNode) \
  X(int, gpu_per_node, 8)                            \
  X(int, rdma_block_num, 0)                          \
  X(int, num_qp_per_pe, 1)                           \
  X(QuantType, quant_type, QuantType::kNone)

struct EpConfig {
#define MORI_EP_CONFIG_MEMBER(type, field, def) type field = def;
  MORI_EP_CONFIG_FIELDS(MORI_EP_CONFIG_MEMBER)
#undef MORI_EP_CONFIG_MEMBER
  int num_threads = 0;  // CPU copy threads of this PE; 0: MORI_COPY_THREADS, else automatic

  // Throws InvalidArgument naming the first bad field.
  void validate() const;

  int num_experts() const { return world_size * num_experts_per_rank; }
  // Stride of the flat source position (MORI's MaxNumTokensToSend).
  int64_t max_send() const { return static_cast<int64_t>(world_size) * max_num_inp_token_per_rank; }
  int64_t max_recv_per_rank() const;
  int64_t max_recv() const { return static_cast<int64_t>(world_size) * max_recv_per_rank(); }
  size_t token_bytes() const { return static_cast<size_t>(hidden_dim) * max_token_type_size; }
  size_t scale_bytes() const { return static_cast<size_t>(scale_dim) * scale_type_size; }
  // Logical nodes for the inter-node kernel types: PE p is on node p / pes_per_node().
  int pes_per_node() const { return gpu_per_node < world_size ? gpu_per_node : world_size; }
  int num_nodes() const { return world_size / pes_per_node(); }
  bool blockwise() const { return quant_type == QuantType::kFp8Blockwise || quant_type == QuantType::kFp4Blockwise; }
};

}  // namespace mori::ep
