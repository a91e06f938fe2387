// SPDX-License-Identifier: MIT
// mori._C.umbp.MasterIndex: the UMBP master's in-memory block index (umbp/src/master_index.h).
// Batches cross as Python lists of str/int; the index work itself runs without the GIL.
// mori._C.umbp.MasterGrpcServer: the master's grpc++ server (umbp/src/master_grpc_server.h),
// calling a Python handler per call.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "mori/core/status.h"
#include "src/master_grpc_routes.h"
#include "src/master_grpc_server.h"
#include "src/master_index.h"

namespace py = pybind11;
using namespace mori::umbp;

namespace {

// A sequence of str (a list, a tuple, a protobuf repeated field) as strings; names the argument
// when an item is not a str.
std::vector<std::string> strings_arg(py::handle seq, const char* arg) {
  py::object fast = py::reinterpret_steal<py::object>(PySequence_Fast(seq.ptr(), arg));
  if (!fast) throw py::error_already_set();
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast.ptr());
  PyObject** items = PySequence_Fast_ITEMS(fast.ptr());
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    Py_ssize_t len = 0;
    const char* s = PyUnicode_Check(items[i]) ? PyUnicode_AsUTF8AndSize(items[i], &len) : nullptr;
    if (s == nullptr) {
      PyErr_Clear();
      MORI_CHECK_ARG(false, "%s[%zd] must be a str", arg, i);
    }
    out.emplace_back(s, static_cast<size_t>(len));
  }
  return out;
}

template <typename T>
py::list int_list(const std::vector<T>& v) {
  py::list out(v.size());
  for (size_t i = 0; i < v.size(); ++i) PyList_SET_ITEM(out.ptr(), i, py::int_(v[i]).release().ptr());
  return out;
}

}  // namespace

