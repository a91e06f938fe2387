// SPDX-License-Identifier: MIT
// mori._C.ucx: what the UCX loader found (mori.transports.ucx_library()).
#include <pybind11/pybind11.h>

#include "transports/ucx/ucp_library.h"

namespace py = pybind11;

void bind_ucx(py::module_& m) {
  m.def(
      "library",
      [] {
        auto info = mori::ucx::library_info();
        py::dict d;
        d["available"] = info.available;
        d["version"] = info.version;
        d["path"] = info.path;
        d["why"] = info.why;
        return d;
      },
      "The UCX library loaded at run time: available, version, path, and why not when unavailable.");
}
