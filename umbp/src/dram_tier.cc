// SPDX-License-Identifier: MIT
#include "src/dram_tier.h"

#include <algorithm>
#include <limits>
#include <cstring>
#include <thread>

#include "mori/core/copy.h"
#include "mori/core/env.h"
#include "mori/core/log.h"
#include "mori/core/status.h"
#include "src/checksum.h"

namespace mori::umbp {

struct DramTier::Block {
  std::string key;
  size_t offset = 0;
  size_t size = 0;      // value bytes
  size_t reserved = 0;  // allocator block bytes
  char* data = nullptr;
  uint64_t checksum = 0;
  bool has_checksum = false;
  int depth = -1;
  uint32_t pins = 0;       // readers copying out, the writer copying in, the copy pipeline
  bool published = false;  // visible: copied in completely
  bool dropped = false;    // unlinked while pinned
  Block* prev = nullptr;   // LRU neighbours (published blocks only)
  Block* next = nullptr;
};

namespace {

size_t watermark_bytes(size_t capacity, double fraction) {
  return static_cast<size_t>(static_cast<double>(capacity) * fraction);
}

HostBufferOptions arena_options(const DramConfig& c) {
  HostBufferOptions o;
  if (c.use_shared_memory)
    o.backing = c.use_hugepages ? HostBufferBacking::AnonymousShmHugetlb : HostBufferBacking::AnonymousShm;
  else
    o.backing = c.use_hugepages ? HostBufferBacking::AnonymousHugetlb : HostBufferBacking::Anonymous;
  if (c.hugepage_size) o.hugepage_size = c.hugepage_size;
  o.numa_node = c.numa_node;
  o.prefault = c.prefault;
  return o;
}

// MORI_COPY_THREADS, or the host's cores up to 4 (more rarely pays: the copies are bandwidth-bound).
int copy_threads() {
  const int64_t set = env::get().copy_threads;
  if (set > 0) return static_cast<int>(set);
  // Once: hardware_concurrency() reads sysfs on every call (8 us a call on the VM).
  static const int cores = static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 4));
  return cores;
}

}  // namespace

size_t DramTier::KeyHash::operator()(std::string_view s) const { return XXH3_64bits(s.data(), s.size()); }

DramTier::DramTier(const DramConfig& dram, const EvictionConfig& eviction, bool verify_checksums, bool checksum_always)
    : capacity_(dram.capacity_bytes),
      high_bytes_(watermark_bytes(dram.capacity_bytes, dram.high_watermark)),
      low_bytes_(watermark_bytes(dram.capacity_bytes, dram.low_watermark)),
      candidate_window_(std::max<size_t>(eviction.candidate_window, 1)),
      verify_checksums_(verify_checksums),
      checksum_always_(checksum_always),
      heap_(0, dram.capacity_bytes) {
  arena_ = host_.alloc(capacity_, arena_options(dram));
  base_ = static_cast<char*>(arena_.ptr);
  if (dram.use_hugepages && arena_.actual_backing != HostBufferBacking::AnonymousHugetlb &&
      arena_.actual_backing != HostBufferBacking::AnonymousShmHugetlb)
    MORI_LOG(kWarn, "umbp", "DRAM tier: dram.use_hugepages asked, but the %zu-byte arena is on normal pages",
             capacity_);
}

DramTier::DramTier(const ExternalArena& arena, const DramConfig& watermarks, const EvictionConfig& eviction)
    : capacity_(arena.capacity),
      high_bytes_(watermark_bytes(arena.capacity, watermarks.high_watermark)),
      low_bytes_(watermark_bytes(arena.capacity, watermarks.low_watermark)),
      candidate_window_(std::max<size_t>(eviction.candidate_window, 1)),
      verify_checksums_(false),
      checksum_always_(true),  // a peer hands every value's checksum to its readers
      tier_(arena.tier),
      external_checksum_(arena.checksum),
      external_copy_(arena.copy_to_host),
      external_invalidate_(arena.invalidate),
      base_(arena.base),
      heap_(0, arena.capacity) {
  if (!external_checksum_ || !external_copy_ || !external_invalidate_)
    raise(Status::kInvalidArgument, "DRAM tier: an external arena needs its checksum, copy and invalidate functions");
}

DramTier::~DramTier() {
  for (auto& [key, b] : index_) delete b;
  for (Block* b : dropped_pinned_) delete b;
  if (!external_checksum_) host_.free(arena_);  // an external arena is freed by its owner
}

