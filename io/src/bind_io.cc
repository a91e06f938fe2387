// SPDX-License-Identifier: MIT
// mori._C.io
#include <pybind11/pybind11.h>

namespace py = pybind11;

void bind_io(py::module_& m) {}
