// SPDX-License-Identifier: MIT
// mori._C: one extension module; each layer fills its own submodule.
#include <pybind11/pybind11.h>

#include "mori/core/status.h"
#include "mori/shmem/runtime.h"

namespace py = pybind11;

void bind_core(py::module_& m);
void bind_shmem(py::module_& m);
void bind_collectives(py::module_& m);
void bind_ep(py::module_& m);
void bind_io(py::module_& m);
void bind_ucx(py::module_& m);
void bind_umbp(py::module_& m);
void bind_umbp_server(py::module_& m);
void bind_ssd_tier(py::module_& m);
void bind_umbp_master(py::module_& m);

PYBIND11_MODULE(_C, m) {
  m.doc() = "MORI native core";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const mori::Error& e) {
      // A peer lost: let the runtime record which one it knows lost first (a transport may have
      // raised this without asking it), so that same-host PEs that see this process leave name
      // that PE, not this one (issue 29 item 10).
      if (e.status() == mori::Status::kRemote && mori::shmem::Runtime::initialized()) {
        try {
          mori::shmem::Runtime::get("error").check_peers("error");
        } catch (const mori::Error&) {
        }
      }
      // Classes live in Python (mori.core.errors) so they can also inherit builtins.
      py::object errors = py::module_::import("mori.core.errors");
      py::object cls = errors.attr("error_class")(static_cast<int>(e.status()));
      PyErr_SetObject(cls.ptr(), py::str(e.what()).ptr());
    }
  });
  auto core = m.def_submodule("core", "bootstrap, topology, env, heap");
  bind_core(core);
  auto shmem = m.def_submodule("shmem", "symmetric memory runtime");
  bind_shmem(shmem);
  auto collectives = m.def_submodule("collectives", "collectives (mori.ccl)");
  bind_collectives(collectives);
  auto ep = m.def_submodule("ep", "MoE dispatch/combine (mori.ops)");
  bind_ep(ep);
  auto io = m.def_submodule("io", "transfer engine");
  bind_io(io);
  auto ucx = m.def_submodule("ucx", "UCX, loaded at run time");
  bind_ucx(ucx);
  auto umbp = m.def_submodule("umbp", "tiered KV-cache store (mori.umbp)");
  bind_umbp(umbp);
  bind_umbp_server(umbp);
  bind_ssd_tier(umbp);
  bind_umbp_master(umbp);
  // MORI's users import TransferStatus from the flat native module (mori.cpp).
  m.attr("TransferStatus") = io.attr("TransferStatus");
  // ... and the UMBP classes and enums (mori.umbp re-exports them from there).
  for (auto item : umbp.attr("__dict__").cast<py::dict>()) {
    const std::string name = py::str(item.first);
    if (name.rfind("UMBP", 0) == 0 || name == "CacheRemoteAdmission") m.attr(name.c_str()) = item.second;
  }
  // And MORI-IO's other native names there (mori.cpp.IOEngine, the enums, ...).
  for (const char* name :
       {"IOEngine", "IOEngineSession", "IOEngineConfig", "EngineDesc", "MemoryDesc", "BackendType",
        "MemoryLocationType", "StatusCode", "PollCqMode", "RdmaBackendConfig", "XgmiBackendConfig", "set_log_level"})
    m.attr(name) = io.attr(name);
}
