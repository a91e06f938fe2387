// SPDX-License-Identifier: MIT
// mori._C.shmem: the GPU heap's host API (addresses and cudaStream_t handles as ints).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "mori/shmem/gpu_heap.h"
#include "mori/shmem/runtime.h"

namespace py = pybind11;
using mori::shmem::GpuHeap;
using mori::shmem::Runtime;

namespace {

void* vp(uintptr_t a) { return reinterpret_cast<void*>(a); }
uintptr_t ip(const void* p) { return reinterpret_cast<uintptr_t>(p); }
GpuHeap& heap(const char* caller) { return Runtime::get(caller).gpu_heap(caller); }

}  // namespace

void bind_shmem_gpu(py::module_& m) {
  m.def("built_with_cuda", &GpuHeap::built_with_cuda, "Whether this MORI has its CUDA code compiled in.");
  m.def("cuda_device_count", &GpuHeap::device_count, "CUDA devices this process sees (0 without CUDA).");
  m.def(
      "pointer_device", [](uintptr_t ptr) { return GpuHeap::pointer_device(vp(ptr)); }, py::arg("ptr"),
      "CUDA device whose memory the address points into, else -1 (host memory).");
  m.def("bind_device", &Runtime::bind_device, py::arg("device"),
        "Device the next init binds when MORI_DEVICE is unset (-1: none).");
  // `caller`: the API function the "used before init" error names (shmem_malloc, not gpu_bound).
  m.def(
      "gpu_bound", [](const std::string& caller) { return Runtime::get(caller.c_str()).gpu() != nullptr; },
      py::arg("caller") = "gpu_bound");
  m.def("gpu_device", [] {
    GpuHeap* h = Runtime::get("gpu_device").gpu();
    return h ? h->device() : -1;
  });
  m.def("gpu_heap_base", [] { return ip(heap("gpu_heap_base").base()); });
  m.def("gpu_heap_size", [] { return heap("gpu_heap_size").size(); });
  m.def("gpu_heap_free", [] { return heap("gpu_heap_free").bytes_free(); });
  m.def(
      "gpu_contains",
      [](uintptr_t p, const std::string& caller) {
        GpuHeap* h = Runtime::get(caller.c_str()).gpu();
        return h != nullptr && h->contains(vp(p));
      },
      py::arg("ptr"), py::arg("caller") = "gpu_contains");
  m.def("gpu_reachable", [](int pe) {
    Runtime& r = Runtime::get("gpu_reachable");
    r.check_pe(pe, "gpu_reachable");
    return r.gpu_heap("gpu_reachable").reachable(pe);
  });
  m.def("device_transport_name",
        [](int pe) { return std::string(Runtime::get("transport_name").device_transport_name(pe)); });
  m.def("device_state_ptr", [] { return ip(heap("device_state_ptr").device_state_ptr()); });
  m.def("device_state_bytes", [] {
    const auto& s = heap("device_state_bytes").device_state();
    return py::bytes(reinterpret_cast<const char*>(&s), sizeof(s));
  });
  m.def("gpu_peer_bases", [] {
    std::vector<uintptr_t> out;
    for (char* p : heap("gpu_peer_bases").peer_bases()) out.push_back(ip(p));
    return out;
  });
  m.def(
      "gpu_malloc",
      [](size_t n, size_t align, bool barrier) {
        Runtime& r = Runtime::get("shmem_malloc");
        py::gil_scoped_release nogil;
        return ip(r.gpu_malloc(n, align, "shmem_malloc", barrier));
      },
      py::arg("size"), py::arg("alignment") = 256, py::arg("barrier") = true);
  m.def(
      "gpu_free",
      [](uintptr_t p, bool barrier) {
        Runtime& r = Runtime::get("shmem_free");
        py::gil_scoped_release nogil;
        r.gpu_free(vp(p), "shmem_free", barrier);
      },
      py::arg("ptr"), py::arg("barrier") = true);

  // ---- stream-ordered operations
  m.def(
      "put_on_stream",
      [](uintptr_t dst, uintptr_t src, size_t n, int pe, uintptr_t stream) {
        heap("putmem_on_stream").put_on_stream(vp(dst), vp(src), n, pe, vp(stream), "putmem_on_stream");
      },
      py::arg("dst"), py::arg("src"), py::arg("nbytes"), py::arg("pe"), py::arg("stream"));
  m.def(
      "get_on_stream",
      [](uintptr_t dst, uintptr_t src, size_t n, int pe, uintptr_t stream) {
        heap("getmem_on_stream").get_on_stream(vp(dst), vp(src), n, pe, vp(stream), "getmem_on_stream");
      },
      py::arg("dst"), py::arg("src"), py::arg("nbytes"), py::arg("pe"), py::arg("stream"));
  m.def(
      "put_sm_on_stream",
      [](uintptr_t dst, uintptr_t src, size_t n, int pe, int blocks, uintptr_t stream) {
        heap("putmem_on_stream").put_sm_on_stream(vp(dst), vp(src), n, pe, blocks, vp(stream), "putmem_on_stream");
      },
      py::arg("dst"), py::arg("src"), py::arg("nbytes"), py::arg("pe"), py::arg("blocks"), py::arg("stream"));
  m.def(
      "put_signal_on_stream",
      [](uintptr_t dst, uintptr_t src, size_t n, uintptr_t sig, uint64_t value, int op, int pe, uintptr_t stream) {
        heap("putmem_signal_on_stream")
            .put_signal_on_stream(vp(dst), vp(src), n, static_cast<uint64_t*>(vp(sig)), value, op, pe, vp(stream),
                                  "putmem_signal_on_stream");
      },
      py::arg("dst"), py::arg("src"), py::arg("nbytes"), py::arg("signal"), py::arg("value"), py::arg("sig_op"),
      py::arg("pe"), py::arg("stream"));
  m.def(
      "signal_wait_until_on_stream",
      [](uintptr_t sig, int cmp, uint64_t value, uintptr_t stream) {
        heap("signal_wait_until_on_stream")
            .signal_wait_until_on_stream(static_cast<uint64_t*>(vp(sig)), cmp, value, vp(stream),
                                         "signal_wait_until_on_stream");
      },
      py::arg("signal"), py::arg("cmp"), py::arg("value"), py::arg("stream"));
  m.def(
      "barrier_on_stream", [](uintptr_t stream) { heap("shmem_barrier_on_stream").barrier_on_stream(vp(stream)); },
      py::arg("stream"));
}