void DramTier::copy_to_host(const Block* b, void* dst) const {
  if (external_copy_)
    external_copy_(dst, b->data, b->size);
  else
    std::memcpy(dst, b->data, b->size);
}

uint64_t DramTier::hash(const Block* b) const {
  return external_checksum_ ? external_checksum_(b->data, b->size) : value_checksum(b->data, b->size);
}

void DramTier::lru_push_back(Block* b) {
  b->prev = lru_tail_;
  b->next = nullptr;
  if (lru_tail_)
    lru_tail_->next = b;
  else
    lru_head_ = b;
  lru_tail_ = b;
}

void DramTier::lru_remove(Block* b) {
  if (b->prev)
    b->prev->next = b->next;
  else
    lru_head_ = b->next;
  if (b->next)
    b->next->prev = b->prev;
  else
    lru_tail_ = b->prev;
  b->prev = b->next = nullptr;
}

void DramTier::unlink(Block* b) {
  index_.erase(std::string_view(b->key));
  if (b->published) {
    lru_remove(b);
    if (events_) events_->append(KvChange::Kind::Remove, b->key, tier_, 0);
  }
}

void DramTier::publish(Block* b) {
  b->published = true;
  lru_push_back(b);
  if (events_)
    events_->append(KvChange::Kind::Add, b->key, tier_, b->size, b->offset, b->has_checksum ? b->checksum : 0);
}

void DramTier::drop(Block* b) {
  unlink(b);
  if (b->pins == 0) {
    release(b);
  } else {
    b->dropped = true;
    dropped_pinned_.push_back(b);
  }
}

