// SPDX-License-Identifier: MIT
// mori._C.io: MORI-IO's native classes (MORI's names). Descriptors pack to msgpack arrays
// in MORI's field order (ours append the capability fields), through Python's msgpack.
#include <pybind11/pybind11.h>
#include <pybind11/operators.h>
#include <pybind11/stl.h>

#include <cstring>

#include "mori/io/engine.h"
#include "mori/transports/ucx/ucp_report.h"
#include "src/backends/ucx_backend.h"

namespace py = pybind11;
using namespace mori::io;

namespace {

py::bytes to_bytes(const void* p, size_t n) { return py::bytes(static_cast<const char*>(p), n); }

py::object msgpack() { return py::module_::import("msgpack"); }

py::list unpack_array(const py::bytes& data, size_t min_items, const char* what) {
  py::object obj;
  try {
    obj = msgpack().attr("unpackb")(data, py::arg("raw") = false);
  } catch (py::error_already_set&) {
    throw py::value_error(std::string(what) + ".unpack: the bytes are not a packed " + what);
  }
  if (!py::isinstance<py::list>(obj) || py::len(obj) < min_items)
    throw py::value_error(std::string(what) + ".unpack: the bytes are not a packed " + what);
  return obj.cast<py::list>();
}

template <typename T>
T item(const py::list& l, size_t i, const char* what) {
  try {
    return l[i].cast<T>();
  } catch (py::cast_error&) {
    throw py::value_error(std::string(what) + ".unpack: field " + std::to_string(i) + " has the wrong type");
  }
}

std::string bin(const py::list& l, size_t i, const char* what) {
  py::object o = l[i];
  if (!py::isinstance<py::bytes>(o))
    throw py::value_error(std::string(what) + ".unpack: field " + std::to_string(i) + " is not binary");
  return o.cast<std::string>();
}

py::bytes pack_engine(const EngineDesc& d) {
  py::list l;
  l.append(d.key);
  l.append(d.node_id);
  l.append(d.hostname);
  l.append(d.host);
  l.append(d.port);
  l.append(d.pid);
  l.append(to_bytes(d.secret.data(), d.secret.size()));
  if (!d.ucx_address.empty()) l.append(to_bytes(d.ucx_address.data(), d.ucx_address.size()));  // UCX backends only
  return msgpack().attr("packb")(l, py::arg("use_bin_type") = true).cast<py::bytes>();
}

EngineDesc unpack_engine(const py::bytes& b) {
  const char* w = "EngineDesc";
  py::list l = unpack_array(b, 6, w);
  EngineDesc d;
  d.key = item<std::string>(l, 0, w);
  d.node_id = item<std::string>(l, 1, w);
  d.hostname = item<std::string>(l, 2, w);
  d.host = item<std::string>(l, 3, w);
  d.port = item<uint32_t>(l, 4, w);
  d.pid = item<int64_t>(l, 5, w);
  if (py::len(l) > 6) d.secret = bin(l, 6, w);
  if (py::len(l) > 7) d.ucx_address = bin(l, 7, w);
  return d;
}

py::bytes pack_memory(const MemoryDesc& d) {
  static const std::string zeros(kIpcHandleBytes, '\0');
  py::list l;
  l.append(d.engine_key);
  l.append(d.id);
  l.append(d.device_id);
  l.append(d.device_bus_id);
  l.append(d.data);
  l.append(d.size);
  l.append(static_cast<uint32_t>(d.loc));
  l.append(to_bytes(d.ipc_handle.data(), d.ipc_handle.size()));
  l.append(d.numa_node);
  l.append(d.ipc_offset);
  l.append(py::bytes(zeros));  // fabric handle (AMD scale-up fabric: not on this platform)
  l.append(-1);                // vpod id
  l.append("");                // vpod ppod id
  l.append(0);                 // fabric offset
  l.append(0);                 // fabric allocation size
  l.append(d.region_key);
  if (!d.ucx_rkey.empty()) l.append(to_bytes(d.ucx_rkey.data(), d.ucx_rkey.size()));  // mapped for UCX only
  return msgpack().attr("packb")(l, py::arg("use_bin_type") = true).cast<py::bytes>();
}

MemoryDesc unpack_memory(const py::bytes& b) {
  const char* w = "MemoryDesc";
  py::list l = unpack_array(b, 10, w);
  MemoryDesc d;
  d.engine_key = item<std::string>(l, 0, w);
  d.id = item<uint32_t>(l, 1, w);
  d.device_id = item<int32_t>(l, 2, w);
  d.device_bus_id = item<std::string>(l, 3, w);
  d.data = item<uint64_t>(l, 4, w);
  d.size = item<uint64_t>(l, 5, w);
  uint32_t loc = item<uint32_t>(l, 6, w);
  if (loc > 2) throw py::value_error("MemoryDesc.unpack: unknown memory location");
  d.loc = static_cast<MemoryLocationType>(loc);
  std::string h = bin(l, 7, w);
  std::memcpy(d.ipc_handle.data(), h.data(), std::min(h.size(), d.ipc_handle.size()));
  d.numa_node = item<int32_t>(l, 8, w);
  d.ipc_offset = item<uint64_t>(l, 9, w);
  if (py::len(l) > 15) d.region_key = item<uint64_t>(l, 15, w);
  if (py::len(l) > 16) d.ucx_rkey = bin(l, 16, w);
  return d;
}

Segments segments(const std::vector<uint64_t>& lo, const std::vector<uint64_t>& ro, const std::vector<uint64_t>& sz) {
  return Segments{lo, ro, sz};
}

std::vector<Segments> segment_lists(const std::vector<std::vector<uint64_t>>& lo,
                                    const std::vector<std::vector<uint64_t>>& ro,
                                    const std::vector<std::vector<uint64_t>>& sz) {
  if (lo.size() != ro.size() || lo.size() != sz.size())
    throw py::value_error("batch: local_offsets, remote_offsets and sizes need one list per memory pair");
  std::vector<Segments> out;
  for (size_t i = 0; i < lo.size(); ++i) out.push_back(Segments{lo[i], ro[i], sz[i]});
  return out;
}

}  // namespace

