// SPDX-License-Identifier: MIT
#include "src/ssd_io.h"

#include <errno.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "mori/core/log.h"
#include "src/ssd_record.h"

#if MORI_UMBP_HAVE_LIBURING
#include <liburing.h>
#endif

namespace mori::umbp::ssd {

namespace {
// One ring's submission queue: deep enough to keep an NVMe device busy, small enough that a
// pool of rings stays a few hundred KiB.
constexpr unsigned kMaxRingDepth = 256;
// io_uring's read length is 32 bits; larger reads continue in pieces.
constexpr size_t kMaxPiece = size_t{1} << 30;
std::atomic<bool> g_refusal_logged{false};
// Reader threads for a value read in pieces without a ring (one per piece at most: ssd_tier.cc cuts
// a value in up to 8): a device serves a few reads in flight faster than one, and a reader blocked
// in the kernel costs no core.
constexpr unsigned kMaxReaderThreads = 8;
}  // namespace

size_t add_value_reads(std::vector<ReadOp>& ops, int fd, int direct_fd, void* dst, uint64_t offset, uint64_t size,
                       bool alone) {
  auto* at = static_cast<char*>(dst);
  const uint64_t whole = direct_fd >= 0 ? size / kRecordAlign * kRecordAlign : 0;
  size_t pieces = 0;
  if (whole > 0) {
    pieces = alone && whole >= kSplitReadMin
                 ? std::clamp<size_t>(static_cast<size_t>((whole + kSplitPiece - 1) / kSplitPiece), 2, kSplitPiecesMax)
                 : 1;
    const uint64_t blocks = whole / kRecordAlign;
    for (size_t k = 0; k < pieces; ++k) {
      const uint64_t from = blocks * k / pieces * kRecordAlign, to = blocks * (k + 1) / pieces * kRecordAlign;
      ops.push_back(ReadOp{direct_fd, at + from, to - from, offset + from, ops.size()});
    }
  }
  if (whole < size) ops.push_back(ReadOp{fd, at + whole, size - whole, offset + whole, ops.size()});
  return pieces;
}

int pread_all(int fd, void* dst, size_t size, uint64_t offset) {
  auto* p = static_cast<char*>(dst);
  while (size > 0) {
    ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;  // the file ends before the value does: a torn record
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return 0;
}

int pwritev_all(int fd, const struct iovec* iov_in, int iovcnt, uint64_t offset) {
  std::vector<iovec> iov(iov_in, iov_in + iovcnt);
  size_t first = 0;
  while (first < iov.size()) {
    ssize_t n = ::pwritev(fd, iov.data() + first, static_cast<int>(iov.size() - first), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;
    offset += static_cast<uint64_t>(n);
    auto left = static_cast<size_t>(n);
    while (first < iov.size() && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (first < iov.size()) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return 0;
}

#if MORI_UMBP_HAVE_LIBURING
struct ReadEngine::Ring {
  io_uring ring{};
  bool ready = false;
  ~Ring() {
    if (ready) io_uring_queue_exit(&ring);
  }
};
#else
struct ReadEngine::Ring {};
#endif

ReadEngine::ReadEngine(IoBackend backend, size_t queue_depth)
    : depth_(static_cast<unsigned>(std::clamp<size_t>(queue_depth, 1, kMaxRingDepth))),
      team_threads_(static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 2, kMaxReaderThreads))) {
  if (backend != IoBackend::IoUring) return;
#if MORI_UMBP_HAVE_LIBURING
  auto ring = std::make_unique<Ring>();
  int rc = io_uring_queue_init(depth_, &ring->ring, 0);
  if (rc < 0) {
    if (!g_refusal_logged.exchange(true))
      MORI_LOG(kWarn, "umbp", "SSD tier: io_uring refused by the kernel (%s); reads use pread", strerror(-rc));
    return;
  }
  ring->ready = true;
  uring_ok_ = true;
  idle_rings_.push_back(std::move(ring));
#else
  if (!g_refusal_logged.exchange(true)) MORI_LOG(kWarn, "umbp", "SSD tier: built without liburing; reads use pread");
#endif
}

ReadEngine::~ReadEngine() = default;

std::unique_ptr<ReadEngine::Ring> ReadEngine::acquire_ring() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_rings_.empty()) {
      auto ring = std::move(idle_rings_.back());
      idle_rings_.pop_back();
      return ring;
    }
  }
#if MORI_UMBP_HAVE_LIBURING
  auto ring = std::make_unique<Ring>();
  if (io_uring_queue_init(depth_, &ring->ring, 0) < 0) return nullptr;  // e.g. out of locked memory
  ring->ready = true;
  return ring;
#else
  return nullptr;
#endif
}

void ReadEngine::release_ring(std::unique_ptr<Ring> ring) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_rings_.push_back(std::move(ring));
}

