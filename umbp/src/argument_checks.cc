// SPDX-License-Identifier: MIT
#include "src/argument_checks.h"

#include <atomic>
#include <chrono>

#include "mori/core/status.h"
#include "mori/umbp/client.h"

#ifdef MORI_WITH_CUDA
#include <dlfcn.h>

#include "mori/shmem/gpu_heap.h"
#endif

namespace mori::umbp {
namespace {

#ifdef MORI_WITH_CUDA
// Whether the CUDA driver is loaded in this process. Until it is, no pointer can be device
// memory, and asking CUDA about one would initialise CUDA (seconds, and a context on a GPU)
// in a process that never wanted it. Looked up again at most every 100 ms until found.
bool cuda_driver_loaded() {
  static std::atomic<bool> loaded{false};
  static std::atomic<int64_t> next_look_ns{0};
  if (loaded.load(std::memory_order_relaxed)) return true;
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  if (now < next_look_ns.load(std::memory_order_relaxed)) return false;
  next_look_ns.store(now + 100'000'000, std::memory_order_relaxed);
  if (void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD)) {
    dlclose(h);
    loaded.store(true, std::memory_order_relaxed);
    return true;
  }
  return false;
}
#endif

// `index` >= 0: the element of a batch list `arg`.
void check_host_pointer(const char* call, uintptr_t ptr, const char* arg, long index = -1) {
#ifdef MORI_WITH_CUDA
  if (!cuda_driver_loaded()) return;
  const int device = shmem::GpuHeap::pointer_device(reinterpret_cast<const void*>(ptr));
  if (device >= 0)
    raise(Status::kInvalidArgument,
          "%s: %s%s (0x%zx) is memory of CUDA device %d; the store copies host memory only "
          "(stage GPU pages through a host buffer)",
          call, arg, index >= 0 ? format("[%ld]", index).c_str() : "", static_cast<size_t>(ptr), device);
#else
  (void)call, (void)ptr, (void)arg, (void)index;
#endif
}

}  // namespace

int pointer_device(uintptr_t ptr) {
#ifdef MORI_WITH_CUDA
  if (!cuda_driver_loaded()) return -1;
  return shmem::GpuHeap::pointer_device(reinterpret_cast<const void*>(ptr));
#else
  (void)ptr;
  return -1;
#endif
}

void check_key(const char* call, const std::string& key, const char* arg) {
  MORI_CHECK_ARG(!key.empty(), "%s: %s must not be empty", call, arg);
  MORI_CHECK_ARG(key.size() <= kMaxKeyBytes, "%s: %s is %zu bytes, over the limit of %zu", call, arg, key.size(),
                 kMaxKeyBytes);
}

void check_buffer(const char* call, uintptr_t ptr, size_t size, const char* ptr_arg, const char* size_arg) {
  MORI_CHECK_ARG(ptr != 0, "%s: %s is a null pointer", call, ptr_arg);
  MORI_CHECK_ARG(size > 0, "%s: %s must be > 0", call, size_arg);
  MORI_CHECK_ARG(ptr + size > ptr, "%s: %s + %s wraps around the address space", call, ptr_arg, size_arg);
  check_host_pointer(call, ptr, ptr_arg);
}

namespace {

void check_key_at(const char* call, size_t i, std::string_view key) {
  MORI_CHECK_ARG(!key.empty(), "%s: keys[%zu] must not be empty", call, i);
  MORI_CHECK_ARG(key.size() <= kMaxKeyBytes, "%s: keys[%zu] is %zu bytes, over the limit of %zu", call, i, key.size(),
                 kMaxKeyBytes);
}

}  // namespace

void check_keys(const char* call, const std::vector<std::string>& keys) {
  for (size_t i = 0; i < keys.size(); ++i) check_key_at(call, i, keys[i]);
}

void check_keys(const char* call, const std::string_view* keys, size_t n) {
  for (size_t i = 0; i < n; ++i) check_key_at(call, i, keys[i]);
}

void check_batch(const char* call, const std::vector<std::string>& keys, const std::vector<uintptr_t>& ptrs,
                 const std::vector<size_t>& sizes, const std::vector<int>* depths) {
  MORI_CHECK_ARG(ptrs.size() == keys.size(), "%s: ptrs has %zu entries, keys %zu: they must match", call, ptrs.size(),
                 keys.size());
  MORI_CHECK_ARG(sizes.size() == keys.size(), "%s: sizes has %zu entries, keys %zu: they must match", call,
                 sizes.size(), keys.size());
  if (depths)
    MORI_CHECK_ARG(depths->empty() || depths->size() == keys.size(),
                   "%s: depths has %zu entries, keys %zu: they must match (or depths be empty)", call, depths->size(),
                   keys.size());
  check_keys(call, keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    MORI_CHECK_ARG(ptrs[i] != 0, "%s: ptrs[%zu] is a null pointer", call, i);
    MORI_CHECK_ARG(sizes[i] > 0, "%s: sizes[%zu] must be > 0", call, i);
    MORI_CHECK_ARG(ptrs[i] + sizes[i] > ptrs[i], "%s: ptrs[%zu] + sizes[%zu] wraps around the address space", call, i,
                   i);
    check_host_pointer(call, ptrs[i], "ptrs", static_cast<long>(i));
  }
}

}  // namespace mori::umbp
