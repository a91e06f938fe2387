// SPDX-License-Identifier: MIT
#include "src/ssd_tier.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "mori/core/log.h"
#include "mori/core/rate_limited_log.h"
#include "mori/core/status.h"
#include "mori/core/thread_name.h"
#include "src/checksum.h"
#include "src/ssd_io.h"
#include "src/ssd_record.h"
#include "src/ssd_segment.h"

namespace mori::umbp {

using ssd::align_up;
using ssd::header_block_bytes;
using ssd::kRecordAlign;
using ssd::ReadOp;
using ssd::RecordHeader;
using ssd::RecordKind;
using ssd::Segment;

namespace {

constexpr const char* kLockFileName = "LOCK";
// A sealed segment is compacted once less than this share of its bytes is live.
constexpr double kGcLiveShare = 0.5;
constexpr auto kGcPeriod = std::chrono::milliseconds(200);

alignas(kRecordAlign) const char kZeros[kRecordAlign] = {};

struct Location {
  std::shared_ptr<Segment> segment;
  uint64_t value_offset = 0;
  uint64_t size = 0;
  uint64_t checksum = 0;
  uint64_t sequence = 0;
  uint64_t bytes = 0;  // the whole record on disk
};

}  // namespace

struct SsdTier::Impl {
  SsdConfig config;
  SsdAccess access;
  bool strict;
  uint64_t segment_limit;
  int dir_fd = -1;
  int lock_fd = -1;
  ssd::ReadEngine reader;
  // O_DIRECT reads need many in flight to reach the device's speed: only with io_uring. pread
  // goes through the page cache, whose readahead keeps one reader at a time fast.
  const bool read_direct;

  std::mutex write_mu;           // one append at a time; taken before mu
  mutable std::shared_mutex mu;  // index and segments
  std::unordered_map<std::string, Location> index;
  std::map<uint64_t, std::shared_ptr<Segment>> segments;  // by id: oldest first
  std::shared_ptr<Segment> active;                        // the one appended to (writer)
  uint64_t next_segment_id = 0;                           // under write_mu
  uint64_t next_sequence = 1;                             // under write_mu
  std::mutex refresh_mu;                                  // one scan at a time (reader)

  std::atomic<uint64_t> used_bytes{0};
  std::atomic<uint64_t> writes{0}, write_bytes{0}, reads{0}, read_bytes{0}, corrupt_reads{0};
  std::atomic<uint64_t> evicted_keys{0}, gc_runs{0}, gc_moved_bytes{0};
  std::atomic<uint64_t> failed_writes{0}, enospc_writes{0}, io_errors{0}, skipped_records{0}, refreshes{0};
  std::atomic<bool> direct_io{false};
  log::RateLimit write_error_log;
  TierEvents* events = nullptr;  // under mu (distributed mode: the peer's event log)

  std::thread gc_thread;
  std::mutex gc_mu;
  std::condition_variable gc_cv;
  bool gc_stop = false;

  Impl(const SsdConfig& cfg, SsdAccess acc)
      : config(cfg),
        access(acc),
        strict(cfg.durability.mode == DurabilityMode::Strict),
        segment_limit(align_up(std::min<uint64_t>(cfg.segment_size_bytes,
                                                  std::max<uint64_t>(cfg.capacity_bytes / 16, uint64_t{1} << 20)))),
        reader(cfg.io.backend, cfg.io.queue_depth),
        read_direct(reader.uses_io_uring()) {}

  ~Impl() {
    if (dir_fd >= 0) ::close(dir_fd);
    if (lock_fd >= 0) ::close(lock_fd);  // releases the flock
  }

  bool writer() const { return access == SsdAccess::kReadWrite; }
  const char* dir() const { return config.storage_dir.c_str(); }

  // ---- opening -------------------------------------------------------------------------------

