// SPDX-License-Identifier: MIT
#include "src/host_mem_allocator.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "mori/core/log.h"
#include "mori/core/shared_segment.h"
#include "mori/core/status.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

namespace mori::umbp {
namespace {

constexpr int kMpolBind = 2;  // linux/mempolicy.h; called through syscall() so libnuma is not needed

struct Allocation {
  size_t mapped_size = 0;
  HostBufferBacking backing = HostBufferBacking::Anonymous;
  SharedSegment segment;  // Shm backings; empty for private mappings
};

struct Registry {
  std::mutex mu;
  std::map<uintptr_t, Allocation> live;  // base address -> allocation
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: handles may be freed during exit
  return *r;
}

size_t page_size() {
  static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

bool is_huge(HostBufferBacking b) {
  return b == HostBufferBacking::AnonymousHugetlb || b == HostBufferBacking::AnonymousShmHugetlb;
}

bool is_shm(HostBufferBacking b) {
  return b == HostBufferBacking::AnonymousShm || b == HostBufferBacking::AnonymousShmHugetlb;
}

const char* backing_name(HostBufferBacking b) {
  switch (b) {
    case HostBufferBacking::Anonymous: return "Anonymous";
    case HostBufferBacking::AnonymousHugetlb: return "AnonymousHugetlb";
    case HostBufferBacking::AnonymousShm: return "AnonymousShm";
    case HostBufferBacking::AnonymousShmHugetlb: return "AnonymousShmHugetlb";
  }
  return "?";
}

// Binds the pages of [p, p + n) to `node` before they are touched. A failure is not fatal (the
// memory still works, only its placement is the kernel's choice): logged once per process.
void bind_numa(void* p, size_t n, int node) {
  constexpr int kBitsPerWord = 8 * sizeof(unsigned long);
  std::vector<unsigned long> mask(static_cast<size_t>(node / kBitsPerWord + 1), 0);
  mask[static_cast<size_t>(node / kBitsPerWord)] = 1UL << (node % kBitsPerWord);
  long rc = syscall(SYS_mbind, p, n, kMpolBind, mask.data(), mask.size() * kBitsPerWord + 1, 0);
  if (rc != 0) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      MORI_LOG(kWarn, "umbp",
               "NUMA binding of host buffers to node %d failed (%s); pages go where the kernel puts them", node,
               std::strerror(errno));
  }
}

// Faults every page in now, so the first put does not pay for it.
void prefault(void* p, size_t n, size_t page) {
  if (madvise(p, n, MADV_POPULATE_WRITE) == 0) return;
  // Kernels before 5.14: touch one byte per page (the memory is fresh zeros, so writing 0 keeps it).
  auto* bytes = static_cast<volatile char*>(p);
  for (size_t off = 0; off < n; off += page) bytes[off] = 0;
}

void* map_private(size_t n, size_t huge_page_size) {
  int flags = MAP_PRIVATE | MAP_ANONYMOUS;
  if (huge_page_size) flags |= MAP_HUGETLB | (__builtin_ctzll(huge_page_size) << MAP_HUGE_SHIFT);
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, flags, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// Normal pages for a buffer of at least kThpSize: a mapping aligned to kThpSize that the kernel is
// asked to back with transparent huge pages (MADV_HUGEPAGE: where THP is "madvise", the default
// of Ubuntu's kernels, nothing is huge without it). A large copy into 4 KiB pages
// misses the TLB once a page (a 4.5 MiB value: 1,152 walks, dearer still under a hypervisor).
// Without THP in the kernel the advice fails and the pages stay normal: nothing else changes.
constexpr size_t kThpSize = size_t{2} << 20;

void* map_private_thp(size_t n) {
  void* raw = map_private(n + kThpSize, 0);
  if (!raw) return nullptr;
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (base + kThpSize - 1) & ~(uintptr_t{kThpSize} - 1);
  if (aligned > base) munmap(raw, aligned - base);  // the head and tail past the aligned range
  const uintptr_t end = base + n + kThpSize;
  if (end > aligned + n) munmap(reinterpret_cast<void*>(aligned + n), end - (aligned + n));
  void* p = reinterpret_cast<void*>(aligned);
  madvise(p, n, MADV_HUGEPAGE);
  return p;
}

void say_demoted(HostBufferBacking asked, HostBufferBacking got, size_t huge_page_size, int err) {
  static std::atomic<bool> said{false};
  if (!said.exchange(true))
    MORI_LOG(kInfo, "umbp", "%s asked, %s given: no %zu-byte huge pages available (%s)", backing_name(asked),
             backing_name(got), huge_page_size, std::strerror(err));
}

}  // namespace

HostBufferHandle HostMemAllocator::alloc(size_t size, const HostBufferOptions& options) {
  MORI_CHECK_ARG(size > 0, "size must be > 0");
  const size_t page = page_size();
  const bool want_huge = is_huge(options.backing);
  if (want_huge)
    MORI_CHECK_ARG(options.hugepage_size >= page && (options.hugepage_size & (options.hugepage_size - 1)) == 0,
                   "hugepage_size must be a power of two >= the page size %zu (got %zu)", page, options.hugepage_size);
  MORI_CHECK_ARG(options.numa_node >= -1 && options.numa_node < 1024, "numa_node must be -1 or a node number (got %d)",
                 options.numa_node);

  Allocation a;
  void* ptr = nullptr;
  size_t alignment = page;
  HostBufferBacking got = options.backing;

  if (is_shm(options.backing)) {
    if (want_huge) {
      const size_t n = round_up(size, options.hugepage_size);
      try {
        a.segment = SharedSegment::create("umbp-host-buffer", n, options.hugepage_size, options.hugepage_size);
        alignment = options.hugepage_size;
      } catch (const Error&) {
        got = HostBufferBacking::AnonymousShm;
        say_demoted(options.backing, got, options.hugepage_size, errno);
      }
    }
    if (!a.segment.data()) a.segment = SharedSegment::create("umbp-host-buffer", round_up(size, page));
    ptr = a.segment.data();
    a.mapped_size = a.segment.size();
  } else {
    if (want_huge) {
      a.mapped_size = round_up(size, options.hugepage_size);
      ptr = map_private(a.mapped_size, options.hugepage_size);
      if (ptr) {
        alignment = options.hugepage_size;
      } else {
        got = HostBufferBacking::Anonymous;
        say_demoted(options.backing, got, options.hugepage_size, errno);
      }
    }
    if (!ptr) {
      a.mapped_size = round_up(size, page);
      ptr = a.mapped_size >= kThpSize ? map_private_thp(a.mapped_size) : map_private(a.mapped_size, 0);
      if (!ptr) raise_errno("UMBPHostMemAllocator.alloc: mmap of %zu bytes", a.mapped_size);
    }
  }
  a.backing = got;

  if (options.numa_node >= 0) bind_numa(ptr, a.mapped_size, options.numa_node);
  if (options.prefault) prefault(ptr, a.mapped_size, alignment);

  HostBufferHandle h;
  h.ptr = ptr;
  h.requested_size = size;
  h.mapped_size = a.mapped_size;
  h.actual_backing = got;
  h.actual_alignment = alignment;
  h.fd = a.segment.fd();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.live.emplace(reinterpret_cast<uintptr_t>(ptr), std::move(a));
  return h;
}

void HostMemAllocator::free(HostBufferHandle& handle) {
  if (handle.ptr) {
    Allocation gone;
    bool found = false;
    {
      Registry& r = registry();
      std::lock_guard<std::mutex> lock(r.mu);
      auto it = r.live.find(reinterpret_cast<uintptr_t>(handle.ptr));
      if (it != r.live.end()) {
        gone = std::move(it->second);
        r.live.erase(it);
        found = true;
      }
    }
    // Unmapped outside the lock; a segment unmaps itself when `gone` goes.
    if (found && !gone.segment.data()) munmap(handle.ptr, gone.mapped_size);
  }
  handle = HostBufferHandle{};
}

std::optional<HostRegion> find_host_region(const void* ptr, size_t size) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.live.upper_bound(p);
  if (it == r.live.begin()) return std::nullopt;
  --it;
  const Allocation& a = it->second;
  if (p < it->first || p + size > it->first + a.mapped_size || p + size < p) return std::nullopt;
  return HostRegion{reinterpret_cast<void*>(it->first), a.mapped_size, a.segment.fd(), a.backing};
}

}  // namespace mori::umbp
