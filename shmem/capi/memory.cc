// SPDX-License-Identifier: MIT
// Symmetric heap routines. Exhaustion returns NULL (as the spec says) with a warning
// naming the call; every PE fails alike because allocation is symmetric.
#include <cstdio>

#include "capi/state.h"
#include "mori/core/heap_allocator.h"
#include "mori/core/log.h"
#include "mori/core/status.h"

using namespace mori::capi;

namespace {

constexpr size_t kDefaultAlign = 64;  // a cache line: no false sharing between allocations

template <typename F>
void* allocate(const char* fn, F&& f) {
  return capi_call(fn, [&]() -> void* {
    try {
      return f(rt(fn));
    } catch (const mori::Error& e) {
      if (e.status() != mori::Status::kOutOfMemory) throw;
      MORI_LOG(kWarn, "SHMEM", "%s returns NULL: %s", fn, e.what());
      return nullptr;
    }
  });
}

}  // namespace

extern "C" {

void* shmem_malloc(size_t size) {
  return allocate("shmem_malloc", [&](auto& r) { return r.malloc(size, kDefaultAlign, "shmem_malloc"); });
}

void* shmem_malloc_with_hints(size_t size, long hints) {
  (void)hints;  // every allocation already supports remote atomics and signals
  return allocate("shmem_malloc_with_hints",
                  [&](auto& r) { return r.malloc(size, kDefaultAlign, "shmem_malloc_with_hints"); });
}

void* shmem_calloc(size_t count, size_t size) {
  return allocate("shmem_calloc", [&](auto& r) { return r.calloc(count, size, "shmem_calloc"); });
}

void* shmem_realloc(void* ptr, size_t size) {
  return allocate("shmem_realloc", [&](auto& r) { return r.realloc(ptr, size, "shmem_realloc"); });
}

void* shmem_align(size_t alignment, size_t size) {
  return allocate("shmem_align", [&](auto& r) -> void* {
    if (alignment == 0 || (alignment & (alignment - 1)))
      mori::raise(mori::Status::kInvalidArgument, "alignment %zu is not a power of two", alignment);
    return r.malloc(size, alignment < kDefaultAlign ? kDefaultAlign : alignment, "shmem_align");
  });
}

void shmem_free(void* ptr) {
  return capi_call("shmem_free", [&] { rt("shmem_free").free(ptr, "shmem_free"); });
}

// ---- deprecated names
void* shmalloc(size_t size) { return shmem_malloc(size); }
void shfree(void* ptr) { shmem_free(ptr); }
void* shrealloc(void* ptr, size_t size) { return shmem_realloc(ptr, size); }
void* shmemalign(size_t alignment, size_t size) { return shmem_align(alignment, size); }

}  // extern "C"
