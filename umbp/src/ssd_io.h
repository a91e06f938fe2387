// SPDX-License-Identifier: MIT
// The SSD tier's reads: many positioned reads in flight at once through io_uring (a small pool
// of rings, one per concurrent batch), or one pread after another where io_uring is not built or
// the kernel refuses it (containers: EPERM/ENOSYS; said once in the log and in SsdStats).
// Reads land in the caller's memory; the ring never copies. Where there is no ring, the reads of
// one value cut in pieces (read_all's `spread`) run at once on a small team of reader threads.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "mori/core/thread_team.h"
#include "mori/umbp/config.h"

namespace mori::umbp::ssd {

struct ReadOp {
  int fd = -1;
  void* dst = nullptr;
  size_t size = 0;
  uint64_t offset = 0;
  size_t tag = 0;  // the caller's: handed to on_done
  int error = 0;   // after the read: 0, or the errno (EIO for a read that ended early)
};

// A single value's O_DIRECT read of this many bytes or more is cut into pieces read at once, of
// about kSplitPiece each, 2 to kSplitPiecesMax of them: the device serves them side by side.
inline constexpr uint64_t kSplitReadMin = uint64_t{256} << 10;
inline constexpr uint64_t kSplitPiece = uint64_t{512} << 10;
inline constexpr size_t kSplitPiecesMax = 8;

// Appends the reads of one value of `size` bytes at `offset` into `dst`: its whole 4 KiB blocks
// from `direct_fd` (O_DIRECT; -1: none, everything through `fd`), cut in pieces when `alone` and
// large, then the rest from `fd` (buffered). Each op's tag is its index in `ops`. Returns the
// number of O_DIRECT pieces (0 when none).
size_t add_value_reads(std::vector<ReadOp>& ops, int fd, int direct_fd, void* dst, uint64_t offset, uint64_t size,
                       bool alone);

class ReadEngine {
 public:
  ReadEngine(IoBackend backend, size_t queue_depth);
  ~ReadEngine();
  ReadEngine(const ReadEngine&) = delete;
  ReadEngine& operator=(const ReadEngine&) = delete;

  bool uses_io_uring() const { return uring_ok_; }

  // Reads every op whole (short reads continue where they stopped) and calls on_done(op) as each
  // one finishes, while later ops are still in flight. With a ring, every op is in flight at
  // once and on_done runs on the calling thread. Without one, ops are read one after another on
  // the calling thread, unless `spread`: then they are read at once by the reader team (the
  // caller is one of its threads) and on_done runs on whichever thread read the op, one call at
  // a time (under a lock). A spread call that finds the team busy with another call reads its
  // ops on the calling thread, ops that follow each other in the file and in memory as one read.
  void read_all(std::span<ReadOp> ops, const std::function<void(const ReadOp&)>& on_done, bool spread = false);
  // The threads a spread read without a ring uses (the caller included).
  int reader_threads() const { return team_threads_; }

 private:
  struct Ring;
  std::unique_ptr<Ring> acquire_ring();
  void release_ring(std::unique_ptr<Ring> ring);
  void read_posix(std::span<ReadOp> ops, const std::function<void(const ReadOp&)>& on_done);
  void read_spread(std::span<ReadOp> ops, const std::function<void(const ReadOp&)>& on_done);

  unsigned depth_ = 0;
  bool uring_ok_ = false;
  std::mutex mu_;
  std::vector<std::unique_ptr<Ring>> idle_rings_;
  const int team_threads_;
  std::mutex team_mu_;                // held by the call using the team
  std::unique_ptr<ThreadTeam> team_;  // made by the first spread read without a ring
};

// Reads `size` bytes at `offset` whole; 0 or an errno.
int pread_all(int fd, void* dst, size_t size, uint64_t offset);
// Writes the iovecs whole at `offset`; 0 or an errno.
int pwritev_all(int fd, const struct iovec* iov, int iovcnt, uint64_t offset);

}  // namespace mori::umbp::ssd
