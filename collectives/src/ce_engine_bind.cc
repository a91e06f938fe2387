// SPDX-License-Identifier: MIT
// Python binding of the GPU push engine (CUDA builds).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <tuple>
#include <vector>

#include "mori/collectives/ce_engine.h"

namespace py = pybind11;
using mori::collectives::CeEngine;
using mori::collectives::CeRecv;
using mori::collectives::CeSend;

namespace {

void* p(uintptr_t a) { return reinterpret_cast<void*>(a); }

}  // namespace

void bind_ce_engine(py::module_& m) {
  m.attr("has_cuda") = true;
  py::class_<CeEngine>(m, "CeEngine")
      .def(py::init<size_t>(), py::arg("staging_bytes"),
           "Collective: flags and receive staging from the GPU symmetric heap.")
      .def(
          "exchange",
          [](CeEngine& self, const std::vector<std::tuple<int, uintptr_t, uintptr_t, size_t, bool, size_t>>& sends,
             const std::vector<std::tuple<int, uintptr_t, size_t, size_t, bool>>& recvs, uintptr_t local_dst,
             uintptr_t local_src, size_t local_bytes, uintptr_t stream) {
            std::vector<CeSend> s;
            s.reserve(sends.size());
            for (const auto& [pe, src, dst, bytes, direct, off] : sends)
              s.push_back(CeSend{pe, p(src), p(dst), bytes, direct, off});
            std::vector<CeRecv> r;
            r.reserve(recvs.size());
            for (const auto& [pe, copy_to, bytes, off, direct] : recvs)
              r.push_back(CeRecv{pe, p(copy_to), bytes, off, direct});
            py::gil_scoped_release nogil;
            self.exchange(s, r, p(local_dst), p(local_src), local_bytes, stream);
          },
          py::arg("sends"), py::arg("recvs"), py::arg("local_dst"), py::arg("local_src"), py::arg("local_bytes"),
          py::arg("stream"),
          "sends: (pe, src, dst, bytes, direct, staging_offset); recvs: (pe, copy_to or 0, bytes, staging_offset, "
          "direct).")
      .def(
          "local_copy",
          [](CeEngine& self, uintptr_t dst, uintptr_t src, size_t bytes, uintptr_t stream) {
            self.local_copy(p(dst), p(src), bytes, stream);
          },
          py::arg("dst"), py::arg("src"), py::arg("bytes"), py::arg("stream"))
      .def("slot", [](const CeEngine& self, int pe) { return reinterpret_cast<uintptr_t>(self.slot(pe)); })
      .def_property_readonly("slot_bytes", &CeEngine::slot_bytes)
      .def_property_readonly("device", &CeEngine::device)
      .def_static("chunks", &CeEngine::chunks, py::arg("bytes"), py::arg("direct") = false)
      .def("stats", [](const CeEngine& self) {
        py::dict d;
        d["calls"] = self.stats().calls;
        d["direct_bytes"] = self.stats().direct_bytes;
        d["staged_bytes"] = self.stats().staged_bytes;
        return d;
      });
}