  void open_directory() {
    std::error_code ec;
    std::filesystem::create_directories(config.storage_dir, ec);
    if (ec && !std::filesystem::is_directory(config.storage_dir))
      raise(Status::kSystem, "SSD tier: cannot create storage_dir '%s': %s", dir(), ec.message().c_str());
    dir_fd = ::open(dir(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) raise_errno("SSD tier: cannot open storage_dir '%s'", dir());
    if (!writer()) return;
    std::string lock_path = config.storage_dir + "/" + kLockFileName;
    lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd < 0) raise_errno("SSD tier: storage_dir '%s' is not writable", dir());
    if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK) raise_errno("SSD tier: cannot lock storage_dir '%s'", dir());
      char holder[32] = {};
      ssize_t n = ::pread(lock_fd, holder, sizeof(holder) - 1, 0);
      holder[n > 0 ? n : 0] = '\0';
      raise(Status::kInvalidUsage,
            "SSD tier: storage_dir '%s' already has a writer (pid %s): one process writes a directory, "
            "the others open it as readers (SharedSSDFollower)",
            dir(), holder[0] ? holder : "?");
    }
    std::string pid = std::to_string(::getpid());
    if (::ftruncate(lock_fd, 0) != 0 ||
        ::pwrite(lock_fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
      raise_errno("SSD tier: storage_dir '%s' is not writable", dir());
  }

  std::vector<uint64_t> list_segment_ids() const {
    std::vector<uint64_t> ids;
    DIR* d = ::opendir(dir());
    if (!d) return ids;
    while (dirent* e = ::readdir(d)) {
      uint64_t id;
      if (ssd::parse_segment_file_name(e->d_name, &id)) ids.push_back(id);
    }
    ::closedir(d);
    std::sort(ids.begin(), ids.end());
    return ids;
  }

  std::string segment_path(uint64_t id) const { return config.storage_dir + "/" + ssd::segment_file_name(id); }

  // ---- the index -----------------------------------------------------------------------------

  // Under mu (unique).
  void unindex(std::unordered_map<std::string, Location>::iterator it, bool announce = true) {
    it->second.segment->live_bytes -= it->second.bytes;
    if (announce && events) events->append(KvChange::Kind::Remove, it->first, TierType::SSD, 0);
    index.erase(it);
  }

  static SsdPlace place_of(const Location& loc) {
    return SsdPlace{loc.segment->id, loc.value_offset, loc.size, loc.checksum};
  }

  // Whether record (sequence, segment) is newer than the indexed `than`. A record GC moved keeps
  // its sequence and lands in a newer segment: that copy wins, the old one is about to go.
  static bool newer(uint64_t sequence, const Segment& segment, const Location& than) {
    return sequence > than.sequence || (sequence == than.sequence && segment.id > than.segment->id);
  }

  // Under mu (unique): the newest record of a key wins.
  bool index_record(const std::string& key, Location loc, bool announce = true) {
    auto it = index.find(key);
    if (it != index.end()) {
      if (!newer(loc.sequence, *loc.segment, it->second)) return false;
      it->second.segment->live_bytes -= it->second.bytes;
    }
    const bool added = it == index.end();
    loc.segment->live_bytes += loc.bytes;
    if (added && announce && events) events->append(KvChange::Kind::Add, key, TierType::SSD, loc.size);
    if (events) events->ssd_placed(key, place_of(loc));  // moves too: the place changed
    if (added)
      index.emplace(key, std::move(loc));
    else
      it->second = std::move(loc);
    return added;
  }

  // Scans the segments present in the directory (from where the last scan stopped) and merges
  // what it finds into the index. Recovery of a writer, and every refresh of a reader.
  size_t scan_directory(bool count_skipped) {
    struct Found {
      uint64_t sequence = 0;
      uint64_t segment = 0;
      bool tombstone = false;
      Location loc;
    };
    std::unordered_map<std::string, Found> found;
    std::vector<std::pair<std::shared_ptr<Segment>, uint64_t>> new_segments;  // with their scan end
    std::vector<std::pair<std::shared_ptr<Segment>, uint64_t>> grown;
    std::vector<uint64_t> ids = list_segment_ids();
    std::unordered_set<uint64_t> present(ids.begin(), ids.end());
    std::vector<std::shared_ptr<Segment>> known;
    {
      std::shared_lock lock(mu);
      for (auto& [id, seg] : segments) known.push_back(seg);
    }
    std::vector<std::shared_ptr<Segment>> gone;
    for (auto& seg : known) {
      struct stat st{};
      if (!present.count(seg->id) || ::stat(seg->path.c_str(), &st) != 0 || st.st_ino != seg->inode)
        gone.push_back(seg);
    }
    auto visit_into = [&](const std::shared_ptr<Segment>& seg) {
      return [&, seg](ssd::ScannedRecord&& r) {
        Found f;
        f.sequence = r.header.sequence;
        f.segment = seg->id;
        f.tombstone = r.header.kind == static_cast<uint16_t>(RecordKind::kTombstone);
        if (f.tombstone) {
          seg->tombstones.push_back({r.key, r.header.target_segment, r.header.sequence});
        } else {
          f.loc = Location{seg,
                           r.offset + header_block_bytes(r.header.key_len),
                           r.header.value_size,
                           r.header.value_checksum,
                           r.header.sequence,
                           ssd::record_bytes(r.header.key_len, r.header.value_size)};
          seg->keys.push_back(r.key);
        }
        auto [it, inserted] = found.try_emplace(std::move(r.key), std::move(f));
        if (!inserted &&
            (f.sequence > it->second.sequence || (f.sequence == it->second.sequence && f.segment > it->second.segment)))
          it->second = std::move(f);
      };
    };
    uint64_t skipped = 0;
    for (uint64_t id : ids) {
      std::shared_ptr<Segment> seg;
      for (auto& k : known)
        if (k->id == id && std::find(gone.begin(), gone.end(), k) == gone.end()) seg = k;
      bool is_new = !seg;
      if (is_new) {
        seg = std::make_shared<Segment>();
        if (!seg->open(segment_path(id), id, false)) continue;  // removed by the writer meanwhile
      } else {
        struct stat st{};
        if (::fstat(seg->fd, &st) != 0) continue;
        seg->size = static_cast<uint64_t>(st.st_size);
      }
      if (seg->size <= seg->scanned) {
        if (is_new) new_segments.emplace_back(seg, seg->scanned);
        continue;
      }
      ssd::ScanResult r = ssd::scan_segment(seg->fd, seg->scanned, seg->size, visit_into(seg));
      skipped += r.skipped;
      (is_new ? new_segments : grown).emplace_back(seg, r.end);
    }
    if (count_skipped) skipped_records += skipped;

    size_t added = 0;
    std::unique_lock lock(mu);
    for (auto& seg : gone) drop_locked(seg, /*count_evicted=*/false);
    for (auto& [seg, end] : new_segments) {
      seg->scanned = end;
      if (read_direct && seg->direct_fd >= 0) direct_io = true;
      segments[seg->id] = seg;
      used_bytes += seg->size;
    }
    for (auto& [seg, end] : grown) {
      seg->scanned = end;
    }
    if (!writer()) {
      uint64_t total = 0;
      for (auto& [id, seg] : segments) total += seg->size;
      used_bytes = total;
    }
    uint64_t max_sequence = 0;
    for (auto& [key, f] : found) {
      max_sequence = std::max(max_sequence, f.sequence);
      if (f.tombstone) {
        auto it = index.find(key);
        if (it != index.end() && it->second.sequence < f.sequence) unindex(it);
      } else {
        added += index_record(key, std::move(f.loc)) ? 1 : 0;
      }
    }
    if (writer()) {
      next_sequence = std::max(next_sequence, max_sequence + 1);
      // Ids never come back, even in a directory a clear() emptied: a reader that still has a
      // segment of that id open must not take a new file for it (inodes are reused).
      uint64_t fresh = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
              .count());
      next_segment_id = std::max({next_segment_id, ids.empty() ? 0 : ids.back() + 1, fresh});
    }
    return added;
  }

