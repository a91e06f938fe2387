// SPDX-License-Identifier: MIT
// Python binding of the copy-engine allgather (CUDA builds).
#include <pybind11/pybind11.h>

#include "mori/collectives/ce_allgather.h"

namespace py = pybind11;
using mori::collectives::CeAllgather;

void bind_ce_allgather(py::module_& m) {
  m.attr("has_cuda") = true;
  py::class_<CeAllgather>(m, "CeAllgather")
      .def(py::init<size_t>(), py::arg("staging_bytes"),
           "Collective: allocate and map the symmetric window (current CUDA device).")
      .def(
          "run",
          [](CeAllgather& self, uintptr_t out, uintptr_t in, size_t bytes, uintptr_t stream) {
            py::gil_scoped_release nogil;
            self.run(reinterpret_cast<void*>(out), reinterpret_cast<const void*>(in), bytes, stream);
          },
          py::arg("out"), py::arg("inp"), py::arg("bytes"), py::arg("stream"))
      .def_property_readonly("staging_bytes", &CeAllgather::staging_bytes)
      .def_property_readonly("staging_ptr", [](const CeAllgather& s) { return reinterpret_cast<uintptr_t>(s.staging()); })
      .def_property_readonly("device", &CeAllgather::device)
      .def("stats", [](const CeAllgather& s) {
        py::dict d;
        d["calls"] = s.stats().calls;
        d["zero_copy"] = s.stats().zero_copy;
        d["bytes_pulled"] = s.stats().bytes_pulled;
        return d;
      });
}
