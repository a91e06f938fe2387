// SPDX-License-Identifier: MIT
// Launchers of the cuda transport's small kernels (defined in cuda_kernels.cu).
#pragma once

#include <cstdint>

#include "mori/transports/transport.h"

namespace mori::cuda_kernels {

// One thread applies `op` to the 4- or 8-byte word at `addr` (system scope) and writes the
// old value to `result` (host-mapped or device memory).
void launch_amo(void* addr, AmoOp op, int width, uint64_t operand, uint64_t compare, uint64_t* result, void* stream);
// One thread sets or adds `value` to the 64-bit signal at `addr` with release semantics at system scope.
void launch_signal(uint64_t* addr, uint64_t value, SignalOp op, void* stream);

}  // namespace mori::cuda_kernels