  // ---- appending (writer, under write_mu) -------------------------------------------------------

  // Under mu (unique): forgets a segment and everything indexed in it.
  void drop_locked(const std::shared_ptr<Segment>& seg, bool count_evicted) {
    for (const auto& key : seg->keys) {
      auto it = index.find(key);
      if (it != index.end() && it->second.segment == seg) {
        if (events) events->append(KvChange::Kind::Remove, key, TierType::SSD, 0);
        index.erase(it);
        if (count_evicted) ++evicted_keys;
      }
    }
    auto it = segments.find(seg->id);
    if (it != segments.end() && it->second == seg) {
      segments.erase(it);
      used_bytes -= seg->size;
      if (events) events->ssd_segment_dropped(seg->id);
    }
    if (active == seg) active.reset();
  }

  // Deletes the file; readers with the segment in hand keep reading through their descriptors.
  void drop_segment(const std::shared_ptr<Segment>& seg) {
    {
      std::unique_lock lock(mu);
      drop_locked(seg, /*count_evicted=*/true);
    }
    ::unlink(seg->path.c_str());
  }

  // Room for a record of `bytes`: past the high watermark, the oldest segments go until use
  // plus the record is at most the low watermark.
  bool make_room(uint64_t bytes) {
    const double capacity = static_cast<double>(config.capacity_bytes);
    if (static_cast<double>(used_bytes + bytes) <= config.high_watermark * capacity) return true;
    while (static_cast<double>(used_bytes + bytes) > config.low_watermark * capacity) {
      std::shared_ptr<Segment> oldest;
      {
        std::shared_lock lock(mu);
        if (segments.empty()) break;
        oldest = segments.begin()->second;
      }
      drop_segment(oldest);
    }
    return used_bytes + bytes <= config.capacity_bytes;
  }

  bool open_new_segment() {
    auto seg = std::make_shared<Segment>();
    uint64_t id = next_segment_id++;
    if (!seg->open(segment_path(id), id, true)) {
      note_write_error(errno, "create a segment");
      return false;
    }
    if (strict && ::fsync(dir_fd) != 0) {
      note_write_error(errno, "sync the directory");
      ::unlink(seg->path.c_str());
      return false;
    }
    if (read_direct && seg->direct_fd >= 0) direct_io = true;
    std::unique_lock lock(mu);
    segments[id] = seg;
    active = seg;
    return true;
  }

  void note_write_error(int err, const char* what) {
    ++failed_writes;
    if (err == ENOSPC) ++enospc_writes;
    uint64_t suppressed = 0;
    if (write_error_log.allow(&suppressed))
      MORI_LOG(kWarn, "umbp", "SSD tier '%s': cannot %s: %s (%llu more not shown)", dir(), what, std::strerror(err),
               static_cast<unsigned long long>(suppressed));
  }

