// SPDX-License-Identifier: MIT
#include "mori/ep/config.h"

#include <cstdint>
#include <initializer_list>
#include <limits>

#include "mori/core/status.h"

namespace mori::ep {

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// InvalidArgument naming `what` when the product of these config fields exceeds int32 (the
// kernels keep counts and row sizes in an int).
void check_int32_product(std::initializer_list<int64_t> factors, const char* what) {
  int64_t p = 1;
  for (int64_t f : factors)
    if (__builtin_mul_overflow(p, f, &p) || p > kInt32Max)
      ::mori::raise(Status::kInvalidArgument, "EpDispatchCombineConfig: %s overflows int32 (fields too large)", what);
}

}  // namespace

const char* kernel_type_name(KernelType t) {
  switch (t) {
    case KernelType::kIntraNode: return "IntraNode";
    case KernelType::kInterNode: return "InterNode";
    case KernelType::kInterNodeV1: return "InterNodeV1";
    case KernelType::kInterNodeV1LL: return "InterNodeV1LL";
    case KernelType::kAsyncLL: return "AsyncLL";
    case KernelType::kIntraNodeLL: return "IntraNodeLL";
  }
  return "?";
}

int64_t EpConfig::max_recv_per_rank() const {
  if (max_total_recv_tokens <= 0) return max_num_inp_token_per_rank;
  int64_t per = (static_cast<int64_t>(max_total_recv_tokens) + world_size - 1) / world_size;
  return per < max_num_inp_token_per_rank ? per : max_num_inp_token_per_rank;
}

void EpConfig::validate() const {
  MORI_CHECK_ARG(world_size >= 1, "EpDispatchCombineConfig.world_size must be >= 1, got %d", world_size);
  MORI_CHECK_ARG(rank >= 0 && rank < world_size, "EpDispatchCombineConfig.rank %d is outside [0, world_size=%d)", rank,
                 world_size);
  MORI_CHECK_ARG(hidden_dim > 0, "EpDispatchCombineConfig.hidden_dim must be > 0, got %d", hidden_dim);
  MORI_CHECK_ARG(scale_dim >= 0, "EpDispatchCombineConfig.scale_dim must be >= 0, got %d", scale_dim);
  MORI_CHECK_ARG(scale_dim == 0 || scale_type_size > 0,
                 "EpDispatchCombineConfig.scale_type_size must be > 0 when scale_dim > 0, got %d", scale_type_size);
  MORI_CHECK_ARG(max_token_type_size > 0 && max_token_type_size <= 8,
                 "EpDispatchCombineConfig.max_token_type_size must be 1..8 bytes, got %d", max_token_type_size);
  MORI_CHECK_ARG(max_num_inp_token_per_rank > 0,
                 "EpDispatchCombineConfig.max_num_inp_token_per_rank must be > 0, got %d", max_num_inp_token_per_rank);
  MORI_CHECK_ARG(num_experts_per_rank > 0, "EpDispatchCombineConfig.num_experts_per_rank must be > 0, got %d",
                 num_experts_per_rank);
  // Every product of fields that sizes something is checked before it is used (issue: the
  // num_experts() bound of the next check used to wrap negative).
  check_int32_product({world_size, num_experts_per_rank}, "world_size * num_experts_per_rank (the number of experts)");
  MORI_CHECK_ARG(num_experts_per_token > 0 && num_experts_per_token <= num_experts(),
                 "EpDispatchCombineConfig.num_experts_per_token must be in 1..%d (all experts), got %d", num_experts(),
                 num_experts_per_token);
  MORI_CHECK_ARG(warp_num_per_block > 0, "EpDispatchCombineConfig.warp_num_per_block must be > 0, got %d",
                 warp_num_per_block);
  MORI_CHECK_ARG(block_num > 0, "EpDispatchCombineConfig.block_num must be > 0, got %d", block_num);
  MORI_CHECK_ARG(max_total_recv_tokens >= 0, "EpDispatchCombineConfig.max_total_recv_tokens must be >= 0, got %d",
                 max_total_recv_tokens);
  MORI_CHECK_ARG(gpu_per_node > 0, "EpDispatchCombineConfig.gpu_per_node must be > 0, got %d", gpu_per_node);
  MORI_CHECK_ARG(world_size % pes_per_node() == 0,
                 "EpDispatchCombineConfig: world_size %d is not a multiple of gpu_per_node %d", world_size,
                 gpu_per_node);
  MORI_CHECK_ARG(pes_per_node() <= 32, "EpDispatchCombineConfig.gpu_per_node must be <= 32, got %d", gpu_per_node);
  MORI_CHECK_ARG(rdma_block_num >= 0, "EpDispatchCombineConfig.rdma_block_num must be >= 0, got %d", rdma_block_num);
  MORI_CHECK_ARG(num_qp_per_pe > 0, "EpDispatchCombineConfig.num_qp_per_pe must be > 0, got %d", num_qp_per_pe);
  // Flat source positions are int32 (MORI's format): src_rank * world * max_inp + token.
  MORI_CHECK_ARG(static_cast<int64_t>(world_size) * max_send() < (int64_t{1} << 31),
                 "EpDispatchCombineConfig: world_size^2 * max_num_inp_token_per_rank = %lld does not fit the int32 "
                 "source positions",
                 static_cast<long long>(static_cast<int64_t>(world_size) * max_send()));
  check_int32_product({hidden_dim, max_token_type_size}, "hidden_dim * max_token_type_size (bytes per row)");
  check_int32_product({scale_dim, scale_type_size}, "scale_dim * scale_type_size (scale bytes per row)");
  check_int32_product({max_num_inp_token_per_rank, num_experts_per_token},
                      "max_num_inp_token_per_rank * num_experts_per_token (routing entries)");
  // With rows < 2^31 (above) and row bytes < 2^31, every buffer size (rows x row bytes) fits int64.
}

}  // namespace mori::ep
