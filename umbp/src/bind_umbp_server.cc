// SPDX-License-Identifier: MIT
// mori._C.umbp: the per-host server's entry points (mori umbp-server).
#include <pybind11/pybind11.h>

namespace py = pybind11;

void bind_umbp_server(py::module_& m) {}