  // Appends one record; nothing is indexed. `sequence` 0: the next one.
  std::optional<Location> append(const std::string& key, RecordKind kind, const void* data, uint64_t size,
                                 uint64_t checksum, uint64_t target_segment, uint64_t sequence) {
    const uint64_t head = header_block_bytes(key.size());
    const uint64_t bytes = head + align_up(size);
    if (bytes > config.capacity_bytes || !make_room(bytes)) {
      ++failed_writes;
      return std::nullopt;
    }
    if (!active || (active->size > 0 && active->size + bytes > segment_limit))
      if (!open_new_segment()) return std::nullopt;
    std::shared_ptr<Segment> seg = active;
    const uint64_t offset = seg->size;

    RecordHeader header;
    header.kind = static_cast<uint16_t>(kind);
    header.key_len = static_cast<uint32_t>(key.size());
    header.value_size = size;
    header.sequence = sequence ? sequence : next_sequence++;
    header.value_checksum = checksum;
    header.target_segment = target_segment;
    header.header_checksum = ssd::header_checksum(header, key);

    // The value first: a reader that finds the header finds the whole value behind it.
    int err = 0;
    if (size > 0) {
      iovec iov[2] = {{const_cast<void*>(data), size}, {const_cast<char*>(kZeros), align_up(size) - size}};
      err = ssd::pwritev_all(seg->fd, iov, iov[1].iov_len ? 2 : 1, offset + head);
    }
    if (err == 0) {
      alignas(kRecordAlign) char block[kRecordAlign] = {};
      std::memcpy(block, &header, sizeof(header));
      std::memcpy(block + sizeof(header), key.data(), key.size());
      iovec iov{block, head};
      err = ssd::pwritev_all(seg->fd, &iov, 1, offset);
    }
    if (err != 0) {
      // Nothing of a failed record stays: the file ends where it ended.
      if (::ftruncate(seg->fd, static_cast<off_t>(offset)) != 0) {
      }
      note_write_error(err, "write a record");
      return std::nullopt;
    }
    seg->size += bytes;
    seg->dirty = true;
    used_bytes += bytes;
    if (kind == RecordKind::kTombstone) {
      std::unique_lock lock(mu);
      seg->tombstones.push_back({key, target_segment, header.sequence});
    }
    return Location{seg, offset + head, size, checksum, header.sequence, bytes};
  }

  // fdatasync of every segment appended to since the last one; false on an I/O error.
  bool sync_dirty() {
    std::vector<std::shared_ptr<Segment>> dirty;
    {
      std::shared_lock lock(mu);
      for (auto& [id, seg] : segments)
        if (seg->dirty) dirty.push_back(seg);
    }
    bool ok = true;
    for (auto& seg : dirty) {
      if (::fdatasync(seg->fd) != 0) {
        note_write_error(errno, "sync a segment");
        ok = false;
        continue;
      }
      seg->dirty = false;
      // The values are on the device now; the DRAM tier above keeps the hot ones, so the page
      // cache need not hold a second copy.
      ::posix_fadvise(seg->fd, 0, 0, POSIX_FADV_DONTNEED);
    }
    return ok;
  }

  // Under write_mu: indexes a freshly appended value (the key was absent).
  bool publish(const std::string& key, Location loc) {
    std::unique_lock lock(mu);
    if (!segments.count(loc.segment->id)) return false;  // a later record's reclaim dropped it
    loc.segment->keys.push_back(key);
    index_record(key, std::move(loc));
    return true;
  }

  bool present(const std::string& key) const {
    std::shared_lock lock(mu);
    return index.count(key) != 0;
  }

  // ---- reading ---------------------------------------------------------------------------------

