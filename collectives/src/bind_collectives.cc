// SPDX-License-Identifier: MIT
// mori._C.collectives: host collectives (addresses as Python ints) and, when built with
// CUDA, the copy-engine allgather.
#include <pybind11/native_enum.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "mori/collectives/dtype.h"
#include "mori/collectives/host_collectives.h"
#include "mori/core/reduce.h"
#include "mori/core/status.h"
#include "mori/shmem/runtime.h"

namespace py = pybind11;
using namespace mori;
using namespace mori::collectives;

void bind_ce_engine(py::module_& m);  // ce_engine_bind.cc (CUDA builds) or a stub that says why not

namespace {

void* vp(uintptr_t a) { return reinterpret_cast<void*>(a); }
HostCollectives& hc(const char* caller) { return HostCollectives::get(caller); }

}  // namespace

void bind_collectives(py::module_& m) {
  m.def(
      "size_of", [](int t) { return dtype_size(collectives::check_dtype(t, "size_of")); }, py::arg("dtype"),
      "Bytes of one element of a DataType code.");
  m.def("dtype_name", [](int t) { return std::string(dtype_name(collectives::check_dtype(t, "dtype_name"))); });
  m.def("check_reduce",
        [](int t, int op) { collectives::check_reduce(collectives::check_dtype(t, "reduce"), op, "mori.ccl reduce"); });

  m.def(
      "reduce_arrays",
      [](int t, int op, uintptr_t dst, const std::vector<uintptr_t>& srcs, size_t count) {
        DataType dt = collectives::check_dtype(t, "reduce_arrays");
        ReduceOp rop = collectives::check_reduce(dt, op, "reduce_arrays");
        std::vector<const void*> s(srcs.size());
        for (size_t i = 0; i < srcs.size(); ++i) s[i] = vp(srcs[i]);
        py::gil_scoped_release nogil;
        reduce_arrays(dt, rop, vp(dst), s.data(), static_cast<int>(s.size()), count);
      },
      py::arg("dtype"), py::arg("op"), py::arg("dst"), py::arg("srcs"), py::arg("count"),
      "Local element-wise reduction (the kernel the host all-reduce uses).");

  m.def(
      "allgather",
      [](uintptr_t out, uintptr_t in, size_t bytes) {
        py::gil_scoped_release nogil;
        hc("mori.ccl allgather").allgather(vp(out), vp(in), bytes);
      },
      py::arg("out"), py::arg("inp"), py::arg("bytes"));
  m.def(
      "broadcast",
      [](uintptr_t buf, size_t bytes, int root) {
        py::gil_scoped_release nogil;
        hc("mori.ccl broadcast").broadcast(vp(buf), bytes, root);
      },
      py::arg("buf"), py::arg("bytes"), py::arg("root"));
  m.def(
      "allreduce",
      [](uintptr_t out, uintptr_t in, size_t count, int t, int op) {
        DataType dt = collectives::check_dtype(t, "mori.ccl all_reduce");
        ReduceOp rop = collectives::check_reduce(dt, op, "mori.ccl all_reduce");
        py::gil_scoped_release nogil;
        hc("mori.ccl all_reduce").allreduce(vp(out), vp(in), count, dt, rop);
      },
      py::arg("out"), py::arg("inp"), py::arg("count"), py::arg("dtype"), py::arg("op"));
  m.def(
      "reduce_scatter",
      [](uintptr_t out, uintptr_t in, size_t count, int t, int op) {
        DataType dt = collectives::check_dtype(t, "mori.ccl reduce_scatter");
        ReduceOp rop = collectives::check_reduce(dt, op, "mori.ccl reduce_scatter");
        py::gil_scoped_release nogil;
        hc("mori.ccl reduce_scatter").reduce_scatter(vp(out), vp(in), count, dt, rop);
      },
      py::arg("out"), py::arg("inp"), py::arg("count"), py::arg("dtype"), py::arg("op"));
  m.def(
      "alltoallv",
      [](uintptr_t out, uintptr_t in, const std::vector<size_t>& send_bytes, const std::vector<size_t>& send_offsets,
         const std::vector<size_t>& recv_bytes, const std::vector<size_t>& recv_offsets) {
        auto& h = hc("mori.ccl all_to_all");
        size_t n = static_cast<size_t>(shmem::Runtime::get("mori.ccl all_to_all").n_pes());
        if (send_bytes.size() != n || send_offsets.size() != n || recv_bytes.size() != n || recv_offsets.size() != n)
          raise(Status::kInvalidArgument, "mori.ccl all_to_all: split lists must have one entry per PE (%zu)", n);
        py::gil_scoped_release nogil;
        h.alltoallv(vp(out), vp(in), send_bytes, send_offsets, recv_bytes, recv_offsets);
      },
      py::arg("out"), py::arg("inp"), py::arg("send_bytes"), py::arg("send_offsets"), py::arg("recv_bytes"),
      py::arg("recv_offsets"));
  m.def("runtime_generation", &shmem::Runtime::generation, "Counts shmem inits (cached state checks it).");
  m.def("host_stats", [] {
    const HostStats s = hc("mori.ccl stats").stats();
    py::dict d;
    d["calls"] = s.calls;
    d["rounds"] = s.rounds;
    d["zero_copy"] = s.zero_copy;
    d["bytes_direct"] = s.bytes_direct;
    d["bytes_transport"] = s.bytes_transport;
    d["chunk_bytes"] = hc("mori.ccl stats").chunk_bytes();
    return d;
  });
  m.def(
      "release", [] { HostCollectives::release(); }, py::call_guard<py::gil_scoped_release>(),
      "Free the collectives' symmetric workspace (collective).");
  bind_ce_engine(m);
}
