// SPDX-License-Identifier: MIT
// mori._C.shmem: the runtime's host API with addresses as Python ints.
#include <pybind11/native_enum.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "mori/core/python_bootstrap.h"
#include "mori/core/status.h"
#include "mori/core/store.h"
#include "mori/core/unique_id.h"
#include "mori/shmem/runtime.h"

namespace py = pybind11;
using namespace mori;
using mori::shmem::Runtime;

namespace {

Runtime& rt(const char* caller) { return Runtime::get(caller); }
void* vp(uintptr_t a) { return reinterpret_cast<void*>(a); }
uintptr_t ip(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// A local word that a wait, test or signal read loads: it must lie in this PE's host memory
// (a symmetric heap or region), or the load would fault on a bad address instead of raising.
void local_word(const Runtime& r, uintptr_t addr, int width, const char* caller) {
  RemoteRef ref = r.resolve(vp(addr), static_cast<size_t>(width), caller);
  if (ref.region->kind != MemKind::kHost)
    raise(Status::kInvalidArgument, "%s: %p is GPU memory; the host cannot wait on it", caller, vp(addr));
  if (ref.offset % static_cast<size_t>(width))
    raise(Status::kInvalidArgument, "%s: %d-byte word at %p is not %d-byte aligned", caller, width, vp(addr), width);
}

shmem::Word wait_word(int width, int num, const char* caller) {
  if (width != 1 && width != 2 && width != 4 && width != 8)
    raise(Status::kInvalidArgument, "%s: word width must be 1, 2, 4 or 8 bytes, got %d", caller, width);
  if (num < 0 || num > static_cast<int>(shmem::Num::kFloat) ||
      (num == static_cast<int>(shmem::Num::kFloat) && width < 4))
    raise(Status::kInvalidArgument, "%s: unknown number kind %d for a %d-byte word", caller, num, width);
  return shmem::Word{width, static_cast<shmem::Num>(num)};
}

shmem::Cmp comparison(int cmp, const char* caller) {
  if (cmp < 0 || cmp > static_cast<int>(shmem::Cmp::kGe))
    raise(Status::kInvalidArgument, "%s: unknown comparison %d (SHMEM_CMP_* are 0..5)", caller, cmp);
  return static_cast<shmem::Cmp>(cmp);
}

constexpr size_t kReleaseGilBytes = 64 * 1024;  // below this, dropping the GIL costs more than it saves

}  // namespace

void bind_shmem_gpu(py::module_& m);  // bind_shmem_gpu.cc

void bind_shmem(py::module_& m) {
  // The runtime's enums as Python IntEnums: mori.shmem's CMP_*/SIGNAL_* constants and its AMO op
  // names are these members, not copies of the numbers.
  py::native_enum<AmoOp>(m, "AmoOp", "enum.IntEnum", "Atomic memory operations of the runtime.")
      .value("FETCH", AmoOp::kFetch)
      .value("SET", AmoOp::kSet)
      .value("SWAP", AmoOp::kSwap)
      .value("COMPARE_SWAP", AmoOp::kCompareSwap)
      .value("ADD", AmoOp::kAdd)
      .value("FETCH_ADD", AmoOp::kFetchAdd)
      .value("AND", AmoOp::kAnd)
      .value("FETCH_AND", AmoOp::kFetchAnd)
      .value("OR", AmoOp::kOr)
      .value("FETCH_OR", AmoOp::kFetchOr)
      .value("XOR", AmoOp::kXor)
      .value("FETCH_XOR", AmoOp::kFetchXor)
      .finalize();
  py::native_enum<SignalOp>(m, "SignalOp", "enum.IntEnum", "How put_signal updates the signal word.")
      .value("SET", SignalOp::kSet)
      .value("ADD", SignalOp::kAdd)
      .finalize();
  py::native_enum<shmem::Cmp>(m, "Cmp", "enum.IntEnum", "Comparison of a wait or test (OpenSHMEM's SHMEM_CMP_*).")
      .value("EQ", shmem::Cmp::kEq)
      .value("NE", shmem::Cmp::kNe)
      .value("GT", shmem::Cmp::kGt)
      .value("LE", shmem::Cmp::kLe)
      .value("LT", shmem::Cmp::kLt)
      .value("GE", shmem::Cmp::kGe)
      .finalize();
  py::native_enum<shmem::Num>(m, "Num", "enum.IntEnum", "How the bytes of a waited-on or atomic word compare.")
      .value("SIGNED", shmem::Num::kSigned)
      .value("UNSIGNED", shmem::Num::kUnsigned)
      .value("FLOAT", shmem::Num::kFloat)
      .finalize();
  py::native_enum<shmem::ThreadLevel>(m, "ThreadLevel", "enum.IntEnum", "OpenSHMEM thread levels.")
      .value("SINGLE", shmem::ThreadLevel::kSingle)
      .value("FUNNELED", shmem::ThreadLevel::kFunneled)
      .value("SERIALIZED", shmem::ThreadLevel::kSerialized)
      .value("MULTIPLE", shmem::ThreadLevel::kMultiple)
      .finalize();
  // The inits wait for the other PEs (up to MORI_BOOTSTRAP_TIMEOUT) without the GIL: another
  // thread of the process keeps running meanwhile (and is told at once if it tries to be a
  // second PE, see shmem/api.py), instead of the whole interpreter stopping for the timeout.
  m.def(
      "init_single", [] { Runtime::init(make_single_bootstrap()); }, py::call_guard<py::gil_scoped_release>(),
      "Initialize a job of one PE.");
  m.def(
      "init_unique_id",
      [](py::bytes uid, int rank, int nranks) {
        std::string s = uid;
        py::gil_scoped_release nogil;
        auto b = bootstrap_from_unique_id(reinterpret_cast<const uint8_t*>(s.data()), s.size(), rank, nranks);
        Runtime::init(std::move(b));
      },
      py::arg("unique_id"), py::arg("rank"), py::arg("nranks"));
  m.def(
      "init_store",
      [](const std::string& host, int port, const std::string& secret_hex, int rank, int nranks, bool host_locally,
         int store_rank) {
        py::gil_scoped_release nogil;
        auto b = bootstrap_from_store(host, port, secret_from_hex(secret_hex), rank, nranks, host_locally, store_rank);
        Runtime::init(std::move(b));
      },
      py::arg("host"), py::arg("port"), py::arg("secret_hex"), py::arg("rank"), py::arg("nranks"),
      py::arg("host_locally") = false, py::arg("store_rank") = -1);
  m.def(
      "init_python", [](py::object impl) { Runtime::init(make_python_bootstrap(std::move(impl))); },
      py::arg("bootstrap"));
  m.def("finalize", [] { Runtime::finalize(); });
  m.def("initialized", &Runtime::initialized);

  m.def("my_pe", [] { return rt("shmem_mype").my_pe(); });
  m.def("n_pes", [] { return rt("shmem_npes").n_pes(); });
  m.def("bootstrap_name", [] { return rt("bootstrap_name").bootstrap().describe(); });
  m.def("transport_name", [](int pe) { return std::string(rt("transport_name").transport_name(pe)); });
  m.def("transport_endpoint", [](int pe) { return rt("transport_endpoint").transport_endpoint(pe); });
  m.def("topology", [] {
    const Topology& t = rt("topology").topology();
    py::dict d;
    d["my_pe"] = t.my_pe();
    d["n_pes"] = t.n_pes();
    d["num_nodes"] = t.num_nodes();
    d["local_rank"] = t.local_rank();
    d["local_size"] = t.local_size();
    d["local_pes"] = t.local_pes();
    py::list pes;
    for (int pe = 0; pe < t.n_pes(); ++pe) {
      py::dict p;
      p["pe"] = pe;
      p["node"] = t.node_of(pe);
      p["node_id"] = std::string(t.pe(pe).node_id);
      p["hostname"] = std::string(t.pe(pe).hostname);
      p["pid"] = t.pe(pe).pid;
      p["local_rank"] = t.local_rank_of(pe);
      p["ip"] = std::string(t.pe(pe).ip);
      pes.append(p);
    }
    d["pes"] = pes;
    return d;
  });

  // ---- memory
  m.def(
      "malloc",
      [](size_t n, size_t align, bool barrier) {
        Runtime& r = rt("shmem_malloc");
        py::gil_scoped_release nogil;
        return ip(r.malloc(n, align, "shmem_malloc", barrier));
      },
      py::arg("size"), py::arg("alignment") = 64, py::arg("barrier") = true);
  m.def("calloc", [](size_t c, size_t n) {
    Runtime& r = rt("shmem_calloc");
    py::gil_scoped_release nogil;
    return ip(r.calloc(c, n, "shmem_calloc"));
  });
  m.def("realloc", [](uintptr_t p, size_t n) {
    Runtime& r = rt("shmem_realloc");
    py::gil_scoped_release nogil;
    return ip(r.realloc(vp(p), n, "shmem_realloc"));
  });
  m.def(
      "free",
      [](uintptr_t p, bool barrier) {
        Runtime& r = rt("shmem_free");
        py::gil_scoped_release nogil;
        r.free(vp(p), "shmem_free", barrier);
      },
      py::arg("ptr"), py::arg("barrier") = true);
  m.def("heap_base", [] { return ip(rt("heap_base").heap_base()); });
  m.def("heap_size", [] { return rt("heap_size").heap_size(); });
  m.def("heap_free", [] { return rt("heap_free").heap_free(); });
  m.def("ptr", [](uintptr_t p, int pe) { return ip(rt("shmem_ptr").ptr(vp(p), pe)); });
  m.def("is_symmetric", [](uintptr_t p) { return rt("is_symmetric").is_symmetric(vp(p)); });
  m.def("remote_address", [](uintptr_t p, int pe) { return rt("remote_address").remote_address(vp(p), pe); });
  m.def("buffer_register", [](uintptr_t p, size_t n) { rt("shmem_buffer_register").register_buffer(vp(p), n); });
  m.def("buffer_deregister", [](uintptr_t p, size_t n) { rt("shmem_buffer_deregister").deregister_buffer(vp(p), n); });

  // ---- RMA
  m.def(
      "put",
      [](uintptr_t dst, uintptr_t src, size_t n, int pe, bool nbi) {
        Runtime& r = rt("shmem_put");
        if (n >= kReleaseGilBytes) {
          py::gil_scoped_release nogil;
          r.put(vp(dst), vp(src), n, pe, nbi);
        } else {
          r.put(vp(dst), vp(src), n, pe, nbi);
        }
      },
      py::arg("dst"), py::arg("src"), py::arg("nbytes"), py::arg("pe"), py::arg("nbi") = false);
  m.def(
      "get",
      [](uintptr_t dst, uintptr_t src, size_t n, int pe, bool nbi) {
        Runtime& r = rt("shmem_get");
        if (n >= kReleaseGilBytes) {
          py::gil_scoped_release nogil;
          r.get(vp(dst), vp(src), n, pe, nbi);
        } else {
          r.get(vp(dst), vp(src), n, pe, nbi);
        }
      },
      py::arg("dst"), py::arg("src"), py::arg("nbytes"), py::arg("pe"), py::arg("nbi") = false);
  m.def("iput", [](uintptr_t dst, uintptr_t src, ptrdiff_t dst_stride, ptrdiff_t src_stride, size_t nelems, size_t elem,
                   int pe) { rt("shmem_iput").iput(vp(dst), vp(src), dst_stride, src_stride, nelems, elem, pe); });
  m.def("iget", [](uintptr_t dst, uintptr_t src, ptrdiff_t dst_stride, ptrdiff_t src_stride, size_t nelems, size_t elem,
                   int pe) { rt("shmem_iget").iget(vp(dst), vp(src), dst_stride, src_stride, nelems, elem, pe); });
  m.def(
      "atomic",
      [](uintptr_t target, int op, int width, uint64_t operand, uint64_t compare, int pe) {
        if (op < 0 || op > static_cast<int>(AmoOp::kFetchXor))
          raise(Status::kInvalidArgument, "unknown atomic op %d", op);
        return rt("shmem_atomic").atomic(vp(target), static_cast<AmoOp>(op), width, operand, compare, pe);
      },
      py::arg("target"), py::arg("op"), py::arg("width"), py::arg("operand"), py::arg("compare"), py::arg("pe"));
  m.def(
      "put_signal",
      [](uintptr_t dst, uintptr_t src, size_t n, uintptr_t sig, uint64_t value, int op, int pe, bool nbi) {
        if (op != 0 && op != 1)
          raise(Status::kInvalidArgument, "sig_op must be SIGNAL_SET (0) or SIGNAL_ADD (1), got %d", op);
        rt("shmem_put_signal")
            .put_signal(vp(dst), vp(src), n, static_cast<uint64_t*>(vp(sig)), value, static_cast<SignalOp>(op), pe,
                        nbi);
      },
      py::arg("dst"), py::arg("src"), py::arg("nbytes"), py::arg("signal"), py::arg("value"), py::arg("sig_op"),
      py::arg("pe"), py::arg("nbi") = false);
  m.def("signal_fetch", [](uintptr_t sig) {
    Runtime& r = rt("shmem_signal_fetch");
    local_word(r, sig, 8, "shmem_signal_fetch");
    return r.signal_fetch(static_cast<uint64_t*>(vp(sig)));
  });
  m.def("fence", [] { rt("shmem_fence").fence(); }, "Order earlier puts/atomics to each PE before later ones.");
  m.def("quiet", [] { rt("shmem_quiet").quiet(); }, "Complete every outstanding put, get and atomic of this PE.");
  // MORI-style address API, bound directly (no Python wrapper) because small-message latency
  // from Python is dominated by call overhead.
  m.def(
      "putmem",
      [](uintptr_t dst, uintptr_t src, size_t n, int pe) {
        Runtime& r = rt("shmem_putmem");
        if (n >= kReleaseGilBytes) {
          py::gil_scoped_release nogil;
          r.put(vp(dst), vp(src), n, pe, false);
        } else {
          r.put(vp(dst), vp(src), n, pe, false);
        }
      },
      py::arg("dest"), py::arg("source"), py::arg("nbytes"), py::arg("pe"),
      "Copy nbytes from local address source to symmetric address dest on pe (returns when source is reusable).");
  m.def(
      "putmem_nbi",
      [](uintptr_t dst, uintptr_t src, size_t n, int pe) {
        Runtime& r = rt("shmem_putmem_nbi");
        if (n >= kReleaseGilBytes) {
          py::gil_scoped_release nogil;
          r.put(vp(dst), vp(src), n, pe, true);
        } else {
          r.put(vp(dst), vp(src), n, pe, true);
        }
      },
      py::arg("dest"), py::arg("source"), py::arg("nbytes"), py::arg("pe"),
      "Non-blocking putmem: complete after quiet().");
  m.def(
      "getmem",
      [](uintptr_t dst, uintptr_t src, size_t n, int pe) {
        Runtime& r = rt("shmem_getmem");
        if (n >= kReleaseGilBytes) {
          py::gil_scoped_release nogil;
          r.get(vp(dst), vp(src), n, pe, false);
        } else {
          r.get(vp(dst), vp(src), n, pe, false);
        }
      },
      py::arg("dest"), py::arg("source"), py::arg("nbytes"), py::arg("pe"),
      "Copy nbytes from symmetric address source on pe to local address dest.");

  // ---- synchronization
  m.def(
      "test",
      [](uintptr_t ivar, int cmp, uint64_t value, int width, int num) {
        Runtime& r = rt("shmem_test");
        shmem::Word word = wait_word(width, num, "shmem_test");
        local_word(r, ivar, width, "shmem_test");
        return r.test(vp(ivar), comparison(cmp, "shmem_test"), value, word);
      },
      py::arg("ivar"), py::arg("cmp"), py::arg("value"), py::arg("width"), py::arg("num"));
  m.def(
      "wait_until",
      [](uintptr_t ivar, int cmp, uint64_t value, int width, int num) {
        Runtime& r = rt("shmem_wait_until");
        shmem::Word word = wait_word(width, num, "shmem_wait_until");
        shmem::Cmp op = comparison(cmp, "shmem_wait_until");
        local_word(r, ivar, width, "shmem_wait_until");
        py::gil_scoped_release nogil;
        return r.wait_until(vp(ivar), op, value, word);
      },
      py::arg("ivar"), py::arg("cmp"), py::arg("value"), py::arg("width"), py::arg("num"));
  m.def("barrier_all", [] {
    Runtime& r = rt("shmem_barrier_all");
    py::gil_scoped_release nogil;
    r.barrier_all();
  });
  bind_shmem_gpu(m);
}
