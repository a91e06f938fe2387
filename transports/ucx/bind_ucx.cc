// SPDX-License-Identifier: MIT
// mori._C.ucx: what the UCX loader found (mori.transports.ucx_library()) and the reading
// of UCX's endpoint report (for tests of the text format).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "mori/transports/ucx/ucp_library.h"
#include "mori/transports/ucx/ucp_report.h"

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
  m.def(
      "parse_endpoint_lanes",
      [](const std::string& report) {
        py::list out;
        for (const auto& lane : mori::ucx::parse_endpoint_lanes(report))
          out.append(py::make_tuple(lane.resource, lane.roles));
        return out;
      },
      py::arg("report"),
      "(resource, roles) of each distinct transport/device in ucp_ep_print_info's lane lines, in lane order.");
  m.def(
      "describe_lanes",
      [](const std::string& report) { return mori::ucx::describe_lanes(mori::ucx::parse_endpoint_lanes(report)); },
      py::arg("report"), "The lanes of an endpoint report as `mori info` prints them.");
}