  void read_many(const std::vector<std::string>& keys, const std::vector<void*>& dsts, const std::vector<size_t>& sizes,
                 std::vector<bool>& ok, std::vector<size_t>& todo) {
    struct Pending {
      size_t i;
      Location loc;
      size_t first_op = 0, ops = 0;  // its reads: ops[first_op, first_op + ops), in value order
      size_t ops_left = 0;
      size_t hashed = 0;                    // of its reads, those hashed so far (in order)
      std::unique_ptr<ValueHasher> hasher;  // a value read in more than one piece
      int error = 0;
      bool buffered = false;  // some of it came through the page cache
    };
    std::vector<Pending> pending;
    pending.reserve(todo.size());
    {
      std::shared_lock lock(mu);
      for (size_t i : todo) {
        auto it = index.find(keys[i]);
        if (it == index.end() || it->second.size != sizes[i]) continue;
        pending.push_back(Pending{i, it->second});
      }
    }
    std::vector<ReadOp> ops;
    std::vector<size_t> owner;  // ops[k] reads part of pending[owner[k]]
    ops.reserve(pending.size() * 2);
    // One value is read with O_DIRECT even without io_uring: one request of its whole size to the
    // device instead of the page cache's readahead steps (batches without io_uring keep readahead).
    const bool single = pending.size() == 1;
    const bool direct = read_direct || single;
    bool split = false;
    for (size_t p = 0; p < pending.size(); ++p) {
      const Location& loc = pending[p].loc;
      auto* dst = static_cast<char*>(dsts[pending[p].i]);
      const Segment& seg = *loc.segment;
      const bool use_direct = direct && seg.direct_fd >= 0 && !seg.direct_refused.load(std::memory_order_relaxed) &&
                              reinterpret_cast<uintptr_t>(dst) % seg.direct_mem_align == 0;
      pending[p].first_op = ops.size();
      // A value alone is cut into pieces read at once (through the ring, else the reader
      // threads): the device serves them side by side, and each piece is hashed as it lands
      // while the later ones are still in flight, so the checksum no longer follows the read.
      const size_t pieces =
          ssd::add_value_reads(ops, seg.fd, use_direct ? seg.direct_fd : -1, dst, loc.value_offset, loc.size, single);
      pending[p].ops = pending[p].ops_left = ops.size() - pending[p].first_op;
      if (pending[p].ops > 1) pending[p].hasher = std::make_unique<ValueHasher>();
      owner.resize(ops.size(), p);
      split = split || pieces > 1;
    }
    std::vector<char> landed(ops.size(), 0);
    std::vector<Pending*> corrupt, failed;
    reader.read_all(
        ops,
        [&](const ReadOp& op) {
          Pending& p = pending[owner[op.tag]];
          int error = op.error;
          if (op.fd != p.loc.segment->direct_fd) p.buffered = true;
          if (error == EINVAL && op.fd == p.loc.segment->direct_fd) {  // O_DIRECT refused after all
            p.loc.segment->direct_refused.store(true, std::memory_order_relaxed);
            error = ssd::pread_all(p.loc.segment->fd, op.dst, op.size, op.offset);
            p.buffered = true;
          }
          if (error) p.error = error;
          landed[op.tag] = 1;
          // Hash what has landed in order, while the value's later pieces are still in flight.
          if (p.hasher)
            for (; !p.error && p.hashed < p.ops && landed[p.first_op + p.hashed]; ++p.hashed) {
              const ReadOp& piece = ops[p.first_op + p.hashed];
              p.hasher->update(piece.dst, piece.size);
            }
          if (--p.ops_left > 0) return;
          // The value is whole: verify it while the other values' reads are still in flight.
          if (p.error) {
            failed.push_back(&p);
          } else if ((p.hasher ? p.hasher->digest() : value_checksum(dsts[p.i], p.loc.size)) != p.loc.checksum) {
            corrupt.push_back(&p);
          } else {
            // What came through the page cache leaves it: the DRAM tier above holds the hot values,
            // and the next read of this one is a read of the device again, as stats and benchmarks
            // say. (A value read with O_DIRECT alone left nothing there: no system call for it.)
            if (p.buffered) ::posix_fadvise(p.loc.segment->fd, p.loc.value_offset, p.loc.size, POSIX_FADV_DONTNEED);
            ok[p.i] = true;
            ++reads;
            read_bytes += p.loc.size;
          }
        },
        /*spread=*/split);
    if (!corrupt.empty() || !failed.empty()) {
      std::unique_lock lock(mu);
      for (auto* list : {&corrupt, &failed})
        for (Pending* p : *list) {
          auto it = index.find(keys[p->i]);
          if (it != index.end() && it->second.sequence == p->loc.sequence && it->second.segment == p->loc.segment)
            unindex(it);
        }
      corrupt_reads += corrupt.size();
      io_errors += failed.size();
      if (!corrupt.empty())
        MORI_LOG(kWarn, "umbp", "SSD tier '%s': %zu value(s) failed their checksum (first key '%s'): dropped", dir(),
                 corrupt.size(), keys[corrupt.front()->i].c_str());
    }
    std::vector<size_t> missed;
    for (size_t i : todo)
      if (!ok[i]) missed.push_back(i);
    todo.swap(missed);
  }

