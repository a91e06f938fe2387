// SPDX-License-Identifier: MIT
#include "mori/ep/cuda/gpu_group.h"

#include <cuda_runtime.h>

#include "mori/core/status.h"

namespace mori::ep::cuda {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) raise(Status::kInternal, "GpuGroup: %s: %s", what, cudaGetErrorString(e));
}

struct DeviceGuard {
  int prev = 0;
  explicit DeviceGuard(int dev) {
    cudaGetDevice(&prev);
    check(cudaSetDevice(dev), "cudaSetDevice");
  }
  ~DeviceGuard() { cudaSetDevice(prev); }
};

size_t align_up(size_t v) { return (v + 255) / 256 * 256; }

}  // namespace

GpuGroup::GpuGroup(const std::vector<int>& devices, const Shape& shape, int max_row_bytes)
    : devices_(devices), shape_(shape) {
  const int world = static_cast<int>(devices.size());
  MORI_CHECK_ARG(world >= 1 && world <= kMaxPes, "GpuGroup: 1..%d devices, got %d", kMaxPes, world);
  MORI_CHECK_ARG(shape.world == world, "GpuGroup: shape.world %d != %d devices", shape.world, world);
  local_.resize(world);
  const size_t rows = static_cast<size_t>(shape.max_recv), k4 = static_cast<size_t>(shape.topk) * 4;
  const size_t stage_rows = static_cast<size_t>(world) * shape.max_inp;
  for (int r = 0; r < world; ++r) {
    DeviceGuard g(devices[r]);
    for (int q = 0; q < world; ++q) {
      if (q == r) continue;
      int ok = 0;
      check(cudaDeviceCanAccessPeer(&ok, devices[r], devices[q]), "cudaDeviceCanAccessPeer");
      if (!ok) raise(Status::kUnavailable, "GpuGroup: GPU %d cannot access GPU %d directly", devices[r], devices[q]);
      cudaError_t e = cudaDeviceEnablePeerAccess(devices[q], 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
      else check(e, "cudaDeviceEnablePeerAccess");
    }
    size_t off = 0;
    auto take = [&](size_t bytes) {
      size_t at = off;
      off = align_up(off + bytes);
      return at;
    };
    size_t o_tok = take(rows * max_row_bytes), o_w = take(rows * k4), o_idx = take(rows * k4),
           o_scale = take(rows * shape.scale_bytes + 1), o_src = take(rows * 4), o_counter = take(16),
           o_dsig = take(2 * world * 8), o_stage = take(stage_rows * max_row_bytes), o_stage_w = take(stage_rows * k4),
           o_csig = take(world * 8), o_map = take(static_cast<size_t>(shape.max_inp) * shape.topk * 8),
           o_total = take(4), o_state = take(state_words(world) * 8),
           o_out = take(static_cast<size_t>(shape.max_inp) * max_row_bytes),
           o_out_w = take(static_cast<size_t>(shape.max_inp) * k4);
    void* base = nullptr;
    check(cudaMalloc(&base, off), "cudaMalloc");
    blocks_.push_back(base);
    check(cudaMemset(base, 0, off), "cudaMemset");
    auto* b = static_cast<uint8_t*>(base);
    peers_.disp_tok[r] = b + o_tok;
    peers_.disp_w[r] = reinterpret_cast<float*>(b + o_w);
    peers_.disp_idx[r] = reinterpret_cast<int32_t*>(b + o_idx);
    peers_.disp_scale[r] = b + o_scale;
    peers_.disp_src[r] = reinterpret_cast<int32_t*>(b + o_src);
    peers_.counter[r] = reinterpret_cast<unsigned long long*>(b + o_counter);
    peers_.disp_sig[r] = reinterpret_cast<unsigned long long*>(b + o_dsig);
    peers_.comb_stage[r] = b + o_stage;
    peers_.comb_stage_w[r] = reinterpret_cast<float*>(b + o_stage_w);
    peers_.comb_sig[r] = reinterpret_cast<unsigned long long*>(b + o_csig);
    local_[r].dest_map = reinterpret_cast<int64_t*>(b + o_map);
    local_[r].total_recv = reinterpret_cast<int32_t*>(b + o_total);
    local_[r].state = reinterpret_cast<unsigned long long*>(b + o_state);
    local_[r].comb_out = b + o_out;
    local_[r].comb_out_w = reinterpret_cast<float*>(b + o_out_w);
  }
  for (int r = 0; r < world; ++r) {
    DeviceGuard g(devices[r]);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
}

GpuGroup::~GpuGroup() {
  for (size_t r = 0; r < blocks_.size(); ++r) {
    cudaSetDevice(devices_[r]);
    cudaFree(blocks_[r]);
  }
}

void GpuGroup::dispatch_send(int rank, const void* input, int row_bytes, const float* weights, const void* scales,
                             const int32_t* indices, int num_tokens, int blocks, int warps, void* stream) {
  DeviceGuard g(devices_.at(rank));
  MORI_CHECK_ARG(num_tokens >= 0 && num_tokens <= shape_.max_inp, "dispatch: %d tokens, max_num_inp_token_per_rank %d",
                 num_tokens, shape_.max_inp);
  cuda::dispatch_send(at(rank), peers_, local_[rank], input, row_bytes, weights, scales, indices, num_tokens, blocks,
                      warps, stream);
}

void GpuGroup::dispatch_recv(int rank, void* stream) {
  DeviceGuard g(devices_.at(rank));
  cuda::dispatch_recv(at(rank), peers_, local_[rank], stream);
}

void GpuGroup::combine_send(int rank, const void* input, int dtype, int hidden, const float* weights, int blocks,
                            int warps, void* stream) {
  DeviceGuard g(devices_.at(rank));
  cuda::combine_send(at(rank), peers_, local_[rank], input, dtype, hidden, weights, blocks, warps, stream);
}

void GpuGroup::combine_recv(int rank, int dtype, int hidden, bool weights, int num_tokens, int blocks, int warps,
                            void* stream) {
  DeviceGuard g(devices_.at(rank));
  cuda::combine_recv(at(rank), peers_, local_[rank], dtype, hidden, weights, num_tokens, blocks, warps, stream);
}

}  // namespace mori::ep::cuda
