// SPDX-License-Identifier: MIT
// Launchers of the GPU heap's stream-ordered kernels (gpu_kernels.cu).
#pragma once

#include <cstddef>
#include <cstdint>

#include "mori/shmem/device_state.h"

namespace mori::shmem::gpu_kernels {

void launch_barrier(const DeviceState* state, void* stream);
void launch_wait(const DeviceState* state, uint64_t* signal, int cmp, uint64_t value, void* stream);
void launch_put_sm(const DeviceState* state, void* dst_sym, const void* src, size_t n, int pe, int blocks,
                   void* stream);

}  // namespace mori::shmem::gpu_kernels
