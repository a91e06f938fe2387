// SPDX-License-Identifier: MIT
// mori.umbp._master_server: the UMBP master's grpc++ server (master_grpc_server.h), its native
// get path (master_grpc_routes.h) and the Redis store's side of it (master_grpc_redis.h). A module
// of its own, built only where grpc++ is, so that `import mori` (EP, shmem, IO users) never loads
// libgrpc++ or libprotobuf: only a master process imports it. The MasterIndex and CallVerifier it
// takes are mori._C's (pybind11 shares the classes between the two modules).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "mori/core/status.h"
#include "src/grpc_channel.h"
#include "src/master_grpc_auth.h"
#include "src/master_grpc_redis.h"
#include "src/master_grpc_routes.h"
#include "src/master_grpc_server.h"
#include "src/master_index.h"
#include "src/master_place_feed.h"
#include "src/peer_grpc_puts.h"

namespace py = pybind11;
using namespace mori::umbp;

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

NativeRoutes::AliveSource alive_source(py::function alive) {
  auto f = held(std::move(alive));
  using Tiers = std::vector<std::tuple<int32_t, uint64_t, uint64_t, uint64_t>>;
  return [f]() {
    std::vector<std::tuple<std::string, std::string, double, Tiers>> nodes;
    {
      WorkerGil gil;
      nodes = (*f)().cast<decltype(nodes)>();
    }
    std::vector<NodeRoom> rooms;
    rooms.reserve(nodes.size());
    for (auto& [node_id, peer, last_heartbeat, tiers] : nodes) {
      NodeRoom n{std::move(node_id), std::move(peer), last_heartbeat, {}};
      for (const auto& [tier, total, available, max_allocatable] : tiers)
        n.tiers.push_back(TierRoom{tier, total, available, max_allocatable});
      rooms.push_back(std::move(n));
    }
    return rooms;
  };
}

}  // namespace