  std::vector<bool> read_batch(const std::vector<std::string>& keys, const std::vector<void*>& dsts,
                               const std::vector<size_t>& sizes) {
    std::vector<bool> ok(keys.size(), false);
    std::vector<size_t> todo;
    todo.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i)
      if (dsts[i] && sizes[i] > 0) todo.push_back(i);
    read_many(keys, dsts, sizes, ok, todo);
    if (!todo.empty() && !writer()) {
      // A reader: keys it does not know may have been written since its last scan.
      bool unknown = false;
      {
        std::shared_lock lock(mu);
        for (size_t i : todo) unknown = unknown || !index.count(keys[i]);
      }
      if (unknown && scan_and_count() > 0) read_many(keys, dsts, sizes, ok, todo);
    }
    return ok;
  }

  size_t scan_and_count() {
    std::lock_guard<std::mutex> lock(refresh_mu);
    ++refreshes;
    return scan_directory(false);
  }

  // ---- background GC (writer) ------------------------------------------------------------------

  void gc_loop() {
    std::unique_lock lock(gc_mu);
    while (!gc_stop) {
      gc_cv.wait_for(lock, kGcPeriod);
      if (gc_stop) break;
      lock.unlock();
      try {
        while (!stopping() && compact_one()) {
        }
      } catch (const std::exception& e) {
        MORI_LOG(kWarn, "umbp", "SSD tier '%s': GC pass failed: %s", dir(), e.what());
      }
      lock.lock();
    }
  }

  bool stopping() {
    std::lock_guard<std::mutex> lock(gc_mu);
    return gc_stop;
  }

  // Compacts the oldest sealed segment whose live share is low; false when there is none.
  bool compact_one() {
    std::shared_ptr<Segment> victim;
    std::vector<std::string> keys;
    std::vector<Segment::Tombstone> tombstones;
    {
      std::shared_lock lock(mu);
      for (auto& [id, seg] : segments) {
        if (seg == active || seg->size == 0) continue;
        // Moving the live values must not push use past the high watermark: that reclaim would
        // drop the oldest values to compact newer ones.
        if (static_cast<double>(used_bytes + seg->live_bytes) > config.high_watermark * config.capacity_bytes) continue;
        if (static_cast<double>(seg->live_bytes) < kGcLiveShare * static_cast<double>(seg->size)) {
          victim = seg;
          break;
        }
      }
      if (!victim) return false;
      keys = victim->keys;
      tombstones = victim->tombstones;
    }
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    uint64_t moved = 0;
    std::vector<char> buffer;
    for (const auto& key : keys) {
      if (stopping()) return false;
      Location loc;
      {
        std::shared_lock lock(mu);
        auto it = index.find(key);
        if (it == index.end() || it->second.segment != victim) continue;
        loc = it->second;
      }
      buffer.resize(loc.size);
      int err = ssd::pread_all(victim->fd, buffer.data(), loc.size, loc.value_offset);
      bool intact = err == 0 && value_checksum(buffer.data(), loc.size) == loc.checksum;
      std::lock_guard<std::mutex> wlock(write_mu);
      {
        std::unique_lock lock(mu);
        if (!segments.count(victim->id)) return true;  // reclaimed meanwhile
        auto it = index.find(key);
        if (it == index.end() || it->second.sequence != loc.sequence || it->second.segment != victim) continue;
        if (!intact) {
          unindex(it);
          ++(err ? io_errors : corrupt_reads);
          continue;
        }
      }
      // The moved record keeps its sequence: a later remove's tombstone still wins over it.
      auto moved_loc = append(key, RecordKind::kValue, buffer.data(), loc.size, loc.checksum, 0, loc.sequence);
      if (!moved_loc) return false;  // no room: try again later
      moved += moved_loc->bytes;
      std::unique_lock lock(mu);
      moved_loc->segment->keys.push_back(key);
      auto it = index.find(key);
      if (it != index.end() && it->second.sequence == loc.sequence && it->second.segment == victim &&
          segments.count(moved_loc->segment->id)) {
        unindex(it, /*announce=*/false);  // moved, not gone
        index_record(key, std::move(*moved_loc), /*announce=*/false);
      }
    }
    std::lock_guard<std::mutex> wlock(write_mu);
    {
      std::shared_lock lock(mu);
      if (!segments.count(victim->id)) return true;
      // Values published here since the keys were listed (a write_batch indexes its records
      // only after its sync): the segment stays, and a later pass looks at it again.
      if (victim->live_bytes > 0) return false;
    }
    // A tombstone matters while the segment of the value it removed is still there.
    for (auto& t : tombstones) {
      bool needed;
      {
        std::shared_lock lock(mu);
        needed = t.target_segment != victim->id && segments.count(t.target_segment);
      }
      // It keeps its sequence: a later write of the key still wins over it.
      if (needed && !append(t.key, RecordKind::kTombstone, nullptr, 0, 0, t.target_segment, t.sequence)) return false;
    }
    if (strict && !sync_dirty()) return false;
    drop_segment_quiet(victim);
    ++gc_runs;
    gc_moved_bytes += moved;
    return true;
  }

  // Drops a compacted segment: whatever is still indexed there was not moved (not counted as evicted).
  void drop_segment_quiet(const std::shared_ptr<Segment>& seg) {
    {
      std::unique_lock lock(mu);
      drop_locked(seg, /*count_evicted=*/false);
    }
    ::unlink(seg->path.c_str());
  }
};

// ---- SsdTier ------------------------------------------------------------------------------------

SsdTier::SsdTier(const SsdConfig& config) : SsdTier(config, SsdAccess::kReadWrite) {}