namespace {

// The interpreter lock on one of the server's workers. A worker keeps its Python thread state
// from its first call on: made and torn down per call it cost tens of microseconds. (The
// server's few workers leave theirs to the interpreter's own cleanup.)
struct WorkerGil {
  py::gil_scoped_acquire gil;
  WorkerGil() {
    thread_local bool kept = false;
    if (!kept) {
      gil.inc_ref();
      kept = true;
    }
  }
};

// A Python callable held by C++ objects that may drop it on a thread without the lock.
std::shared_ptr<py::function> held(py::function fn) {
  return std::shared_ptr<py::function>(new py::function(std::move(fn)), [](py::function* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
}

// The Python handler as the server's GrpcHandler: handler(method: str, request: bytes,
// metadata: list[(str, str | bytes)], peer: str, time_remaining: float | None)
// -> (code: int, details: str, reply: bytes). The interpreter lock is taken once per call, on
// the server's worker thread; values of "-bin" metadata keys are bytes, the others str.
GrpcHandler python_handler(py::function fn) {
  auto f = held(std::move(fn));
  return [f](const GrpcCall& call, GrpcReply& reply) {
    WorkerGil gil;
    try {
      py::list md(call.metadata.size());
      for (size_t i = 0; i < call.metadata.size(); ++i) {
        const auto& [k, v] = call.metadata[i];
        const bool binary = k.size() > 4 && k.compare(k.size() - 4, 4, "-bin") == 0;
        py::object value = binary ? py::object(py::bytes(v)) : py::object(py::str(v));
        PyList_SET_ITEM(md.ptr(), i, py::make_tuple(py::str(k), value).release().ptr());
      }
      py::object remaining = call.time_remaining_s < 0 ? py::none() : py::object(py::float_(call.time_remaining_s));
      py::object out = (*f)(py::str(call.method), py::bytes(call.request), md, py::str(call.peer), remaining);
      auto t = out.cast<py::tuple>();
      MORI_CHECK_ARG(t.size() == 3, "the master's gRPC handler must return (code, details, reply), got %zu items",
                     t.size());
      reply.code = t[0].cast<int>();
      reply.details = t[1].cast<std::string>();
      char* data = nullptr;
      Py_ssize_t len = 0;
      if (PyBytes_AsStringAndSize(t[2].ptr(), &data, &len) != 0) throw py::error_already_set();
      reply.body.assign(data, static_cast<size_t>(len));
    } catch (py::error_already_set& e) {
      // The dispatcher answers every handler error itself; this is a bug in it. UNKNOWN, as
      // grpcio answers an exception from a handler.
      reply.code = 2;
      reply.details = std::string("umbp master: gRPC handler failed: ") + e.what();
    } catch (const std::exception& e) {
      reply.code = 2;
      reply.details = std::string("umbp master: gRPC handler failed: ") + e.what();
    }
  };
}

// Dropping the server joins its workers, which take the interpreter lock: drop it without.
struct ReleaseGilDelete {
  void operator()(MasterGrpcServer* s) const {
    if (PyGILState_Check()) {
      py::gil_scoped_release nogil;
      delete s;
    } else {
      delete s;
    }
  }
};

}  // namespace

void bind_umbp_master(py::module_& m) {
  m.attr("HAVE_GRPCPP") = grpc_server_available();
  py::class_<MasterGrpcServer, std::unique_ptr<MasterGrpcServer, ReleaseGilDelete>>(
      m, "MasterGrpcServer",
      "The UMBP master's gRPC server in grpc++: every call's request bytes, metadata, peer and "
      "time remaining go to handler(method, request, metadata, peer, time_remaining), which "
      "answers (code, details, reply bytes); it runs on one of `workers` threads. Start raises "
      "when the build has no grpc++ (HAVE_GRPCPP).")
      .def(
          py::init([](std::string listen_address, py::function handler, int workers, bool reuse_port,
                      int max_message_bytes) {
            return std::unique_ptr<MasterGrpcServer, ReleaseGilDelete>(new MasterGrpcServer(
                std::move(listen_address), python_handler(std::move(handler)), workers, reuse_port, max_message_bytes));
          }),
          py::arg("listen_address"), py::arg("handler"), py::arg("workers") = 16, py::arg("reuse_port") = false,
          py::arg("max_message_bytes") = 256 << 20)
      .def("start", &MasterGrpcServer::start, py::call_guard<py::gil_scoped_release>(),
           "Bind and serve; the bound port.")
      .def("stop", &MasterGrpcServer::stop, py::arg("grace"), py::call_guard<py::gil_scoped_release>(),
           "Stop: calls in flight get `grace` seconds, then are cancelled; the workers end.")
      .def(
          "route_natively",
          [](MasterGrpcServer& server, NativeRouteGet& native) {
            server.set_native(
                "/umbp.UMBPMaster/BatchRouteGet",
                [n = &native](const std::string& req, std::string& rep) { return n->batch_route_get(req, rep); });
            server.set_native("/umbp.UMBPMaster/RouteGet", [n = &native](const std::string& req, std::string& rep) {
              return n->route_get(req, rep);
            });
          },
          py::arg("native"), py::keep_alive<1, 2>(),
          "Answer BatchRouteGet and RouteGet with `native` first (no interpreter lock); what it leaves goes to "
          "the handler. "
          "Before start().")
      .def("wait", &MasterGrpcServer::wait, py::call_guard<py::gil_scoped_release>(), "Block until stop() ran.");

  m.attr("HAVE_NATIVE_ROUTES") = native_routes_available();
  py::class_<NativeRouteGet>(
      m, "NativeRouteGet",
      "BatchRouteGet and RouteGet answered in C++ from a MasterIndex for the master's grpc++ server: calls "
      "with a miss are left to the Python handler; route counts and latencies are kept until "
      "drain().")
      .def(py::init([](MasterIndex& index, double lease_s, bool any_copy, std::vector<double> latency_bounds,
                       py::function alive, double alive_max_age_s) {
             auto f = held(std::move(alive));
             NativeRouteGet::AliveSource source = [f]() {
               WorkerGil gil;
               return (*f)().cast<std::vector<std::pair<std::string, std::string>>>();
             };
             return std::make_unique<NativeRouteGet>(index, lease_s, any_copy, std::move(latency_bounds),
                                                     std::move(source), alive_max_age_s);
           }),
           py::arg("index"), py::arg("lease_s"), py::arg("any_copy"), py::arg("latency_bounds"), py::arg("alive"),
           py::arg("alive_max_age_s") = 0.2, py::keep_alive<1, 2>(),
           "index: the in-memory store's MasterIndex; latency_bounds: the latency histogram's bucket upper bounds "
           "(+inf last); alive(): [(node_id, peer_address)] of the live clients, asked again when older than "
           "alive_max_age_s.")
      .def(
          "batch_route_get",
          [](NativeRouteGet& n, py::bytes request) -> py::object {
            std::string req = request, reply;
            bool ok;
            {
              py::gil_scoped_release nogil;
              ok = n.batch_route_get(req, reply);
            }
            return ok ? py::object(py::bytes(reply)) : py::object(py::none());
          },
          py::arg("request"), "The serialized BatchRouteGetResponse, or None when the call is left to Python.")
      .def(
          "drain",
          [](NativeRouteGet& n, const std::string& rpc) {
            MORI_CHECK_ARG(rpc == "BatchRouteGet" || rpc == "RouteGet", "rpc must be BatchRouteGet or RouteGet, got %s",
                           rpc.c_str());
            auto c = n.drain(rpc == "RouteGet" ? NativeRpc::kRouteGet : NativeRpc::kBatchRouteGet);
            py::dict hits;
            for (const auto& [node, count] : c.hits) hits[py::str(node)] = count;
            return py::make_tuple(hits, py::cast(c.buckets), c.latency_sum_s, c.answered);
          },
          py::arg("rpc"),
          "For rpc (BatchRouteGet, RouteGet): ({node_id: keys routed to it}, latency counts per bucket, latency sum "
          "in s, calls answered) since the last drain.");

  py::class_<MasterIndex>(m, "MasterIndex",
                          "The UMBP master's in-memory block index: key -> copies (node, tier, size), "
                          "with last access and lease per key; lock-sharded by key hash.")
      .def(py::init<size_t, std::vector<int32_t>>(), py::arg("shards"), py::arg("tier_priority"),
           "shards: lock shards (>= 1); tier_priority: the get path's tier order, fastest first.")
      .def(
          "add",
          [](MasterIndex& ix, const std::string& node_id, const std::string& key, int32_t tier, uint64_t size,
             double now, uint64_t offset, uint64_t checksum) {
            py::gil_scoped_release nogil;
            return ix.add(node_id, key, tier, size, now, offset, checksum);
          },
          py::arg("node_id"), py::arg("key"), py::arg("tier"), py::arg("size"), py::arg("now"), py::arg("offset") = 0,
          py::arg("checksum") = 0,
          "Record a copy (or update its size and place: arena offset and XXH3, 0 if not known); True if the "
          "key had no copy before.")
      .def("remove", &MasterIndex::remove, py::arg("node_id"), py::arg("key"), py::arg("tier"),
           py::call_guard<py::gil_scoped_release>(),
           "Drop a copy: (its size, whether it was the key's last copy), or None if unknown.")
      .def("remove_node", &MasterIndex::remove_node, py::arg("node_id"), py::call_guard<py::gil_scoped_release>(),
           "Drop every copy the node holds; [(key, size)] of the keys left with no copy.")
      .def(
          "route",
          [](MasterIndex& ix, py::handle keys, py::handle exclude, double now, double lease_until) {
            auto k = strings_arg(keys, "keys");
            auto x = strings_arg(exclude, "exclude");
            std::vector<std::vector<IndexCopy>> copies;
            {
              py::gil_scoped_release nogil;
              copies = ix.route(k, x, now, lease_until);
            }
            py::list out(copies.size());
            for (size_t i = 0; i < copies.size(); ++i) {
              py::tuple t(copies[i].size());
              for (size_t j = 0; j < copies[i].size(); ++j)
                t[j] = py::make_tuple(copies[i][j].node_id, copies[i][j].tier, copies[i][j].size);
              out[i] = t;
            }
            return out;
          },
          py::arg("keys"), py::arg("exclude"), py::arg("now"), py::arg("lease_until"),
          "Per key its copies off the excluded nodes as (node_id, tier, size) tuples, fastest tier first, "
          "() on a miss; keys with such a copy are touched and leased.")
      .def(
          "route_choose",
          [](MasterIndex& ix, py::handle keys, py::handle exclude, py::handle alive, double now, double lease_until,
             bool any_copy) {
            auto k = strings_arg(keys, "keys");
            auto x = strings_arg(exclude, "exclude");
            auto a = strings_arg(alive, "alive");
            RoutedGets r;
            {
              py::gil_scoped_release nogil;
              r = ix.route_choose(k, x, a, now, lease_until, any_copy);
            }
            return py::make_tuple(py::cast(r.nodes), int_list(r.hits), int_list(r.node_ref), int_list(r.tier),
                                  int_list(r.size), r.misses, int_list(r.offset), int_list(r.checksum));
          },
          py::arg("keys"), py::arg("exclude"), py::arg("alive"), py::arg("now"), py::arg("lease_until"),
          py::arg("any_copy") = false,
          "route() plus the copy to read among those on alive nodes (fastest tier, random within it; "
          "any live copy when any_copy): (nodes, hits per node, node_ref, tier, size, misses, offset, checksum), "
          "node_ref 1-based into nodes, 0 for a miss; offset and checksum the chosen copy's place in its "
          "owner's arena and XXH3 (checksum 0: not known).")
      .def(
          "contains",
          [](const MasterIndex& ix, py::handle keys) {
            auto k = strings_arg(keys, "keys");
            py::gil_scoped_release nogil;
            return ix.contains(k);
          },
          py::arg("keys"), "Per key whether it has a copy.")
      .def(
          "candidates",
          [](const MasterIndex& ix, const std::string& node_id, int32_t tier, double now) {
            std::vector<IndexCandidate> c;
            {
              py::gil_scoped_release nogil;
              c = ix.candidates(node_id, tier, now);
            }
            py::list out(c.size());
            for (size_t i = 0; i < c.size(); ++i) out[i] = py::make_tuple(c[i].key, c[i].size, c[i].last_access);
            return out;
          },
          py::arg("node_id"), py::arg("tier"), py::arg("now"),
          "The node's unleased copies in the tier as (key, size, last_access).")
      .def("node_copies", &MasterIndex::node_copies, py::arg("node_id"), py::call_guard<py::gil_scoped_release>(),
           "[(key, tier)] of every copy the node holds.")
      .def("node_keys", &MasterIndex::node_keys, py::arg("node_id"), py::call_guard<py::gil_scoped_release>(),
           "Keys the node holds a copy of.")
      .def("__len__", &MasterIndex::size);
}
