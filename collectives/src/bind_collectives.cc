// SPDX-License-Identifier: MIT
// mori._C.collectives
#include <pybind11/pybind11.h>

namespace py = pybind11;

void bind_collectives(py::module_& m) {}