void DramTier::invalidate(Block* b) {
  const size_t n = std::min<size_t>(b->size, 8);
  if (!b->published || n == 0) return;  // no reader was told of an unpublished slot
  if (external_invalidate_) {
    try {
      external_invalidate_(b->data, n);
    } catch (const std::exception& e) {  // the block goes back all the same
      MORI_LOG(kWarn, "umbp", "could not invalidate a freed value of %s: %s", b->key.c_str(), e.what());
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) b->data[i] = static_cast<char>(~b->data[i]);
}

void DramTier::release(Block* b) {
  invalidate(b);
  heap_.release(b->offset);
  used_bytes_ -= b->reserved;
  delete b;
}

void DramTier::unpin(Block* b) {
  if (--b->pins > 0) return;
  pinned_bytes_ -= b->reserved;
  if (!b->dropped) return;
  dropped_pinned_.erase(std::find(dropped_pinned_.begin(), dropped_pinned_.end(), b));
  release(b);
}

bool DramTier::evictable(const Block* b) const { return b->published && b->pins == 0; }

DramTier::Block* DramTier::pick_victim() const {
  // Blocks held by readers or waiting for their SSD copy are skipped, but only so many: the
  // scan stays short even when the oldest part of the list is all held.
  constexpr size_t kMaxSkipped = 4096;
  Block* best = nullptr;
  int best_score = -1;
  size_t seen = 0, skipped = 0;
  for (Block* b = lru_head_; b && seen < candidate_window_ && skipped < kMaxSkipped; b = b->next) {
    if (!evictable(b)) {
      ++skipped;
      continue;
    }
    ++seen;
    const int score = std::max(b->depth, 0);
    if (score > best_score) {  // strictly deeper: among equals the older (seen first) stays
      best = b;
      best_score = score;
    }
  }
  return best;
}

void DramTier::evict(Block* b) {
  unlink(b);
  release(b);
  ++evictions_;
}

std::optional<size_t> DramTier::reserve(size_t size) {
  if (size > capacity_) return std::nullopt;
  const size_t rounded = (size + HeapAllocator::kMinAlign - 1) / HeapAllocator::kMinAlign * HeapAllocator::kMinAlign;
  if (used_bytes_ + rounded > high_bytes_) {
    while (used_bytes_ + rounded > low_bytes_) {
      Block* victim = pick_victim();
      if (!victim) break;
      evict(victim);
    }
  }
  for (;;) {
    if (auto off = heap_.allocate(size)) return off;
    Block* victim = pick_victim();  // fragmentation, or use still too high: one more
    if (!victim) return std::nullopt;
    evict(victim);
  }
}

namespace {

// Copies with non-temporal stores or plain ones.
void copy_one(char* dst, const char* src, size_t n, bool streaming) {
  if (streaming)
    copy_streaming(dst, src, n);
  else
    copy_bytes(dst, src, n);
}

// Copies n bytes and returns the value checksum of the source in one pass: each piece is hashed
// right after it is copied, while it is still in the L2 (a separate pass would read the whole
// value again, from memory once it outgrows the caches, or from the arena written past them).
uint64_t copy_and_hash(char* dst, const char* src, size_t n, bool streaming) {
  constexpr size_t kPiece = size_t{64} << 10;
  if (n <= kPiece) {
    copy_one(dst, src, n, streaming);
    return value_checksum(src, n);
  }
  ValueHasher hasher;
  for (size_t off = 0; off < n; off += kPiece) {
    const size_t len = std::min(kPiece, n - off);
    copy_one(dst + off, src + off, len, streaming);
    hasher.update(src + off, len);
  }
  return hasher.digest();
}

}  // namespace

// Runs a call's copies. Copies that together outgrow the caches, and values of
// kStreamingValueMin or more going into the arena, use non-temporal stores. A call moving
// kParallelCopyMin or more (kSmallTeamCopyMin for a team under 4) is cut into pieces spread over
// the copy team, when no other call holds it: one core's copy reaches neither the caches' nor the memory's bandwidth.
// The checksums a put takes are of the source bytes (what the caller handed over): in the same pass as the copy alone,
// in the team as tasks of their own (one per value, a hash being sequential) beside the copy pieces.
void DramTier::copy_all(const std::vector<Copy>& copies, bool to_arena) {
  size_t total = 0;
  for (const Copy& c : copies) total += c.n;
  const bool stream_all = total >= streaming_copy_min();
  auto streams = [&](const Copy& c) { return stream_all || (to_arena && c.n >= kStreamingValueMin); };
  const int threads = total < kParallelCopyMin ? 1 : copy_threads();
  std::unique_lock<std::mutex> team_lock(team_mu_, std::defer_lock);
  if (threads < 2 || (threads < 4 && total < kSmallTeamCopyMin) || !team_lock.try_lock()) {
    for (const Copy& c : copies) {
      if (c.checksum)
        *c.checksum = copy_and_hash(c.dst, c.src, c.n, streams(c));
      else
        copy_one(c.dst, c.src, c.n, streams(c));
    }
    return;
  }
  if (!team_) team_ = std::make_unique<ThreadTeam>(threads);
  const size_t team = static_cast<size_t>(team_->size());
  // As many pieces as kCopyPieceMax makes, rounded up to a multiple of the team (so no thread
  // copies one piece more than the others), each a whole number of pages.
  const size_t want = (std::max<size_t>((total + kCopyPieceMax - 1) / kCopyPieceMax, 1) + team - 1) / team * team;
  const size_t piece = std::clamp(((total + want - 1) / want + 4095) / 4096 * 4096, kCopyPieceMin, kCopyPieceMax);
  struct Task {
    const Copy* copy;
    size_t off, len;
    size_t digest;  // hash tasks: the slot of this chunk's digest; copies: SIZE_MAX
  };
  std::vector<Task> tasks;
  tasks.reserve(copies.size() * 2 + total / piece + total / kChecksumChunk);
  std::vector<size_t> first_digest;  // per copy with a checksum: its chunks' first slot
  size_t digests = 0;
  for (const Copy& c : copies) {  // the hashes first: each chunk a task of its own
    if (!c.checksum) continue;
    first_digest.push_back(digests);
    for (size_t off = 0; off == 0 || off < c.n; off += kChecksumChunk)
      tasks.push_back({&c, off, std::min(kChecksumChunk, c.n - off), digests++});
  }
  for (const Copy& c : copies)
    for (size_t off = 0; off < c.n; off += piece)
      tasks.push_back({&c, off, std::min(piece, c.n - off), std::numeric_limits<size_t>::max()});
  std::vector<uint64_t> digest(digests);
  team_->run(static_cast<int>(tasks.size()), [&](int i) {
    const Task& t = tasks[static_cast<size_t>(i)];
    if (t.digest != std::numeric_limits<size_t>::max())
      digest[t.digest] = chunk_checksum(t.copy->src + t.off, t.len);
    else
      copy_one(t.copy->dst + t.off, t.copy->src + t.off, t.len, streams(*t.copy));
  });
  size_t k = 0;
  for (const Copy& c : copies) {
    if (!c.checksum) continue;
    const size_t at = first_digest[k++];
    *c.checksum = c.n <= kChecksumChunk ? digest[at] : combine_chunk_checksums(&digest[at], checksum_chunks(c.n), c.n);
  }
}

void DramTier::put(const std::string* keys, const uintptr_t* srcs, const size_t* sizes, const int* depths, size_t n,
                   bool copy_hold, PutOutcome* outcomes, Block** held) {
  if (external_checksum_) raise(Status::kInvalidUsage, "DRAM tier: put() copies host memory; this arena is external");
  std::vector<Block*> fresh(n, nullptr);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < n; ++i) {
      if (index_.count(std::string_view(keys[i]))) {  // published, or being written by another put
        outcomes[i] = PutOutcome::kExists;
        continue;
      }
      auto off = reserve(sizes[i]);
      if (!off) {
        outcomes[i] = PutOutcome::kNoRoom;
        continue;
      }
      auto* b = new Block;
      b->key = keys[i];
      b->offset = *off;
      b->size = sizes[i];
      b->reserved = heap_.block_size(*off);
      b->data = base_ + *off;
      b->depth = depths ? depths[i] : -1;
      b->pins = 1;  // the writer's
      pinned_bytes_ += b->reserved;
      used_bytes_ += b->reserved;
      index_.emplace(std::string_view(b->key), b);
      fresh[i] = b;
      outcomes[i] = PutOutcome::kStored;
    }
  }
  const bool hash = verify_checksums_ || checksum_always_;
  std::vector<Copy> copies;
  copies.reserve(n);
  for (size_t i = 0; i < n; ++i)
    if (Block* b = fresh[i]) {
      copies.push_back({b->data, reinterpret_cast<const char*>(srcs[i]), b->size, hash ? &b->checksum : nullptr});
      b->has_checksum = hash;  // not visible before publish(): the checksum is set by then
    }
  copy_all(copies, /*to_arena=*/true);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < n; ++i) {
    Block* b = fresh[i];
    if (held) held[i] = nullptr;
    if (!b) continue;
    if (!b->dropped) {  // a clear() while copying dropped it: stored, then cleared
      publish(b);
      if (copy_hold && held) {
        held[i] = b;  // the writer's pin becomes the copy pipeline's
        continue;
      }
    }
    unpin(b);
  }
}