PYBIND11_MODULE(_master_server, m) {
  m.doc() =
      "UMBP's gRPC in grpc++: the server of the master and of each worker's peer service, the master's native "
      "get path, and the client channel (only processes that speak UMBP's gRPC import this)";
  py::module_::import("mori._C");  // MasterIndex, CallVerifier and mori's error classes
  m.attr("HAVE_NATIVE_ROUTES") = native_routes_available();
  m.attr("HAVE_NATIVE_REDIS") = native_redis_available();
  m.def("worker_threads", &grpc_worker_threads, py::arg("requested"),
        "The worker threads a server asked for `requested` runs: at most the host's cores, and at least 2 "
        "where 2 or more were asked for.");

  py::class_<MasterGrpcServer, std::unique_ptr<MasterGrpcServer, ReleaseGilDelete>>(
      m, "MasterGrpcServer",
      "The UMBP master's gRPC server in grpc++: every call's request bytes, metadata, peer and "
      "time remaining go to handler(method, request, metadata, peer, time_remaining), which "
      "answers (code, details, reply bytes); it runs on one of the worker threads "
      "(worker_threads(workers) of them; all `workers` with handlers_wait, for handlers that "
      "wait on other calls).")
      .def(py::init([](std::string listen_address, py::function handler, int workers, bool reuse_port,
                       int max_message_bytes, bool handlers_wait) {
             return std::unique_ptr<MasterGrpcServer, ReleaseGilDelete>(
                 new MasterGrpcServer(std::move(listen_address), python_handler(std::move(handler)), workers,
                                      reuse_port, max_message_bytes, handlers_wait));
           }),
           py::arg("listen_address"), py::arg("handler"), py::arg("workers") = 16, py::arg("reuse_port") = false,
           py::arg("max_message_bytes") = 256 << 20, py::arg("handlers_wait") = false)
      .def("start", &MasterGrpcServer::start, py::call_guard<py::gil_scoped_release>(),
           "Bind and serve; the bound port.")
      .def("stop", &MasterGrpcServer::stop, py::arg("grace"), py::call_guard<py::gil_scoped_release>(),
           "Stop: calls in flight get `grace` seconds, then are cancelled; the workers end.")
      .def_property_readonly("workers", &MasterGrpcServer::workers, "Worker threads serving (after start()).")
      .def_property_readonly("streams_open", &MasterGrpcServer::streams_open,
                             "Call streams (UMBPCallStream) open now: clients keep one per calling thread.")
      .def(
          "verify_calls",
          [](MasterGrpcServer& server, CallVerifier& verifier, std::vector<std::string> methods,
             py::function on_refused) {
            auto f = held(std::move(on_refused));
            server.verify_calls(&verifier, std::move(methods), [f](const std::string& reason) {
              WorkerGil gil;
              try {
                (*f)(reason);
              } catch (py::error_already_set&) {  // a failed counter must not fail the refusal
              }
            });
          },
          py::arg("verifier"), py::arg("methods"), py::arg("on_refused"), py::keep_alive<1, 2>(),
          "Check every call of `methods` with `verifier` (mori._C.umbp.CallVerifier) before anything answers it, "
          "native or Python; a refused call gets UNAUTHENTICATED and on_refused(reason) is called. Before start().")
      .def("set_handler_threads", &MasterGrpcServer::set_handler_threads, py::arg("threads"),
           "threads > 0: the handler and natives that may wait run on that many threads of their own; the workers "
           "answer the other natives alone, with no hand-off. Before start().")
      .def("batch_counts", &MasterGrpcServer::batch_counts, py::arg("method"),
           "(batches, calls) of a batched method (\"/umbp.UMBPMaster/RouteGet\" over Redis) since the start: "
           "calls / batches is the mean batch")
      .def("set_inline_bytes", &MasterGrpcServer::set_inline_bytes, py::arg("bytes"),
           "With handler threads: native calls (in-memory routes) whose request is larger than `bytes` (batches) "
           "run on them too, so a worker busy with batches does not cap the server; smaller ones stay on the "
           "worker that took them in. Unlimited by default. Before start().")
      .def(
          "route_natively",
          [](MasterGrpcServer& server, NativeRoutes& native, bool may_wait) {
            server.set_native(
                "/umbp.UMBPMaster/BatchRouteGet",
                [n = &native](std::string_view req, std::string& rep, double) { return n->batch_route_get(req, rep); },
                may_wait);
            server.set_native(
                "/umbp.UMBPMaster/BatchLookup",
                [n = &native](std::string_view req, std::string& rep, double) { return n->batch_lookup(req, rep); },
                may_wait);
            server.set_native(
                "/umbp.UMBPMaster/RouteGet",
                [n = &native](std::string_view req, std::string& rep, double) { return n->route_get(req, rep); },
                may_wait);
            // Over Redis the RouteGets queued for the handler threads go in batches: one script
            // call per endpoint for several calls' keys.
            if (may_wait)
              server.set_native_batch(
                  "/umbp.UMBPMaster/RouteGet",
                  [n = &native](const std::vector<std::string_view>& reqs, std::vector<std::string>& reps,
                                std::vector<char>& answered) { n->route_get_batch(reqs, reps, answered); });
            server.set_native(
                "/umbp.UMBPMaster/BatchRoutePut",
                [n = &native](std::string_view req, std::string& rep, double) { return n->batch_route_put(req, rep); },
                may_wait);
            server.set_native(
                "/umbp.UMBPMasterAdmin/PlaceFeed",
                [n = &native](std::string_view req, std::string& rep, double) { return n->place_feed(req, rep); },
                may_wait);
          },
          py::arg("native"), py::arg("may_wait") = false, py::keep_alive<1, 2>(),
          "Answer BatchRouteGet, RouteGet, BatchLookup, BatchRoutePut and PlaceFeed with `native` first (no "
          "interpreter lock); what it leaves goes to the handler. may_wait: its answers wait on Redis (they run "
          "where the handler runs). Before start().")
      .def(
          "pull_puts_natively",
          [](MasterGrpcServer& server, NativePeerPuts& native) {
            server.set_native("/umbp.UMBPPeer/BatchAllocateSlots",
                              [n = &native](std::string_view req, std::string& rep, double left) {
                                return n->batch_allocate_slots(req, rep, left);
                              });
          },
          py::arg("native"), py::keep_alive<1, 2>(),
          "A peer server: answer BatchAllocateSlots with `native` first (the pulled puts, no interpreter lock); "
          "what it leaves goes to the handler. Before start().")
      .def("wait", &MasterGrpcServer::wait, py::call_guard<py::gil_scoped_release>(), "Block until stop() ran.");

  py::class_<NativePeerPuts>(m, "NativePeerPuts",
                             "A peer's BatchAllocateSlots in C++ (peer_grpc_puts.h) over mori._C.umbp.PeerPuts: "
                             "reserved, pulled from the writer and committed in the call.")
      .def(py::init([](PeerPuts& puts, py::bytes arena_buffer, uint32_t backend_id, uint32_t buffer_index,
                       uint64_t page_size) {
             MORI_CHECK_ARG(page_size > 0, "page_size must be > 0");
             return std::make_unique<NativePeerPuts>(puts, std::string(arena_buffer), backend_id, buffer_index,
                                                     page_size);
           }),
           py::arg("puts"), py::arg("arena_buffer"), py::arg("backend_id"), py::arg("buffer_index"),
           py::arg("page_size"), py::keep_alive<1, 2>(),
           "arena_buffer: the DRAM arena's serialized umbp.BufferMemoryDesc; backend_id, buffer_index, page_size: "
           "the arena's, as the Python service answers them.")
      .def_property_readonly("answered", &NativePeerPuts::answered, "Calls answered natively since the start.");

  py::class_<GrpcChannel>(m, "GrpcChannel",
                          "A gRPC client channel in grpc++: calls as bytes, signed with the job secret, run on "
                          "the calling thread without the interpreter lock, carried on call streams where the "
                          "server answers them (umbp/src/grpc_channel.h).")
      .def(py::init<std::string, int, std::string, bool>(), py::arg("target"), py::arg("max_message_bytes") = 256 << 20,
           py::arg("secret") = std::string(), py::arg("streams") = true)
      .def(
          "call",
          [](const GrpcChannel& ch, const std::string& method, py::bytes request, double timeout_s) {
            char* data = nullptr;
            Py_ssize_t len = 0;
            if (PyBytes_AsStringAndSize(request.ptr(), &data, &len) != 0) throw py::error_already_set();
            GrpcCallResult r;
            {
              py::gil_scoped_release nogil;  // `request` stays alive: the caller's reference holds it
              r = ch.call(method, std::string_view(data, static_cast<size_t>(len)), timeout_s);
            }
            return py::make_tuple(r.code, py::str(r.details), py::bytes(r.body));
          },
          py::arg("method"), py::arg("request"), py::arg("timeout_s"),
          "One call of `method` (\"/umbp.UMBPMaster/RouteGet\") with the serialized request within "
          "timeout_s (<= 0: no deadline): (code, details, reply bytes), code 0 for OK.")
      .def_property_readonly("target", &GrpcChannel::target)
      .def_property_readonly("streams", &GrpcChannel::streams,
                             "Whether calls go on call streams (asked for, and the server has not refused one).");

  py::class_<RedisRoutes>(m, "RedisRoutes",
                          "The Redis store's get path in C++ (hiredis): the store's ROUTE_GET_BATCH script by "
                          "EVALSHA on its endpoints, routed as RedisMetadataStore routes it.")
      .def(py::init([](std::vector<std::string> uris, std::string password, std::vector<std::string> shard_prefixes,
                       std::string script, std::string sha, std::vector<int32_t> tier_priority,
                       double connect_timeout_s, double socket_timeout_s, size_t pool_size,
                       std::vector<size_t> shard_endpoint, std::string feed_script, std::string feed_sha,
                       std::vector<std::string> feed_keys, size_t feed_endpoint) {
             RedisRoutes::Options o;
             o.uris = std::move(uris);
             o.password = std::move(password);
             o.shard_prefixes = std::move(shard_prefixes);
             o.script = std::move(script);
             o.sha = std::move(sha);
             o.tier_priority = std::move(tier_priority);
             o.connect_timeout_s = connect_timeout_s;
             o.socket_timeout_s = socket_timeout_s;
             o.pool_size = pool_size;
             o.shard_endpoint = std::move(shard_endpoint);
             o.feed_script = std::move(feed_script);
             o.feed_sha = std::move(feed_sha);
             o.feed_keys = std::move(feed_keys);
             o.feed_endpoint = feed_endpoint;
             return std::make_unique<RedisRoutes>(std::move(o));
           }),
           py::arg("uris"), py::arg("password"), py::arg("shard_prefixes"), py::arg("script"), py::arg("sha"),
           py::arg("tier_priority"), py::arg("connect_timeout_s"), py::arg("socket_timeout_s"), py::arg("pool_size"),
           py::arg("shard_endpoint") = std::vector<size_t>{}, py::arg("feed_script") = "", py::arg("feed_sha") = "",
           py::arg("feed_keys") = std::vector<std::string>{}, py::arg("feed_endpoint") = 0,
           "uris: the store's endpoints (redis://); shard_prefixes: its block shards' hash-tagged prefixes; script, "
           "sha: ROUTE_GET_BATCH's text and SHA-1; shard_endpoint: in a Redis Cluster, per shard the index into uris "
           "of the node holding its slot; feed_script, feed_sha, feed_keys, feed_endpoint: the place feed's _SINCE "
           "script "
           "and its keys (none: polls stay Python's). Raises for a URI it cannot serve.")
      .def_property_readonly("failures", &RedisRoutes::failures,
                             "Calls sent to the Python handler because Redis failed here.");

  py::class_<NativeRoutes>(
      m, "NativeRoutes",
      "BatchRouteGet and RouteGet answered in C++ for the master's grpc++ server, from a MasterIndex or a "
      "RedisRoutes: misses answered too, unless a missing key is a pending put (set_pending), then the call is "
      "the Python handler's; route counts and latencies are kept until drain().")
      .def(py::init([](MasterIndex& index, double lease_s, bool any_copy, std::vector<double> latency_bounds,
                       py::function alive, double alive_max_age_s) {
             auto native = std::make_unique<NativeRoutes>(NativeRoutes::index_router(index), lease_s, any_copy,
                                                          std::move(latency_bounds), alive_source(std::move(alive)),
                                                          alive_max_age_s);
             native->set_lookup([&index](const std::vector<std::string>& keys) { return index.contains(keys); });
             return native;
           }),
           py::arg("index"), py::arg("lease_s"), py::arg("any_copy"), py::arg("latency_bounds"), py::arg("alive"),
           py::arg("alive_max_age_s") = 0.2, py::keep_alive<1, 2>(),
           "index: the in-memory store's MasterIndex; latency_bounds: the latency histogram's bucket upper bounds "
           "(+inf last); alive(): [(node_id, peer_address, last_heartbeat, [(tier, total, available, "
           "max_allocatable)])] of the live clients, asked again when older than "
           "alive_max_age_s.")
      .def(py::init([](RedisRoutes& redis, double lease_s, bool any_copy, std::vector<double> latency_bounds,
                       py::function alive, double alive_max_age_s) {
             NativeRoutes::Router router = [r = &redis](const std::vector<std::string>& keys,
                                                        const std::vector<std::string>& exclude,
                                                        const NativeRoutes::Alive& alive, double now,
                                                        double lease_until, bool any_copy, RoutedGets& out) {
               return r->route_choose(keys, exclude, alive.peer, now, lease_until, any_copy, out);
             };
             auto native =
                 std::make_unique<NativeRoutes>(std::move(router), lease_s, any_copy, std::move(latency_bounds),
                                                alive_source(std::move(alive)), alive_max_age_s);
             native->set_lookup([r = &redis](const std::vector<std::string>& keys) {
               std::vector<bool> found;
               if (!r->exists(keys, found)) found.clear();  // a Redis failure: the call is Python's
               return found;
             });
             native->set_feed_source([r = &redis](uint64_t id, uint64_t seq, uint32_t most, FeedSlice& out) {
               return r->place_feed(id, seq, most, out);
             });
             return native;
           }),
           py::arg("redis"), py::arg("lease_s"), py::arg("any_copy"), py::arg("latency_bounds"), py::arg("alive"),
           py::arg("alive_max_age_s") = 0.2, py::keep_alive<1, 2>(), "The same over the Redis store's RedisRoutes.")
      .def(
          "batch_route_get",
          [](NativeRoutes& n, py::bytes request) -> py::object {
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
          [](NativeRoutes& n, const std::string& rpc) {
            MORI_CHECK_ARG(rpc == "BatchRouteGet" || rpc == "RouteGet" || rpc == "BatchLookup" ||
                               rpc == "BatchRoutePut" || rpc == "PlaceFeed",
                           "rpc must be BatchRouteGet, RouteGet, BatchLookup, BatchRoutePut or PlaceFeed, got %s",
                           rpc.c_str());
            auto c = n.drain(rpc == "RouteGet"        ? NativeRpc::kRouteGet
                             : rpc == "BatchLookup"   ? NativeRpc::kBatchLookup
                             : rpc == "BatchRoutePut" ? NativeRpc::kBatchRoutePut
                             : rpc == "PlaceFeed"     ? NativeRpc::kPlaceFeed
                                                      : NativeRpc::kBatchRouteGet);
            py::dict hits, outcomes;
            for (const auto& [node, count] : c.hits) hits[py::str(node)] = count;
            outcomes["already_exists"] = c.exists;
            outcomes["routed"] = c.routed;
            outcomes["unavailable"] = c.unavailable;
            return py::make_tuple(hits, py::cast(c.buckets), c.latency_sum_s, c.answered, c.misses, outcomes);
          },
          py::arg("rpc"),
          "For rpc (BatchRouteGet, RouteGet, BatchLookup, BatchRoutePut, PlaceFeed): ({node_id: keys routed to it}, "
          "latency "
          "counts per bucket, latency sum in s, calls answered, keys missed, {put outcome: keys}) since the last "
          "drain.")
      .def(
          "set_pending", [](NativeRoutes& n, PendingPuts& pending) { n.set_pending(&pending); }, py::arg("pending"),
          py::keep_alive<1, 2>(),
          "The master's PendingPuts (mori._C.umbp): a BatchRouteGet missing one of its keys is left to the Python "
          "handler; BatchLookup counts them as found. Before the server starts.")
      .def(
          "set_puts",
          [](NativeRoutes& n, PutRoutes& routes, double pending_ttl_s) { n.set_puts(&routes, pending_ttl_s); },
          py::arg("routes"), py::arg("pending_ttl_s"), py::keep_alive<1, 2>(),
          "Answer BatchRoutePut here too (over a lookup's index, with set_pending): routed by the master's PutRoutes "
          "(mori._C.umbp), each routed key pending for pending_ttl_s. Before the server starts.")
      .def(
          "set_place_feed", [](NativeRoutes& n, const PlaceFeed& feed) { n.set_place_feed(&feed); }, py::arg("feed"),
          py::keep_alive<1, 2>(),
          "Answer workers' PlaceFeed polls here from the master's feed (mori._C.umbp.PlaceFeed). Before the server "
          "starts.")
      .def(
          "place_feed",
          [](NativeRoutes& n, py::bytes request) {
            std::string reply;
            std::string req = request;
            bool ok;
            {
              py::gil_scoped_release nogil;
              ok = n.place_feed(req, reply);
            }
            return ok ? py::object(py::bytes(reply)) : py::object(py::none());
          },
          py::arg("request"), "The serialized PlaceFeedResponse, or None when the call is left to Python.")
      .def("set_python_puts", &NativeRoutes::set_python_puts, py::arg("on"),
           "Per-engine quotas are set: BatchRoutePut is the Python handler's (which keeps their counts).")
      .def_property_readonly("answered", &NativeRoutes::answered, "Calls answered natively since the start.");
}
