// SPDX-License-Identifier: MIT
#include "capi/symmetric_data.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <string>

#include "mori/core/env.h"
#include "mori/core/log.h"
#include "mori/core/status.h"
#include "mori/shmem/runtime.h"

namespace mori::capi {
namespace {

struct Span {
  uintptr_t start = 0, end = 0;
};

// The main program is the first object dl_iterate_phdr reports. Its writable PT_LOAD
// holds .data and .bss; the part covered by PT_GNU_RELRO becomes read-only after
// relocation and is left alone (page granularity, as the dynamic linker protects it).
int find_data(struct dl_phdr_info* info, size_t, void* out) {
  auto* span = static_cast<Span*>(out);
  uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t relro_end = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_GNU_RELRO) relro_end = (info->dlpi_addr + ph.p_vaddr + ph.p_memsz) & ~(page - 1);
  }
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_W)) continue;
    uintptr_t lo = (info->dlpi_addr + ph.p_vaddr) & ~(page - 1);
    uintptr_t hi = (info->dlpi_addr + ph.p_vaddr + ph.p_memsz + page - 1) & ~(page - 1);
    if (relro_end > lo && relro_end <= hi) lo = relro_end;
    if (hi > lo) *span = {lo, hi};
    break;
  }
  return 1;  // only the main program
}

Span g_span;

// The span is copied without memcpy: in a program built with -fsanitize=address, memcpy is
// the sanitizer's interceptor, which refuses to read the poisoned redzones it keeps between
// globals, and this copy must take every byte. (Redzones stay poisoned: the shadow memory
// is untouched by the remap, so ASan still checks the program's own accesses to globals.)
// At init the kernel copies (write_span); a forked child's private copy uses copy_words.
void copy_words(void* dst, const void* src, size_t n) {
  auto* d = static_cast<volatile uint64_t*>(dst);  // volatile: not turned back into memcpy
  auto* s = static_cast<const volatile uint64_t*>(src);
  for (size_t i = 0; i < n / sizeof(uint64_t); ++i) d[i] = s[i];
}

// Writes [src, src + n) to the start of `fd` by raw system calls (not libc's write, which
// sanitizers also intercept).
bool write_span(int fd, const void* src, size_t n) {
  auto* p = static_cast<const char*>(src);
  for (size_t done = 0; done < n;) {
    long w = syscall(SYS_pwrite64, fd, p + done, n - done, static_cast<off_t>(done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    done += static_cast<size_t>(w);
  }
  return true;
}

// A forked child must not keep sharing its parent's globals: give it a private copy.
void privatize_in_child() {
  if (!g_span.start) return;
  size_t n = g_span.end - g_span.start;
  void* tmp = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (tmp == MAP_FAILED) return;
  copy_words(tmp, reinterpret_cast<void*>(g_span.start), n);
  void* p = mmap(reinterpret_cast<void*>(g_span.start), n, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (p != MAP_FAILED) copy_words(p, tmp, n);
  munmap(tmp, n);
  g_span = {};
}

}  // namespace

size_t make_data_symmetric() {
  if (!env::get().shmem_symmetric_data) return 0;
  Span span;
  dl_iterate_phdr(find_data, &span);
  size_t n = span.end - span.start;
  if (!span.start || n == 0) return 0;
  auto& rt = shmem::Runtime::get("shmem_init");

  if (g_span.start != span.start) {  // not already shared by an earlier init
    // An anonymous memory file, as the heap's segment is (core/shared_segment.h): nothing
    // appears in /dev/shm, so a PE killed during init leaves nothing behind. Peers on this
    // host open it through /proc/PID/fd/N while this PE keeps the descriptor open.
    int fd = memfd_create("mori-data", MFD_CLOEXEC);
    if (fd < 0) raise_errno("shmem_init: memfd_create for the symmetric data segment");
    struct Closer {
      int fd;
      ~Closer() { close(fd); }
    } closer{fd};
    if (ftruncate(fd, static_cast<off_t>(n)) != 0)
      raise_errno("shmem_init: ftruncate of the symmetric data segment to %zu bytes", n);
    // Copy the live contents into the file, then swap the pages in place: one mmap call
    // replaces the private pages with shared ones holding the same bytes.
    if (!write_span(fd, reinterpret_cast<void*>(span.start), n))
      raise_errno("shmem_init: copying %zu bytes of data+bss into the symmetric data segment", n);
    void* p = mmap(reinterpret_cast<void*>(span.start), n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    if (p == MAP_FAILED)
      raise_errno("shmem_init: remapping the data segment [%p, +%zu)", reinterpret_cast<void*>(span.start), n);
    static bool atfork_done = false;
    if (!atfork_done) pthread_atfork(nullptr, nullptr, privatize_in_child);
    atfork_done = true;
    g_span = span;
    std::string handle = "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd);
    rt.add_region(reinterpret_cast<void*>(span.start), n, MemKind::kHost, handle);
    rt.barrier_all();  // every peer has mapped it: the descriptor can close (Closer)
  } else {
    // Re-initialization: the pages are already shared but the handle is gone; share a fresh file.
    g_span = {};
    return make_data_symmetric();
  }
  MORI_LOG(kInfo, "SHMEM", "symmetric data+bss: %zu bytes at %p", n, reinterpret_cast<void*>(span.start));
  return n;
}

}  // namespace mori::capi
