// SPDX-License-Identifier: MIT
// The callback bootstrap: one implemented in Python (an mpi4py communicator, a torch process
// group's store, ...) and driven from C++. Part of the Python module only (it needs pybind11).
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "mori/core/bootstrap.h"

namespace mori {

// `impl` has `rank`, `size`, `name`, `allgather(bytes) -> bytes` (the rank-ordered
// concatenation), `barrier()` and optionally `shutdown()`; see mori.core.bootstrap.
std::unique_ptr<Bootstrap> make_python_bootstrap(pybind11::object impl);

}  // namespace mori
