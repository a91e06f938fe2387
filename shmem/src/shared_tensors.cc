// SPDX-License-Identifier: MIT
// mori._shared_tensors: torch's CPU allocator, wrapped so that large tensors allocated inside a
// shared_tensors() scope (or everywhere, with MORI_SHARED_TENSORS=1) come from this process's
// SharedArena, where PEs on the same host read them in place. Everything else (small tensors,
// a full arena, a fork() child) goes to the allocator torch had before.
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <pybind11/pybind11.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <stdexcept>

#include "mori/core/shared_arena.h"

namespace py = pybind11;

namespace {

thread_local int t_scope_depth = 0;
std::atomic<bool> g_everywhere{false};
std::atomic<size_t> g_min_bytes{size_t{1} << 20};
c10::DeleterFnPtr g_fallback_raw_deleter = nullptr;

void release_block(void* p) { mori::SharedArena::instance().release(p); }

void raw_delete(void* p) {
  mori::SharedArena* a = mori::SharedArena::existing();
  if (a && a->contains(p))
    a->release(p);
  else
    g_fallback_raw_deleter(p);
}

class SharedTensorAllocator final : public c10::Allocator {
 public:
  explicit SharedTensorAllocator(c10::Allocator* fallback) : fallback_(fallback) {}

  c10::DataPtr allocate(size_t n) override {
    if (n >= g_min_bytes.load(std::memory_order_relaxed) &&
        (t_scope_depth > 0 || g_everywhere.load(std::memory_order_relaxed))) {
      if (void* p = mori::SharedArena::instance().allocate(n))
        return {p, p, &release_block, c10::Device(c10::DeviceType::CPU)};
    }
    return fallback_->allocate(n);
  }
  c10::DeleterFnPtr raw_deleter() const override { return g_fallback_raw_deleter ? &raw_delete : nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
  c10::Allocator* fallback() const { return fallback_; }

 private:
  c10::Allocator* fallback_;
};

SharedTensorAllocator* g_allocator = nullptr;

// Installs the wrapper once (torch keeps a raw pointer to it for the life of the process).
void install() {
  if (g_allocator) return;
  c10::Allocator* current = c10::GetCPUAllocator();
  g_fallback_raw_deleter = current->raw_deleter();
  auto a = std::make_unique<SharedTensorAllocator>(current);
  c10::SetCPUAllocator(a.get(), /*priority=*/100);
  if (c10::GetCPUAllocator() != a.get()) {
    throw std::runtime_error(
        "mori.shmem.shared_tensors: torch kept another CPU allocator of higher priority (installed by another "
        "library); shared tensors are unavailable in this process");
  }
  g_allocator = a.release();  // torch holds it until the process ends
}

}  // namespace

PYBIND11_MODULE(_shared_tensors, m) {
  m.doc() = "torch CPU allocator over the PE's shared tensor arena (see mori.shmem.shared_tensors)";
  m.def("install", &install, "Wrap torch's CPU allocator (idempotent).");
  m.def("enter_scope", [] { ++t_scope_depth; });
  m.def("exit_scope", [] {
    if (t_scope_depth > 0) --t_scope_depth;
  });
  m.def("scope_depth", [] { return t_scope_depth; });
  m.def("set_everywhere", [](bool on) { g_everywhere.store(on); });
  m.def("everywhere", [] { return g_everywhere.load(); });
  m.def("set_min_bytes", [](size_t n) { g_min_bytes.store(n); });
  m.def("min_bytes", [] { return g_min_bytes.load(); });
  m.def(
      "contains",
      [](uintptr_t p, size_t n) {
        mori::SharedArena* a = mori::SharedArena::existing();
        return a != nullptr && a->contains(reinterpret_cast<const void*>(p), n);
      },
      py::arg("ptr"), py::arg("nbytes") = 1);
  m.def("trim", [] {
    mori::SharedArena* a = mori::SharedArena::existing();
    return a ? a->trim() : size_t{0};
  });
  m.def("stats", [] {
    py::dict d;
    mori::SharedArena* a = mori::SharedArena::existing();
    d["reserved"] = a ? a->size() : 0;
    d["in_use"] = a ? a->bytes_in_use() : 0;
    d["blocks"] = a ? a->live_blocks() : 0;
    return d;
  });
}
