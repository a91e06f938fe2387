// SPDX-License-Identifier: MIT
// Builds without CUDA: the copy-engine allgather is absent, and Python says so.
#include <pybind11/pybind11.h>

namespace py = pybind11;

void bind_ce_allgather(py::module_& m) { m.attr("has_cuda") = false; }