size_t DramTier::get(const std::string* keys, const uintptr_t* dsts, const size_t* sizes, size_t n, bool promote,
                     bool* hits) {
  if (external_checksum_) raise(Status::kInvalidUsage, "DRAM tier: get() copies host memory; this arena is external");
  std::vector<Block*> pinned(n, nullptr);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < n; ++i) {
      auto it = index_.find(std::string_view(keys[i]));
      if (it == index_.end() || !it->second->published || it->second->size != sizes[i]) continue;
      Block* b = it->second;
      if (b->pins++ == 0) pinned_bytes_ += b->reserved;
      if (promote && b != lru_tail_) {
        lru_remove(b);
        lru_push_back(b);
      }
      pinned[i] = b;
    }
  }
  size_t count = 0;
  std::vector<bool> corrupt;
  std::vector<Copy> copies;
  copies.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    Block* b = pinned[i];
    hits[i] = false;
    if (!b) continue;
    if (verify_checksums_ && b->has_checksum && value_checksum(b->data, b->size) != b->checksum) {
      if (corrupt.empty()) corrupt.resize(n, false);
      corrupt[i] = true;
      continue;  // nothing written to the caller
    }
    copies.push_back({reinterpret_cast<char*>(dsts[i]), b->data, b->size, nullptr});
    hits[i] = true;
    ++count;
  }
  copy_all(copies, /*to_arena=*/false);  // still pinned: no eviction or clear can free them
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < n; ++i) {
    Block* b = pinned[i];
    if (!b) continue;
    if (!corrupt.empty() && corrupt[i]) {
      ++corrupt_reads_;
      MORI_LOG(kWarn, "umbp", "DRAM tier: checksum mismatch on '%s' (%zu bytes): dropped, served as a miss",
               b->key.c_str(), b->size);
      if (!b->dropped) drop(b);
    }
    unpin(b);
  }
  return count;
}

bool DramTier::contains(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(std::string_view(key));
  return it != index_.end() && it->second->published;
}

void DramTier::contains(const std::string* keys, size_t n, bool* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < n; ++i) {
    auto it = index_.find(std::string_view(keys[i]));
    out[i] = it != index_.end() && it->second->published;
  }
}

