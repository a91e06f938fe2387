// SPDX-License-Identifier: MIT
// mori._C.umbp: the per-host server's entry points (mori umbp-server, python -m mori.umbp.server).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "mori/core/env.h"
#include "src/standalone_process_client.h"
#include "src/standalone_server.h"

namespace py = pybind11;
using namespace mori::umbp;

py::dict umbp_stats_dict(const ClientStats& s);  // bind_umbp.cc

namespace {

py::dict counters_dict(const ServerCounters& c) {
  py::dict d;
  d["connections"] = c.connections;
  d["active"] = c.active;
  d["refused"] = c.refused;
  d["requests"] = c.requests;
  d["errors"] = c.errors;
  d["bad_frames"] = c.bad_frames;
  d["regions"] = c.regions;
  d["direct_reads"] = c.direct_reads;
  return d;
}

}  // namespace

void bind_umbp_server(py::module_& m) {
  py::class_<StandaloneServer>(m, "StandaloneServer",
                               "A running MORI-UMBP per-host server (start it with start_server()).")
      .def_property_readonly("address", &StandaloneServer::address, "unix:///... address it listens at")
      .def("wait", &StandaloneServer::wait, py::arg("timeout_s") = -1.0, py::call_guard<py::gil_scoped_release>(),
           "Block until the server stops (stop(), idle exit) or timeout_s passes (< 0: no limit); True once stopped.")
      .def("stop", &StandaloneServer::stop, py::call_guard<py::gil_scoped_release>(),
           "Stop serving: close every connection, unmap every worker region, remove the socket. Idempotent.")
      .def(
          "counters", [](const StandaloneServer& s) { return counters_dict(s.counters()); },
          "Connections, refusals, requests, errors, bad frames, mapped regions.")
      .def(
          "stats", [](const StandaloneServer& s) { return umbp_stats_dict(s.store_stats()); },
          "The wrapped store's counters (UMBPClient.stats() of a worker shows the same).");

  m.def(
      "start_server",
      [](const std::string& address, int64_t idle_exit_timeout_ms, py::object config,
         std::optional<size_t> dram_capacity, std::optional<bool> ssd_enabled, std::optional<std::string> ssd_dir,
         std::optional<size_t> ssd_capacity) -> std::unique_ptr<StandaloneServer> {
        ServerOptions o;
        o.address = address;
        o.config = config.is_none() ? Config::from_environment() : config.cast<Config>();
        o.config.standalone_process.reset();  // the server's own store is the local one
        if (dram_capacity) o.config.dram.capacity_bytes = *dram_capacity;
        if (ssd_enabled) o.config.ssd.enabled = *ssd_enabled;
        if (ssd_dir) o.config.ssd.storage_dir = *ssd_dir;
        if (ssd_capacity) o.config.ssd.capacity_bytes = *ssd_capacity;
        o.idle_exit_timeout_ms = idle_exit_timeout_ms >= 0 ? idle_exit_timeout_ms
                                                           : mori::env::current().umbp_standalone_idle_exit_timeout_ms;
        py::gil_scoped_release release;
        return StandaloneServer::start(std::move(o));
      },
      py::arg("address") = "", py::arg("idle_exit_timeout_ms") = -1, py::arg("config") = py::none(),
      py::arg("dram_capacity") = py::none(), py::arg("ssd_enabled") = py::none(), py::arg("ssd_dir") = py::none(),
      py::arg("ssd_capacity") = py::none(),
      "Start a per-host server at `address` (\"\": default_server_address()) over a local store built from "
      "`config` (None: UMBPConfig.from_environment()) with the given overrides. Returns None when another live "
      "server already holds the address. idle_exit_timeout_ms < 0 reads UMBP_STANDALONE_IDLE_EXIT_TIMEOUT_MS.");
  m.def("default_server_address", &default_server_address, py::arg("node_id") = "",
        "unix:// address of this host's per-host server when none is configured.");
  m.def("set_default_server_command", &set_default_server_command, py::arg("argv"),
        "The program auto_start runs when UMBP_STANDALONE_BIN is unset (mori.umbp sets it).");
  m.def("default_server_command", &default_server_command);
}
