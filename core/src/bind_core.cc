// SPDX-License-Identifier: MIT
#include <pybind11/native_enum.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "mori/core/auth.h"
#include "mori/core/env.h"
#include "mori/core/heap_allocator.h"
#include "mori/core/launch.h"
#include "mori/core/log.h"
#include "mori/core/launch_secret.h"
#include "mori/core/socket.h"
#include "mori/core/store.h"
#include "mori/core/topology.h"
#include "mori/core/unique_id.h"

namespace py = pybind11;

void bind_dtype(py::module_& m);  // bind_dtype.cc

void bind_core(py::module_& m) {
  using namespace mori;
  bind_dtype(m);
  // mori.core.errors maps each status to its exception class by these values.
  py::native_enum<Status>(m, "Status", "enum.IntEnum",
                          "Status of a failed native call (core/include/mori/core/status.h).")
      .value("OK", Status::kOk)
      .value("INVALID_ARGUMENT", Status::kInvalidArgument)
      .value("INVALID_USAGE", Status::kInvalidUsage)
      .value("OUT_OF_MEMORY", Status::kOutOfMemory)
      .value("SYSTEM", Status::kSystem)
      .value("TRANSPORT", Status::kTransport)
      .value("REMOTE", Status::kRemote)
      .value("TIMEOUT", Status::kTimeout)
      .value("UNAVAILABLE", Status::kUnavailable)
      .value("INTERNAL", Status::kInternal)
      .value("DEVICE", Status::kDevice)
      .finalize();
  py::native_enum<mori::log::Level>(m, "LogLevel", "enum.IntEnum",
                                    "MORI_LOG_LEVEL's levels (core/include/mori/core/log.h).")
      .value("ERROR", mori::log::Level::kError)
      .value("WARN", mori::log::Level::kWarn)
      .value("INFO", mori::log::Level::kInfo)
      .value("DEBUG", mori::log::Level::kDebug)
      .value("TRACE", mori::log::Level::kTrace)
      .finalize();
  m.def(
      "parse_size", [](const std::string& s) { return env::parse_size(s); }, py::arg("text"),
      "Parse a size such as '512M' or '4GiB' into bytes.");
  m.def("reload_env", &env::reload);
  m.def("env_table", [] {
    py::list out;
    for (auto& e : env::describe()) {
      py::dict d;
      d["name"] = e.name;
      d["type"] = e.type;
      d["default"] = e.default_value;
      d["category"] = e.category;
      d["alias"] = e.alias;
      d["value"] = e.value;
      d["description"] = e.description;
      d["is_set"] = e.is_set;
      d["set_by_alias"] = e.set_by_alias;
      out.append(d);
    }
    return out;
  });
  m.def("env_value", &env::value, py::arg("name"),
        "The setting `name` parsed by its row's type (size/int -> int, seconds/number -> float, bool, string), "
        "from the environment now (its alias when it is unset).");
  m.def("node_identity", &node_identity);
  m.def("local_ip_address", &local_ip_address);
  m.def("random_secret_hex", [] { return secret_to_hex(random_secret()); });
  m.def("human_bytes", &human_bytes);
  m.def(
      "detect_launch",
      [] {
        LaunchInfo i = detect_launch();
        py::dict d;
        d["kind"] = i.kind;
        d["rank"] = i.rank;
        d["size"] = i.size;
        d["local_rank"] = i.local_rank;
        d["local_size"] = i.local_size;
        d["store_host"] = i.store_host;
        d["store_port"] = i.store_port;
        d["secret_hex"] = i.secret_hex;
        d["derived_secret"] = i.derived_secret;
        return d;
      },
      "Which launcher started this process (see core/launch.h): a dict of LaunchInfo's fields plus "
      "derived_secret.");
  m.def(
      "host_scope",
      [](const std::string& host) {
        switch (host_scope(host)) {
          case HostScope::kLoopback: return "loopback";
          case HostScope::kLocal: return "local";
          default: return "remote";
        }
      },
      py::arg("host"));

  py::class_<StoreServer, std::shared_ptr<StoreServer>>(m, "StoreServer", "TCP bootstrap store (one per job).")
      .def(py::init([](const std::string& secret_hex, const std::string& host, int port) {
             return std::make_shared<StoreServer>(secret_from_hex(secret_hex), host, port);
           }),
           py::arg("secret_hex"), py::arg("host") = "0.0.0.0", py::arg("port") = 0,
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("port", &StoreServer::port)
      .def("stop", &StoreServer::stop, py::call_guard<py::gil_scoped_release>())
      .def("rank_exited", &StoreServer::rank_exited, py::arg("rank"), py::arg("code"),
           "The launcher saw this rank's process end: waits for its keys fail at once, naming it.");
  py::class_<StoreClient>(m, "StoreClient", "A client of the bootstrap store (what every rank runs).")
      .def(py::init([](const std::string& host, int port, const std::string& secret_hex, int rank, double timeout_s) {
             return std::make_unique<StoreClient>(host, port, secret_from_hex(secret_hex), rank, timeout_s);
           }),
           py::arg("host"), py::arg("port"), py::arg("secret_hex"), py::arg("rank"), py::arg("timeout_s") = 30,
           py::call_guard<py::gil_scoped_release>())
      .def(
          "set",
          [](StoreClient& c, const std::string& key, py::bytes value) {
            std::string v = value;
            py::gil_scoped_release release;
            c.set(key, v);
          },
          py::arg("key"), py::arg("value"))
      .def(
          "get",
          [](StoreClient& c, const std::vector<std::string>& keys, const std::vector<int>& owners, double timeout_s) {
            std::vector<std::string> values;
            {
              py::gil_scoped_release release;
              values = c.get(keys, owners, timeout_s);
            }
            py::list out;
            for (auto& v : values) out.append(py::bytes(v));
            return out;
          },
          py::arg("keys"), py::arg("owner_ranks"), py::arg("timeout_s"))
      .def("goodbye", &StoreClient::goodbye, py::call_guard<py::gil_scoped_release>());
  m.def(
      "auth_client_handshake",
      [](int fd, py::bytes secret, const std::string& label, double timeout_s) {
        std::string s = secret;
        py::gil_scoped_release release;
        auth::client_handshake(fd, s.data(), s.size(), label, net::now() + timeout_s);
      },
      py::arg("fd"), py::arg("secret"), py::arg("label"), py::arg("timeout_s") = 10,
      "Runs the client side of core/auth's challenge-response on a connected socket (for tests).");

  m.def(
      "hmac_sha256",
      [](py::bytes key, py::bytes data) {
        std::string k = key, d = data;
        auto mac = auth::hmac_sha256(k.data(), k.size(), d.data(), d.size());
        return py::bytes(reinterpret_cast<const char*>(mac.data()), mac.size());
      },
      py::arg("key"), py::arg("data"), "HMAC-SHA256(key, data) -> 32 bytes (core/auth's MAC).");
  m.def(
      "secret_from_hex",
      [](const std::string& hex) {
        JobSecret s = secret_from_hex(hex);
        return py::bytes(reinterpret_cast<const char*>(s.data()), s.size());
      },
      py::arg("hex"), "The raw bytes of a hex job secret (MORI_JOB_SECRET); bad hex raises.");

  m.def("create_unique_id", [] {
    UniqueId id = create_unique_id();
    return py::bytes(reinterpret_cast<const char*>(id.data()), id.size());
  });
  m.def("parse_unique_id", [](py::bytes uid) {
    std::string s = uid;
    auto f = parse_unique_id(reinterpret_cast<const uint8_t*>(s.data()), s.size());
    return py::make_tuple(f.host, f.port, secret_to_hex(f.secret));
  });
}