template <typename Key>
size_t DramTier::present_prefix(const Key* keys, size_t n) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < n; ++i) {
    auto it = index_.find(std::string_view(keys[i]));
    if (it == index_.end() || !it->second->published) return i;
  }
  return n;
}

size_t DramTier::count_present_prefix(const std::string* keys, size_t n) const { return present_prefix(keys, n); }

size_t DramTier::count_present_prefix(const std::string_view* keys, size_t n) const { return present_prefix(keys, n); }

const std::string& DramTier::key_of(const Block* b) { return b->key; }
const void* DramTier::data_of(const Block* b) { return b->data; }
size_t DramTier::size_of(const Block* b) { return b->size; }

void DramTier::release_held(Block* const* blocks, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < n; ++i)
    if (blocks[i]) unpin(blocks[i]);
}

bool DramTier::remove(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(std::string_view(key));
  if (it == index_.end()) return false;
  drop(it->second);
  return true;
}

void DramTier::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Block*> all;
  all.reserve(index_.size());
  for (auto& [key, b] : index_) all.push_back(b);
  for (Block* b : all) drop(b);
}

void DramTier::set_event_log(TierEvents* log) {
  std::lock_guard<std::mutex> lock(mu_);
  events_ = log;
}

DramTier::Block* DramTier::reserve_slot(const std::string& key, size_t size, PutOutcome* outcome) {
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.count(std::string_view(key))) {
    *outcome = PutOutcome::kExists;
    return nullptr;
  }
  auto off = reserve(size);
  if (!off) {
    *outcome = PutOutcome::kNoRoom;
    return nullptr;
  }
  auto* b = new Block;
  b->key = key;
  b->offset = *off;
  b->size = size;
  b->reserved = heap_.block_size(*off);
  b->data = base_ + *off;
  b->pins = 1;  // the writer's, until commit or abort
  used_bytes_ += b->reserved;
  pinned_bytes_ += b->reserved;
  index_.emplace(std::string_view(b->key), b);
  *outcome = PutOutcome::kStored;
  return b;
}

DramTier::Block* DramTier::commit_slot(Block* b, bool copy_hold, bool* published, const uint64_t* checksum) {
  // The writer's bytes are in the arena (written by a peer through MORI-IO): checksum them
  // before the value becomes visible, as put() does.
  if (takes_checksums()) {
    b->checksum = checksum ? *checksum : hash(b);
    b->has_checksum = true;
  }
  std::lock_guard<std::mutex> lock(mu_);
  *published = !b->dropped;
  if (b->dropped) {
    unpin(b);
    return nullptr;
  }
  publish(b);
  if (copy_hold) return b;
  unpin(b);
  return nullptr;
}

void DramTier::abort_slot(Block* b) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!b->dropped) drop(b);  // not published: no event
  unpin(b);
}

DramTier::Block* DramTier::pin(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(std::string_view(key));
  if (it == index_.end() || !it->second->published) return nullptr;
  Block* b = it->second;
  if (b->pins++ == 0) pinned_bytes_ += b->reserved;
  if (b != lru_tail_) {  // a remote read is a use
    lru_remove(b);
    lru_push_back(b);
  }
  return b;
}

void DramTier::unpin_blocks(Block* const* blocks, size_t n) { release_held(blocks, n); }

size_t DramTier::offset_of(const Block* b) { return b->offset; }

uint64_t DramTier::checksum_of(const Block* b) {
  // Set before the block was published and never changed after: no lock needed.
  return b->has_checksum ? b->checksum : value_checksum(b->data, b->size);
}

size_t DramTier::evict_key(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(std::string_view(key));
  if (it == index_.end() || !evictable(it->second)) return 0;
  const size_t freed = it->second->reserved;
  evict(it->second);
  return freed;
}

std::vector<DramTier::Published> DramTier::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Published> out;
  out.reserve(index_.size());
  for (const auto& [key, b] : index_)
    if (b->published) out.push_back({b->key, b->size, b->offset, b->has_checksum ? b->checksum : 0});
  return out;
}

DramStats DramTier::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  DramStats s;
  s.used_bytes = used_bytes_;
  s.pinned_bytes = pinned_bytes_;
  s.capacity_bytes = capacity_;
  s.keys = index_.size();
  s.evictions = evictions_;
  s.corrupt_reads = corrupt_reads_;
  return s;
}

}  // namespace mori::umbp