void ReadEngine::read_posix(std::span<ReadOp> ops, const std::function<void(const ReadOp&)>& on_done) {
  for (auto& op : ops) {
    op.error = pread_all(op.fd, op.dst, op.size, op.offset);
    on_done(op);
  }
}

void ReadEngine::read_spread(std::span<ReadOp> ops, const std::function<void(const ReadOp&)>& on_done) {
  std::unique_lock<std::mutex> team_lock(team_mu_, std::try_to_lock);
  if (!team_lock) {
    // Another call has the team (no wait for it): the pieces that follow each other in the file
    // and in memory are read again as one pread, as they would have been uncut.
    for (size_t first = 0; first < ops.size();) {
      size_t last = first, bytes = ops[first].size;
      while (last + 1 < ops.size() && ops[last + 1].fd == ops[first].fd &&
             ops[last + 1].offset == ops[first].offset + bytes &&
             ops[last + 1].dst == static_cast<char*>(ops[first].dst) + bytes)
        bytes += ops[++last].size;
      const int error = pread_all(ops[first].fd, ops[first].dst, bytes, ops[first].offset);
      for (; first <= last; ++first) {
        ops[first].error = error;
        on_done(ops[first]);
      }
    }
    return;
  }
  if (!team_) team_ = std::make_unique<ThreadTeam>(team_threads_);
  std::mutex done_mu;
  team_->run(static_cast<int>(ops.size()), [&](int i) {
    ReadOp& op = ops[static_cast<size_t>(i)];
    op.error = pread_all(op.fd, op.dst, op.size, op.offset);
    std::lock_guard<std::mutex> lock(done_mu);
    on_done(op);
  });
}

void ReadEngine::read_all(std::span<ReadOp> ops, const std::function<void(const ReadOp&)>& on_done, bool spread) {
  if (ops.empty()) return;
  std::unique_ptr<Ring> ring = (uring_ok_ && ops.size() > 1) ? acquire_ring() : nullptr;
  if (!ring) return spread && ops.size() > 1 ? read_spread(ops, on_done) : read_posix(ops, on_done);
#if MORI_UMBP_HAVE_LIBURING
  io_uring* r = &ring->ring;
  std::vector<size_t> progress(ops.size(), 0);
  std::vector<bool> done(ops.size(), false);
  std::vector<size_t> queue;  // ops to (re)submit, taken from the back: first op first
  queue.reserve(ops.size());
  for (size_t i = ops.size(); i-- > 0;) queue.push_back(i);
  size_t inflight = 0, finished = 0;
  auto finish = [&](size_t i, int error) {
    ops[i].error = error;
    done[i] = true;
    ++finished;
    on_done(ops[i]);
  };
  bool broken = false;
  while (finished < ops.size()) {
    while (!queue.empty() && inflight < depth_) {
      io_uring_sqe* sqe = io_uring_get_sqe(r);
      if (!sqe) break;
      size_t i = queue.back();
      queue.pop_back();
      size_t left = std::min(ops[i].size - progress[i], kMaxPiece);
      io_uring_prep_read(sqe, ops[i].fd, static_cast<char*>(ops[i].dst) + progress[i], static_cast<unsigned>(left),
                         ops[i].offset + progress[i]);
      io_uring_sqe_set_data(sqe, reinterpret_cast<void*>(static_cast<uintptr_t>(i)));
      ++inflight;
    }
    // Submits what is prepared (also what an interrupted call left) and waits for a completion.
    int rc = io_uring_submit_and_wait(r, 1);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
      broken = true;
      break;
    }
    io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(r, &cqe) == 0 && cqe) {
      auto i = static_cast<size_t>(reinterpret_cast<uintptr_t>(io_uring_cqe_get_data(cqe)));
      int res = cqe->res;
      io_uring_cqe_seen(r, cqe);
      cqe = nullptr;
      --inflight;
      if (res == -EINTR || res == -EAGAIN) {
        queue.push_back(i);
      } else if (res < 0) {
        finish(i, -res);
      } else if (res == 0) {
        finish(i, EIO);  // the file ends before the value does
      } else {
        progress[i] += static_cast<size_t>(res);
        if (progress[i] < ops[i].size)
          queue.push_back(i);
        else
          finish(i, 0);
      }
    }
  }
  if (broken) {
    // The ring failed (not seen in practice): what is unfinished is read again with pread, and
    // the ring is torn down instead of reused (a read it still had in flight lands the same bytes).
    MORI_LOG(kWarn, "umbp", "SSD tier: an io_uring submit failed; finishing the batch with pread");
    ring.reset();
    for (size_t i = 0; i < ops.size(); ++i)
      if (!done[i]) finish(i, pread_all(ops[i].fd, ops[i].dst, ops[i].size, ops[i].offset));
    return;
  }
  release_ring(std::move(ring));
#endif
}

}  // namespace mori::umbp::ssd
