// SPDX-License-Identifier: MIT
#include "mori/core/shared_arena.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <memory>

#include "mori/core/env.h"
#include "mori/core/status.h"

namespace mori {

namespace {
std::atomic<SharedArena*> g_arena{nullptr};
std::mutex g_create_mu;
// Set in a fork() child: the child shares the parent's pages but not its block table.
std::atomic<bool> g_forked{false};
// How an arena's memory file is labelled (/proc/PID/maps), and how a peer's is recognised.
constexpr char kLabel[] = "mori-tensors-";
}  // namespace

SharedArena::SharedArena(size_t bytes)
    : segment_(SharedSegment::create(std::string(kLabel) + std::to_string(getpid()), bytes, 4096)), blocks_(0, bytes) {}

SharedArena& SharedArena::instance() {
  if (SharedArena* a = g_arena.load(std::memory_order_acquire)) return *a;
  std::lock_guard<std::mutex> lock(g_create_mu);
  if (SharedArena* a = g_arena.load(std::memory_order_acquire)) return *a;
  size_t bytes = (env::get().shared_tensor_bytes + 4095) / 4096 * 4096;
  MORI_CHECK_ARG(bytes >= (size_t{1} << 20), "MORI_SHARED_TENSOR_BYTES=%zu is too small (minimum 1 MiB)", bytes);
  // Lives as long as the process: tensors may outlive any object that could own it.
  auto* a = new SharedArena(bytes);
  pthread_atfork(nullptr, nullptr, [] { g_forked.store(true, std::memory_order_relaxed); });
  g_arena.store(a, std::memory_order_release);
  return *a;
}

SharedArena* SharedArena::existing() { return g_arena.load(std::memory_order_acquire); }

void* SharedArena::allocate(size_t bytes) {
  if (g_forked.load(std::memory_order_relaxed)) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  // Page-aligned: rows of a tensor never share a page with another tensor's.
  auto off = blocks_.allocate(bytes, 4096);
  if (!off) return nullptr;
  in_use_ += blocks_.block_size(*off);
  return base() + *off;
}

bool SharedArena::release(void* p) {
  if (!contains(p)) return false;
  if (g_forked.load(std::memory_order_relaxed)) return true;  // the parent's block: not ours to reuse
  std::lock_guard<std::mutex> lock(mu_);
  size_t off = offset_of(p), n = blocks_.block_size(off);
  if (!n || !blocks_.release(off)) return false;
  in_use_ -= n;
  return true;
}

size_t SharedArena::trim() {
  if (g_forked.load(std::memory_order_relaxed)) return 0;  // the blocks are the parent's
  std::lock_guard<std::mutex> lock(mu_);
  size_t released = 0;
  for (auto [off, len] : blocks_.free_blocks()) {
    // Whole pages inside the block only: its neighbours' pages stay.
    const size_t lo = (off + 4095) / 4096 * 4096, hi = (off + len) / 4096 * 4096;
    if (hi <= lo) continue;
    if (madvise(base() + lo, hi - lo, MADV_REMOVE) != 0) raise_errno("SharedArena::trim: madvise(MADV_REMOVE)");
    released += hi - lo;
  }
  return released;
}

size_t SharedArena::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}

size_t SharedArena::live_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return blocks_.live_allocations();
}

SharedArena::PeerMapping SharedArena::map_peer(const std::string& handle) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<SharedSegment>> peers;
  std::lock_guard<std::mutex> lock(mu);
  auto it = peers.find(handle);
  // An arena's size never changes: a cached mapping is never replaced (pointers into it live on).
  if (it == peers.end())
    it = peers.emplace(handle, std::make_unique<SharedSegment>(SharedSegment::open_sealed(handle, kLabel))).first;
  return {static_cast<const char*>(it->second->data()), it->second->size()};
}

}  // namespace mori