SsdTier::SsdTier(const SsdConfig& config, SsdAccess access) {
  MORI_CHECK_ARG(!config.storage_dir.empty(), "ssd.storage_dir must not be empty");
  MORI_CHECK_ARG(config.capacity_bytes > 0, "ssd.capacity_bytes must be > 0");
  MORI_CHECK_ARG(config.segment_size_bytes > 0, "ssd.segment_size_bytes must be > 0");
  MORI_CHECK_ARG(
      config.low_watermark > 0 && config.low_watermark <= config.high_watermark && config.high_watermark <= 1.0,
      "ssd.low_watermark and ssd.high_watermark must satisfy 0 < low <= high <= 1 (got %g, %g)", config.low_watermark,
      config.high_watermark);
  MORI_CHECK_ARG(config.io.queue_depth > 0, "ssd.io.queue_depth must be > 0");
  impl_ = std::make_unique<Impl>(config, access);
  impl_->open_directory();
  impl_->scan_directory(/*count_skipped=*/true);
  if (impl_->writer() && config.durability.enable_background_gc) {
    impl_->gc_thread = std::thread([impl = impl_.get()] { impl->gc_loop(); });
    name_thread(impl_->gc_thread, "umbp-ssd-gc");
  }
  MORI_LOG(kDebug, "umbp", "SSD tier '%s': %zu keys recovered, io_uring %s", config.storage_dir.c_str(),
           impl_->index.size(), impl_->reader.uses_io_uring() ? "on" : "off");
}

SsdTier::~SsdTier() {
  if (!impl_) return;
  if (impl_->gc_thread.joinable()) {
    {
      std::lock_guard<std::mutex> lock(impl_->gc_mu);
      impl_->gc_stop = true;
    }
    impl_->gc_cv.notify_all();
    impl_->gc_thread.join();
  }
  if (impl_->writer()) {
    std::lock_guard<std::mutex> lock(impl_->write_mu);
    impl_->sync_dirty();  // a clean close keeps Relaxed writes too
  }
}

static void check_key(const std::string& key) {
  MORI_CHECK_ARG(!key.empty() && key.size() <= ssd::kMaxKeyBytes, "key must be 1..%zu bytes (got %zu)",
                 ssd::kMaxKeyBytes, key.size());
}

bool SsdTier::write(const std::string& key, const void* data, size_t size) {
  return write_batch({key}, {data}, {size})[0];
}

std::vector<bool> SsdTier::write_batch(const std::vector<std::string>& keys, const std::vector<const void*>& datas,
                                       const std::vector<size_t>& sizes) {
  MORI_CHECK_ARG(datas.size() == keys.size() && sizes.size() == keys.size(),
                 "keys, datas and sizes must have one entry per key (got %zu, %zu, %zu)", keys.size(), datas.size(),
                 sizes.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    check_key(keys[i]);
    MORI_CHECK_ARG(datas[i] != nullptr, "data of key '%s' is null", keys[i].c_str());
    MORI_CHECK_ARG(sizes[i] > 0, "size of key '%s' must be > 0", keys[i].c_str());
  }
  if (!impl_->writer()) raise(Status::kInvalidUsage, "SSD tier '%s': a reader cannot write", impl_->dir());
  Impl& s = *impl_;
  std::vector<bool> ok(keys.size(), false);
  std::vector<std::pair<size_t, Location>> written;
  // Hashed before the append lock: other writers are not held up by it.
  std::vector<uint64_t> checksums(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) checksums[i] = s.present(keys[i]) ? 0 : value_checksum(datas[i], sizes[i]);
  std::lock_guard<std::mutex> wlock(s.write_mu);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (s.present(keys[i])) {
      ok[i] = true;  // a key keeps its first value
      continue;
    }
    bool earlier = false;  // the same key twice in one batch: the first one is kept
    for (auto& [j, loc] : written) earlier = earlier || keys[j] == keys[i];
    if (earlier) {
      ok[i] = true;
      continue;
    }
    // A key present at hashing time but gone now (removed, reclaimed) is hashed here.
    const uint64_t checksum = checksums[i] ? checksums[i] : value_checksum(datas[i], sizes[i]);
    auto loc = s.append(keys[i], RecordKind::kValue, datas[i], sizes[i], checksum, 0, 0);
    if (loc) written.emplace_back(i, std::move(*loc));
  }
  // Strict: one fdatasync per batch, before any of it becomes visible.
  if (s.strict && !written.empty() && !s.sync_dirty()) return ok;
  for (auto& [i, loc] : written) {
    ok[i] = s.publish(keys[i], std::move(loc));
    if (!ok[i]) continue;
    ++s.writes;
    s.write_bytes += sizes[i];
  }
  for (size_t i = 0; i < keys.size(); ++i)
    if (ok[i] && std::find_if(written.begin(), written.end(), [&](auto& w) { return w.first == i; }) == written.end())
      ok[i] = s.present(keys[i]);  // a duplicate whose first copy a reclaim dropped reads as failed
  return ok;
}

bool SsdTier::read(const std::string& key, void* dst, size_t size) {
  check_key(key);
  MORI_CHECK_ARG(dst != nullptr, "dst is null");
  MORI_CHECK_ARG(size > 0, "size must be > 0");
  return impl_->read_batch({key}, {dst}, {size})[0];
}

