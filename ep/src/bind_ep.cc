// SPDX-License-Identifier: MIT
// mori._C.ep
#include <pybind11/pybind11.h>

namespace py = pybind11;

void bind_ep(py::module_& m) {}
