// SPDX-License-Identifier: MIT
// mori._C.umbp._SsdTier: the SSD tier alone, for its tests and micro benchmark (not public API:
// mori.umbp.UMBPClient is). Values are Python buffers (numpy arrays, bytearray) or raw pointers.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mori/core/status.h"
#include "src/ssd_tier.h"

namespace py = pybind11;
using mori::umbp::SsdTier;

namespace {

mori::umbp::SsdConfig make_config(const std::string& storage_dir, size_t capacity_bytes, size_t segment_size_bytes,
                                  double high_watermark, double low_watermark, const std::string& io_backend,
                                  size_t queue_depth, const std::string& durability, bool enable_background_gc) {
  mori::umbp::SsdConfig c;
  c.storage_dir = storage_dir;
  c.capacity_bytes = capacity_bytes;
  c.segment_size_bytes = segment_size_bytes;
  c.high_watermark = high_watermark;
  c.low_watermark = low_watermark;
  MORI_CHECK_ARG(io_backend == "io_uring" || io_backend == "posix", "io_backend must be 'io_uring' or 'posix'");
  c.io.backend = io_backend == "posix" ? mori::umbp::IoBackend::Posix : mori::umbp::IoBackend::IoUring;
  c.io.queue_depth = queue_depth;
  MORI_CHECK_ARG(durability == "strict" || durability == "relaxed", "durability must be 'strict' or 'relaxed'");
  c.durability.mode = durability == "strict" ? mori::umbp::DurabilityMode::Strict : mori::umbp::DurabilityMode::Relaxed;
  c.durability.enable_background_gc = enable_background_gc;
  return c;
}

// A C-contiguous buffer's address and length.
std::pair<void*, size_t> buffer_of(const py::buffer& b, bool writable) {
  py::buffer_info info = b.request(writable);
  MORI_CHECK_ARG(info.ndim <= 1 || info.strides.back() == info.itemsize, "buffers must be contiguous");
  return {info.ptr, static_cast<size_t>(info.size * info.itemsize)};
}

py::dict stats_dict(const mori::umbp::SsdStats& s) {
  py::dict d;
  d["used_bytes"] = s.used_bytes;
  d["capacity_bytes"] = s.capacity_bytes;
  d["keys"] = s.keys;
  d["segments"] = s.segments;
  d["writes"] = s.writes;
  d["write_bytes"] = s.write_bytes;
  d["reads"] = s.reads;
  d["read_bytes"] = s.read_bytes;
  d["corrupt_reads"] = s.corrupt_reads;
  d["evicted_keys"] = s.evicted_keys;
  d["gc_runs"] = s.gc_runs;
  d["gc_moved_bytes"] = s.gc_moved_bytes;
  d["io_uring"] = s.io_uring;
  d["failed_writes"] = s.failed_writes;
  d["enospc_writes"] = s.enospc_writes;
  d["io_errors"] = s.io_errors;
  d["skipped_records"] = s.skipped_records;
  d["refreshes"] = s.refreshes;
  d["direct_io"] = s.direct_io;
  return d;
}

}  // namespace

void bind_ssd_tier(py::module_& m) {
  py::class_<SsdTier>(m, "_SsdTier", "The SSD tier alone (tests and micro benchmarks).")
      .def(py::init([](const std::string& storage_dir, size_t capacity_bytes, size_t segment_size_bytes,
                       double high_watermark, double low_watermark, const std::string& io_backend, size_t queue_depth,
                       const std::string& durability, bool enable_background_gc, bool reader) {
             auto c = make_config(storage_dir, capacity_bytes, segment_size_bytes, high_watermark, low_watermark,
                                  io_backend, queue_depth, durability, enable_background_gc);
             py::gil_scoped_release release;
             return new SsdTier(c, reader ? mori::umbp::SsdAccess::kReadOnly : mori::umbp::SsdAccess::kReadWrite);
           }),
           py::arg("storage_dir"), py::arg("capacity_bytes") = size_t{1} << 30,
           py::arg("segment_size_bytes") = size_t{256} << 20, py::arg("high_watermark") = 0.9,
           py::arg("low_watermark") = 0.7, py::arg("io_backend") = "io_uring", py::arg("queue_depth") = 4096,
           py::arg("durability") = "strict", py::arg("enable_background_gc") = true, py::arg("reader") = false)
      .def(
          "write",
          [](SsdTier& t, const std::string& key, const py::buffer& value) {
            auto [ptr, size] = buffer_of(value, false);
            py::gil_scoped_release release;
            return t.write(key, ptr, size);
          },
          py::arg("key"), py::arg("value"))
      .def(
          "write_batch",
          [](SsdTier& t, const std::vector<std::string>& keys, const std::vector<py::buffer>& values) {
            std::vector<const void*> ptrs;
            std::vector<size_t> sizes;
            for (const auto& v : values) {
              auto [ptr, size] = buffer_of(v, false);
              ptrs.push_back(ptr);
              sizes.push_back(size);
            }
            py::gil_scoped_release release;
            return t.write_batch(keys, ptrs, sizes);
          },
          py::arg("keys"), py::arg("values"))
      .def(
          "read",
          [](SsdTier& t, const std::string& key, const py::buffer& out) {
            auto [ptr, size] = buffer_of(out, true);
            py::gil_scoped_release release;
            return t.read(key, ptr, size);
          },
          py::arg("key"), py::arg("out"), "Reads the value into out (its whole length must be the value's size).")
      .def(
          "read_batch",
          [](SsdTier& t, const std::vector<std::string>& keys, const std::vector<py::buffer>& outs) {
            std::vector<void*> ptrs;
            std::vector<size_t> sizes;
            for (const auto& o : outs) {
              auto [ptr, size] = buffer_of(o, true);
              ptrs.push_back(ptr);
              sizes.push_back(size);
            }
            py::gil_scoped_release release;
            return t.read_batch(keys, ptrs, sizes);
          },
          py::arg("keys"), py::arg("outs"))
      .def(
          "read_batch_ptrs",
          [](SsdTier& t, const std::vector<std::string>& keys, const std::vector<uintptr_t>& ptrs,
             const std::vector<size_t>& sizes) {
            std::vector<void*> dsts(ptrs.size());
            for (size_t i = 0; i < ptrs.size(); ++i) dsts[i] = reinterpret_cast<void*>(ptrs[i]);
            py::gil_scoped_release release;
            return t.read_batch(keys, dsts, sizes);
          },
          py::arg("keys"), py::arg("ptrs"), py::arg("sizes"))
      .def("contains", &SsdTier::contains, py::arg("key"), py::call_guard<py::gil_scoped_release>())
      .def("value_size", &SsdTier::value_size, py::arg("key"), py::call_guard<py::gil_scoped_release>())
      .def("remove", &SsdTier::remove, py::arg("key"), py::call_guard<py::gil_scoped_release>())
      .def("clear", &SsdTier::clear, py::call_guard<py::gil_scoped_release>())
      .def("flush", &SsdTier::flush, py::call_guard<py::gil_scoped_release>())
      .def("refresh", &SsdTier::refresh, py::call_guard<py::gil_scoped_release>())
      .def("stats", [](const SsdTier& t) { return stats_dict(t.stats()); });
}
