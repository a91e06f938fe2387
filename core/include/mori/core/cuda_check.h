// SPDX-License-Identifier: MIT
// The one device-error path: a failed CUDA runtime call becomes mori::Error(Status::kDevice)
// naming the call and CUDA's reason (Python: mori.core.errors.DeviceError), and
// CudaDeviceGuard makes a device current for a scope and gives the caller's back after.
// Header-only, so only the files built with CUDA include the CUDA runtime header.
#pragma once

#include <cuda_runtime_api.h>

#include <new>
#include <string>

#include "mori/core/status.h"

namespace mori {

// "cudaMemcpyAsync failed: invalid argument (cudaErrorInvalidValue)": for failures that are
// reported rather than thrown (a transfer's status).
inline std::string cuda_error_text(const char* what, cudaError_t err) {
  return format("%s failed: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
}

// Throws mori::Error(kDevice) for a failed call; `what` names it.
inline void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) raise(Status::kDevice, "%s", cuda_error_text(what, err).c_str());
}

// Makes `device` current for the scope and restores the caller's device after.
class CudaDeviceGuard {
 public:
  // Throws mori::Error(kDevice) when the device cannot be made current.
  explicit CudaDeviceGuard(int device) {
    enter(device);
    if (error_ != cudaSuccess)
      raise(Status::kDevice, "%s", cuda_error_text(format("cudaSetDevice(%d)", device).c_str(), error_).c_str());
  }
  // For callers that report rather than throw: check error() after.
  CudaDeviceGuard(int device, std::nothrow_t) noexcept { enter(device); }
  ~CudaDeviceGuard() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

  // cudaSuccess once `device` is current.
  cudaError_t error() const noexcept { return error_; }

 private:
  void enter(int device) noexcept {
    int current = -1;
    error_ = cudaGetDevice(&current);
    if (error_ == cudaSuccess && current == device) return;
    error_ = cudaSetDevice(device);
    if (error_ == cudaSuccess)
      previous_ = current;  // -1 when there was none to restore
    else
      (void)cudaGetLastError();  // not sticky: the next call must not see it
  }

  int previous_ = -1;
  cudaError_t error_ = cudaSuccess;
};

}  // namespace mori

// Throws mori::Error(kDevice) naming the call when it fails.
#define MORI_CUDA_CHECK(call) ::mori::check_cuda((call), #call)
