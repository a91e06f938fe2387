// SPDX-License-Identifier: MIT
// Global and static variables are symmetric (OpenSHMEM requirement): at shmem_init
// the main program's writable data+bss is moved, in place, onto a POSIX shared
// memory object and registered with the runtime as a symmetric region, so peers
// on the host map it like the heap and RMA/AMOs on a global work like on the heap.
#pragma once

#include <cstddef>

namespace mori::capi {

// Collective. Returns the bytes made symmetric (0 when disabled by MORI_SHMEM_SYMMETRIC_DATA=0).
size_t make_data_symmetric();

}  // namespace mori::capi
