// SPDX-License-Identifier: MIT
// Turns a failed CUDA runtime call into mori::Error naming the call and CUDA's reason.
#pragma once

#include <cuda_runtime_api.h>

#include "mori/core/status.h"

#define MORI_CUDA_CHECK(call)                                                                          \
  do {                                                                                                 \
    cudaError_t mori_cuda_err_ = (call);                                                               \
    if (mori_cuda_err_ != cudaSuccess)                                                                 \
      ::mori::raise(::mori::Status::kTransport, "%s failed: %s (%s)", #call,                          \
                    cudaGetErrorString(mori_cuda_err_), cudaGetErrorName(mori_cuda_err_));             \
  } while (0)

namespace mori {

// Makes `device` current for the scope and restores the caller's device after.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device) {
    cudaGetDevice(&previous_);
    if (previous_ != device) MORI_CUDA_CHECK(cudaSetDevice(device));
    else previous_ = -1;
  }
  ~CudaDeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace mori