void bind_io(py::module_& m) {
  py::enum_<BackendType>(m, "BackendType")
      .value("Unknown", BackendType::Unknown)
      .value("XGMI", BackendType::XGMI)
      .value("RDMA", BackendType::RDMA)
      .value("TCP", BackendType::TCP)
      .value("FABRIC", BackendType::FABRIC)
      .export_values();
  py::enum_<MemoryLocationType>(m, "MemoryLocationType")
      .value("Unknown", MemoryLocationType::Unknown)
      .value("CPU", MemoryLocationType::CPU)
      .value("GPU", MemoryLocationType::GPU)
      .export_values();
  py::enum_<StatusCode>(m, "StatusCode")
      .value("SUCCESS", StatusCode::SUCCESS)
      .value("INIT", StatusCode::INIT)
      .value("IN_PROGRESS", StatusCode::IN_PROGRESS)
      .value("ERR_INVALID_ARGS", StatusCode::ERR_INVALID_ARGS)
      .value("ERR_NOT_FOUND", StatusCode::ERR_NOT_FOUND)
      .value("ERR_RDMA_OP", StatusCode::ERR_RDMA_OP)
      .value("ERR_BAD_STATE", StatusCode::ERR_BAD_STATE)
      .value("ERR_GPU_OP", StatusCode::ERR_GPU_OP)
      .export_values();
  py::enum_<PollCqMode>(m, "PollCqMode").value("POLLING", PollCqMode::POLLING).value("EVENT", PollCqMode::EVENT);

  py::class_<IOEngineConfig>(m, "IOEngineConfig")
      .def(py::init([](std::string host, uint16_t port) { return IOEngineConfig{std::move(host), port}; }),
           py::arg("host") = "", py::arg("port") = 0)
      .def_readwrite("host", &IOEngineConfig::host)
      .def_readwrite("port", &IOEngineConfig::port);

  py::class_<RdmaBackendConfig>(m, "RdmaBackendConfig")
      .def(py::init([](int qp, int post_batch, int workers, PollCqMode mode, bool notify, int notif_per_qp,
                       bool chunking, int chunk_bytes, int max_chunks, int nics) {
             RdmaBackendConfig c;
             c.qp_per_transfer = qp;
             c.post_batch_size = post_batch;
             c.num_worker_threads = workers;
             c.poll_cq_mode = mode;
             c.enable_notification = notify;
             c.notif_per_qp = notif_per_qp;
             c.enable_transfer_chunking = chunking;
             c.chunk_bytes = chunk_bytes;
             c.max_chunks_per_transfer = max_chunks;
             c.num_nics_per_transfer = nics;
             return c;
           }),
           py::arg("qp_per_transfer") = 1, py::arg("post_batch_size") = -1, py::arg("num_worker_threads") = -1,
           py::arg("poll_cq_mode") = PollCqMode::POLLING, py::arg("enable_notification") = true,
           py::arg("notif_per_qp") = 1024, py::arg("enable_transfer_chunking") = false, py::arg("chunk_bytes") = 65536,
           py::arg("max_chunks_per_transfer") = 64, py::arg("num_nics_per_transfer") = 1)
      .def_readwrite("qp_per_transfer", &RdmaBackendConfig::qp_per_transfer)
      .def_readwrite("post_batch_size", &RdmaBackendConfig::post_batch_size)
      .def_readwrite("num_worker_threads", &RdmaBackendConfig::num_worker_threads)
      .def_readwrite("poll_cq_mode", &RdmaBackendConfig::poll_cq_mode)
      .def_readwrite("enable_notification", &RdmaBackendConfig::enable_notification)
      .def_readwrite("notif_per_qp", &RdmaBackendConfig::notif_per_qp)
      .def_readwrite("enable_transfer_chunking", &RdmaBackendConfig::enable_transfer_chunking)
      .def_readwrite("chunk_bytes", &RdmaBackendConfig::chunk_bytes)
      .def_readwrite("max_chunks_per_transfer", &RdmaBackendConfig::max_chunks_per_transfer)
      .def_readwrite("num_nics_per_transfer", &RdmaBackendConfig::num_nics_per_transfer)
      .def_readwrite("max_send_wr", &RdmaBackendConfig::max_send_wr)
      .def_readwrite("max_cqe_num", &RdmaBackendConfig::max_cqe_num)
      .def_readwrite("max_msg_sge", &RdmaBackendConfig::max_msg_sge);

  py::class_<XgmiBackendConfig>(m, "XgmiBackendConfig")
      .def(py::init([](int s, int e) { return XgmiBackendConfig{s, e}; }), py::arg("num_streams") = 64,
           py::arg("num_events") = 64)
      .def_readwrite("num_streams", &XgmiBackendConfig::num_streams)
      .def_readwrite("num_events", &XgmiBackendConfig::num_events);

  py::class_<TcpBackendConfig>(m, "TcpBackendConfig")
      .def(py::init([](int lanes, bool direct) { return TcpBackendConfig{lanes, direct}; }), py::arg("lanes") = 0,
           py::arg("direct") = true,
           "Our tcp backend: `lanes` connections per peer (0: MORI_IO_TCP_LANES); `direct`: CPU memory of "
           "engines on this host moves by process_vm_readv/writev instead of sockets.")
      .def_readwrite("lanes", &TcpBackendConfig::lanes)
      .def_readwrite("direct", &TcpBackendConfig::direct);

  py::class_<EngineDesc>(m, "EngineDesc")
      .def_readonly("key", &EngineDesc::key)
      .def_readonly("node_id", &EngineDesc::node_id)
      .def_readonly("hostname", &EngineDesc::hostname)
      .def_readonly("host", &EngineDesc::host)
      .def_readonly("port", &EngineDesc::port)
      .def_readonly("pid", &EngineDesc::pid)
      .def_property_readonly("ucx_address",
                             [](const EngineDesc& d) { return to_bytes(d.ucx_address.data(), d.ucx_address.size()); })
      .def("pack", &pack_engine)
      .def_static("unpack", &unpack_engine, py::arg("packed"))
      .def(py::self == py::self)
      .def("__repr__", [](const EngineDesc& d) {
        return "EngineDesc(key='" + d.key + "', host='" + d.host + "', port=" + std::to_string(d.port) + ")";
      });

  py::class_<MemoryDesc>(m, "MemoryDesc")
      .def(py::init<>())
      .def_readonly("engine_key", &MemoryDesc::engine_key)
      .def_readonly("id", &MemoryDesc::id)
      .def_readonly("device_id", &MemoryDesc::device_id)
      .def_readonly("device_bus_id", &MemoryDesc::device_bus_id)
      .def_readonly("numa_node", &MemoryDesc::numa_node)
      .def_readonly("data", &MemoryDesc::data)
      .def_readonly("size", &MemoryDesc::size)
      .def_readonly("loc", &MemoryDesc::loc)
      .def_property_readonly("ipc_handle",
                             [](const MemoryDesc& d) { return to_bytes(d.ipc_handle.data(), d.ipc_handle.size()); })
      .def_property_readonly("ucx_rkey",
                             [](const MemoryDesc& d) { return to_bytes(d.ucx_rkey.data(), d.ucx_rkey.size()); })
      .def("pack", &pack_memory)
      .def_static("unpack", &unpack_memory, py::arg("packed"))
      .def(py::self == py::self)
      .def("__repr__", [](const MemoryDesc& d) {
        return "MemoryDesc(engine_key='" + d.engine_key + "', id=" + std::to_string(d.id) +
               ", size=" + std::to_string(d.size) + ", loc=" + (d.loc == MemoryLocationType::GPU ? "GPU" : "CPU") + ")";
      });

  py::class_<TransferStatus>(m, "TransferStatus")
      .def(py::init<>())
      .def("Code", &TransferStatus::Code)
      .def("Message", &TransferStatus::Message)
      .def("Init", &TransferStatus::Init)
      .def("InProgress", &TransferStatus::InProgress)
      .def("Succeeded", &TransferStatus::Succeeded)
      .def("Failed", &TransferStatus::Failed)
      .def("SetCode", &TransferStatus::SetCode, py::arg("code"))
      .def("SetMessage", &TransferStatus::SetMessage, py::arg("message"))
      .def("Update", &TransferStatus::Update, py::arg("code"), py::arg("message"))
      .def("Wait", &TransferStatus::Wait, py::call_guard<py::gil_scoped_release>())
      .def("WaitFor", &TransferStatus::WaitFor, py::arg("timeout_ms") = -1, py::call_guard<py::gil_scoped_release>())
      .def("__repr__", [](const TransferStatus& s) {
        return "TransferStatus(code=" + std::to_string(static_cast<int>(s.Code())) + ", message='" + s.Message() + "')";
      });

  m.def(
      "ucx_report",
      [] {
        const UcxReport* rp;
        {
          py::gil_scoped_release release;  // the first call loads UCX and makes a context
          rp = &ucx_report();
        }
        const UcxReport& r = *rp;
        py::dict d;
        d["loaded"] = r.loaded;
        d["why"] = r.why;
        d["version"] = r.version;
        d["resources"] = r.resources;
        d["rdma"] = r.rdma;
        return d;
      },
      "What UCX offers this process (the library, its transports under UCX_TLS, whether one is RDMA).");
  m.def(
      "ucx_lane_transports",
      [](const std::string& print_info) {
        std::vector<std::string> out;
        for (const auto& lane : mori::ucx::parse_endpoint_lanes(print_info)) out.push_back(lane.resource);
        return out;
      },
      py::arg("print_info"), "The transports/devices named by the lane lines of ucp_ep_print_info's text.");
  m.def(
      "wait_all",
      [](const std::vector<TransferStatus*>& statuses, int64_t timeout_ms) {
        std::vector<std::shared_ptr<StatusState>> states;
        for (auto* s : statuses) states.push_back(s ? s->state() : nullptr);
        py::gil_scoped_release release;
        return wait_all(states, timeout_ms);
      },
      py::arg("statuses"), py::arg("timeout_ms") = -1);

  using Rel = py::call_guard<py::gil_scoped_release>;
  py::class_<Session>(m, "IOEngineSession")
      .def("allocate_transfer_uid", &Session::allocate_transfer_uid)
      .def(
          "read",
          [](Session& s, uint64_t lo, uint64_t ro, uint64_t size, uint64_t uid) {
            return s.transfer(true, Segments{{lo}, {ro}, {size}}, uid);
          },
          Rel())
      .def(
          "write",
          [](Session& s, uint64_t lo, uint64_t ro, uint64_t size, uint64_t uid) {
            return s.transfer(false, Segments{{lo}, {ro}, {size}}, uid);
          },
          Rel())
      .def(
          "batch_read",
          [](Session& s, std::vector<uint64_t> lo, std::vector<uint64_t> ro, std::vector<uint64_t> sz, uint64_t uid) {
            return s.transfer(true, segments(lo, ro, sz), uid);
          },
          Rel())
      .def(
          "batch_write",
          [](Session& s, std::vector<uint64_t> lo, std::vector<uint64_t> ro, std::vector<uint64_t> sz, uint64_t uid) {
            return s.transfer(false, segments(lo, ro, sz), uid);
          },
          Rel())
      .def("alive", &Session::alive)
      .def_property_readonly("local_mem", &Session::local)
      .def_property_readonly("remote_mem", &Session::remote);

  py::class_<Engine, std::shared_ptr<Engine>>(m, "IOEngine")
      .def(py::init([](std::string key, IOEngineConfig c) {
             if (key.empty()) throw py::value_error("IOEngine: key must not be empty");
             return std::make_shared<Engine>(std::move(key), std::move(c));
           }),
           py::arg("key"), py::arg("config"))
      .def("get_engine_desc", &Engine::engine_desc)
      .def("create_rdma_backend", &Engine::create_rdma_backend, Rel())
      .def("create_tcp_backend", &Engine::create_tcp_backend, Rel())
      .def("create_xgmi_backend", &Engine::create_xgmi_backend, Rel())
      .def("remove_backend", &Engine::remove_backend)
      .def("has_backend", &Engine::has_backend)
      .def("register_remote_engine", &Engine::register_remote_engine, Rel())
      .def("deregister_remote_engine", &Engine::deregister_remote_engine, Rel())
      .def("register_memory", &Engine::register_memory, py::arg("ptr"), py::arg("size"), py::arg("device_id"),
           py::arg("mem_loc"))
      .def("deregister_memory", &Engine::deregister_memory, Rel())
      .def("allocate_transfer_uid", &Engine::allocate_transfer_uid)
      .def(
          "transfer",
          [](Engine& e, bool read, const MemoryDesc& l, uint64_t lo, const MemoryDesc& r, uint64_t ro, uint64_t size,
             uint64_t uid) { return e.transfer(read, l, r, Segments{{lo}, {ro}, {size}}, uid); },
          Rel())
      .def("batch",
           [](Engine& e, bool read, const std::vector<MemoryDesc>& locals, const std::vector<std::vector<uint64_t>>& lo,
              const std::vector<MemoryDesc>& remotes, const std::vector<std::vector<uint64_t>>& ro,
              const std::vector<std::vector<uint64_t>>& sz, const std::vector<uint64_t>& uids) {
             auto segs = segment_lists(lo, ro, sz);
             py::gil_scoped_release release;
             return e.batch(read, locals, remotes, segs, uids);
           })
      .def("create_session", &Engine::create_session, Rel())
      .def("backend_for", &Engine::backend_for, Rel())
      .def("pop_inbound_transfer_status", &Engine::pop_inbound_transfer_status)
      .def("dropped_notifications", &Engine::dropped_notifications);

  m.def("set_log_level", &set_log_level, py::arg("level"));
}
