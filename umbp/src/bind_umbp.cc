// SPDX-License-Identifier: MIT
// mori._C.umbp: MORI-UMBP's native classes under MORI's names (re-exported by mori.umbp, mori.cpp).
#include <pybind11/pybind11.h>

namespace py = pybind11;

void bind_umbp(py::module_& m) {}
