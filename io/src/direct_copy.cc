// SPDX-License-Identifier: MIT
#include "mori/io/direct_copy.h"

#include <limits.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "mori/core/status.h"

namespace mori::io {

// Drops `done` bytes from the front of iov[first...] (after a short copy).
static void advance(std::vector<iovec>& iov, size_t& first, size_t done) {
  while (done > 0) {
    size_t take = std::min(done, iov[first].iov_len);
    iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + take;
    iov[first].iov_len -= take;
    done -= take;
    if (iov[first].iov_len == 0) ++first;
  }
}

std::string direct_copy(bool read, pid_t pid, const DirectSegment* segs, size_t n) {
  constexpr size_t kBatch = IOV_MAX;
  std::vector<iovec> local, remote;
  size_t i = 0;
  while (i < n) {
    local.clear();
    remote.clear();
    size_t want = 0;
    for (; i < n && local.size() < kBatch; ++i) {
      if (segs[i].size == 0) continue;
      local.push_back({segs[i].local, segs[i].size});
      remote.push_back({reinterpret_cast<void*>(segs[i].remote), segs[i].size});
      want += segs[i].size;
    }
    // The kernel may stop early (a short copy); advance both lists and go on.
    size_t lo = 0, ro = 0;
    while (want > 0) {
      ssize_t k =
          read
              ? process_vm_readv(pid, local.data() + lo, local.size() - lo, remote.data() + ro, remote.size() - ro, 0)
              : process_vm_writev(pid, local.data() + lo, local.size() - lo, remote.data() + ro, remote.size() - ro, 0);
      if (k < 0) {
        if (errno == EINTR) continue;
        return format("%s of process %d failed: %s", read ? "process_vm_readv" : "process_vm_writev",
                      static_cast<int>(pid), std::strerror(errno));
      }
      if (k == 0) return format("process %d: direct copy made no progress", static_cast<int>(pid));
      want -= static_cast<size_t>(k);
      advance(local, lo, static_cast<size_t>(k));
      advance(remote, ro, static_cast<size_t>(k));
    }
  }
  return "";
}

}  // namespace mori::io