std::vector<bool> SsdTier::read_batch(const std::vector<std::string>& keys, const std::vector<void*>& dsts,
                                      const std::vector<size_t>& sizes) {
  MORI_CHECK_ARG(dsts.size() == keys.size() && sizes.size() == keys.size(),
                 "keys, dsts and sizes must have one entry per key (got %zu, %zu, %zu)", keys.size(), dsts.size(),
                 sizes.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    check_key(keys[i]);
    MORI_CHECK_ARG(dsts[i] != nullptr, "dst of key '%s' is null", keys[i].c_str());
    MORI_CHECK_ARG(sizes[i] > 0, "size of key '%s' must be > 0", keys[i].c_str());
  }
  return impl_->read_batch(keys, dsts, sizes);
}

bool SsdTier::contains(const std::string& key) const { return impl_->present(key); }

size_t SsdTier::value_size(const std::string& key) const {
  std::shared_lock lock(impl_->mu);
  auto it = impl_->index.find(key);
  return it == impl_->index.end() ? 0 : it->second.size;
}

bool SsdTier::remove(const std::string& key) {
  check_key(key);
  if (!impl_->writer()) raise(Status::kInvalidUsage, "SSD tier '%s': a reader cannot remove", impl_->dir());
  Impl& s = *impl_;
  std::lock_guard<std::mutex> wlock(s.write_mu);
  uint64_t target;
  {
    std::shared_lock lock(s.mu);
    auto it = s.index.find(key);
    if (it == s.index.end()) return false;
    target = it->second.segment->id;
  }
  // The tombstone keeps the key removed across a restart; without room for it the key is still
  // removed from this tier's index (and may come back after a restart: counted in failed_writes).
  s.append(key, RecordKind::kTombstone, nullptr, 0, 0, target, 0);
  {
    std::unique_lock lock(s.mu);
    auto it = s.index.find(key);
    if (it != s.index.end()) s.unindex(it);
  }
  if (s.strict) s.sync_dirty();
  s.gc_cv.notify_all();
  return true;
}

void SsdTier::clear() {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> wlock(s.write_mu);
  std::vector<std::shared_ptr<Segment>> all;
  {
    std::unique_lock lock(s.mu);
    if (s.events)
      for (const auto& [key, loc] : s.index) s.events->append(KvChange::Kind::Remove, key, TierType::SSD, 0);
    s.index.clear();
    for (auto& [id, seg] : s.segments) seg->live_bytes = 0;
    if (!s.writer()) return;  // a reader forgets; the files are the writer's
    for (auto& [id, seg] : s.segments) {
      all.push_back(seg);
      if (s.events) s.events->ssd_segment_dropped(id);
    }
    s.segments.clear();
    s.active.reset();
    s.used_bytes = 0;
  }
  for (auto& seg : all) ::unlink(seg->path.c_str());
  ::fsync(s.dir_fd);
}

void SsdTier::flush() {
  Impl& s = *impl_;
  if (!s.writer()) return;
  std::lock_guard<std::mutex> wlock(s.write_mu);
  s.sync_dirty();
  ::fsync(s.dir_fd);
}

void SsdTier::set_event_log(TierEvents* log) {
  std::unique_lock lock(impl_->mu);
  impl_->events = log;
  if (log)
    for (const auto& [key, loc] : impl_->index) log->ssd_placed(key, Impl::place_of(loc));
}

std::vector<std::pair<std::string, uint64_t>> SsdTier::snapshot() const {
  std::shared_lock lock(impl_->mu);
  std::vector<std::pair<std::string, uint64_t>> out;
  out.reserve(impl_->index.size());
  for (const auto& [key, loc] : impl_->index) out.emplace_back(key, loc.size);
  return out;
}

size_t SsdTier::refresh() {
  if (impl_->writer()) return 0;
  return impl_->scan_and_count();
}

SsdStats SsdTier::stats() const {
  const Impl& s = *impl_;
  SsdStats st;
  {
    std::shared_lock lock(s.mu);
    st.keys = s.index.size();
    st.segments = s.segments.size();
  }
  st.used_bytes = s.used_bytes;
  st.capacity_bytes = s.config.capacity_bytes;
  st.writes = s.writes;
  st.write_bytes = s.write_bytes;
  st.reads = s.reads;
  st.read_bytes = s.read_bytes;
  st.corrupt_reads = s.corrupt_reads;
  st.evicted_keys = s.evicted_keys;
  st.gc_runs = s.gc_runs;
  st.gc_moved_bytes = s.gc_moved_bytes;
  st.io_uring = s.reader.uses_io_uring();
  st.failed_writes = s.failed_writes;
  st.enospc_writes = s.enospc_writes;
  st.io_errors = s.io_errors;
  st.skipped_records = s.skipped_records;
  st.refreshes = s.refreshes;
  st.direct_io = s.direct_io;
  return st;
}

}  // namespace mori::umbp
