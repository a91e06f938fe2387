// SPDX-License-Identifier: MIT
// GpuGroup: one process driving the IntraNode CUDA kernels for several GPUs of a node, each
// GPU one EP rank, buffers in cudaMalloc'd device memory reached by peer access (NVLink).
// It is how the kernels are tested and benchmarked on a GPU machine independently of the
// multi-process GPU symmetric heap; the kernels themselves take plain per-PE pointers.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mori/ep/cuda/intranode.h"

namespace mori::ep::cuda {

class GpuGroup {
 public:
  // shape.rank is ignored (one rank per device, in order); max_row_bytes bounds hidden x element size.
  GpuGroup(const std::vector<int>& devices, const Shape& shape, int max_row_bytes);
  ~GpuGroup();
  GpuGroup(const GpuGroup&) = delete;
  GpuGroup& operator=(const GpuGroup&) = delete;

  int world() const { return shape_.world; }
  int device(int rank) const { return devices_.at(rank); }
  const Shape& shape() const { return shape_; }

  void dispatch_send(int rank, const void* input, int row_bytes, const float* weights, const void* scales,
                     const int32_t* indices, int num_tokens, int blocks, int warps, void* stream);
  void dispatch_recv(int rank, void* stream);
  void combine_send(int rank, const void* input, int dtype, int hidden, const float* weights, int blocks, int warps,
                    void* stream);
  void combine_recv(int rank, int dtype, int hidden, bool weights, int num_tokens, int blocks, int warps,
                    void* stream);

  // Device addresses of rank's buffers (outputs are views over these).
  uintptr_t disp_tok(int rank) const { return reinterpret_cast<uintptr_t>(peers_.disp_tok[rank]); }
  uintptr_t disp_w(int rank) const { return reinterpret_cast<uintptr_t>(peers_.disp_w[rank]); }
  uintptr_t disp_idx(int rank) const { return reinterpret_cast<uintptr_t>(peers_.disp_idx[rank]); }
  uintptr_t disp_scale(int rank) const { return reinterpret_cast<uintptr_t>(peers_.disp_scale[rank]); }
  uintptr_t disp_src(int rank) const { return reinterpret_cast<uintptr_t>(peers_.disp_src[rank]); }
  uintptr_t total_recv(int rank) const { return reinterpret_cast<uintptr_t>(local_[rank].total_recv); }
  uintptr_t comb_out(int rank) const { return reinterpret_cast<uintptr_t>(local_[rank].comb_out); }
  uintptr_t comb_out_w(int rank) const { return reinterpret_cast<uintptr_t>(local_[rank].comb_out_w); }

 private:
  Shape at(int rank) const {
    Shape s = shape_;
    s.rank = rank;
    return s;
  }
  std::vector<int> devices_;
  Shape shape_;
  Peers peers_{};
  std::vector<Local> local_;
  std::vector<void*> blocks_;
};

}  // namespace mori::ep::cuda
