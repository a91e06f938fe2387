// SPDX-License-Identifier: MIT
// The SSD tier: a segmented log of values in `storage_dir` (MORI's SegmentedLog layout).
// Values are appended to the open segment; an in-memory index maps key -> (segment, offset,
// size, checksum). Reclaim drops the oldest values when use passes the high watermark, down to
// the low one; background GC rewrites segments whose live share fell low. Reads verify the
// value's checksum and land straight in the caller's buffer. With Strict durability a write is
// on stable storage when it returns, and a new SsdTier over the same directory finds it again.
// Thread-safe.
//
// Layout (ssd_record.h): segment files seg-<16 hex id>.log, each a run of 4 KiB-aligned records
// (header + key block, value block); a LOCK file held (flock) by the one writer of the directory.
// Segments are at most min(segment_size_bytes, max(capacity_bytes / 16, 1 MiB)) bytes so that
// one whole-segment drop is a small step; a record larger than that gets a segment of its own.
// Use (stats().used_bytes) counts whole records, padding and removed ones included: it is what
// the files take on disk. A write that would take use past high_watermark * capacity_bytes first
// drops the oldest segments (FIFO by segment) until use plus the new record is at most
// low_watermark * capacity_bytes. The background GC rewrites the live values of a sealed segment
// whose live share fell under one half (removed keys) at the head of the log, then deletes it.
//
// Crash consistency. Values are written before their header, the header and the key carry a
// checksum, and recovery (construction, refresh()) indexes a record only when its header is whole
// and valid; a torn or corrupt header is skipped (the scan resumes at the next 4 KiB block), a
// torn or flipped value is found by the value checksum on its first read (a miss, counted).
//  - Strict: write/write_batch/remove return after fdatasync of the segment (a new segment also
//    syncs the directory), so every write that returned true, and every remove, survives a
//    crash of the process or of the machine. (A write that returned false because its sync
//    failed may still be found after a restart, with its own value: never a wrong one.)
//  - Relaxed: no sync per call; what flush() (or a clean destruction) synced survives a machine
//    crash; everything written survives a crash of the process alone (it is in the page cache).
// Removes write a tombstone record, so a removed key stays removed after a restart.
//
// Reads. With io_uring (IoConfig::backend IoUring, and the kernel allows it): O_DIRECT where the
// file system offers it and dst is aligned as it asks (statx STATX_DIOALIGN, often 512 B): the
// value's whole 4 KiB blocks go straight from the device into dst, many reads in flight (up to
// min(queue_depth, 256) per batch), and its last partial block is read through the page cache.
// Without io_uring, or into unaligned memory: pread through the page cache, whose readahead keeps
// one reader at a time fast. No bounce buffer in any case. A single value is read with O_DIRECT
// (into aligned memory) with or without io_uring; from 256 KiB of whole blocks on it is cut into
// 2-8 pieces of about 512 KiB read at once (the ring, else the read engine's reader threads),
// each hashed as it lands while the later ones are in flight (XXH3 taken in pieces in order is
// the stored checksum, so the record format is unchanged); below that it is one pread. After a read,
// the value's pages leave the page cache (POSIX_FADV_DONTNEED): the DRAM tier above keeps the hot
// values, and an SSD hit is a read of the device, not of a second cache. Every value is verified
// against its checksum before true is returned. On a false return the contents of dst are
// undefined (the read may have landed before the checksum failed); true means all `size` bytes
// are the value that was written.
//
// Shared directory (MORI's SharedSSDLeader/Follower): one writer (SsdAccess::kReadWrite, the
// default) and any number of readers in other processes (SsdAccess::kReadOnly). A second writer
// on a directory is refused with mori::Error naming it. A reader sees what the writer wrote up to
// its last scan: refresh() scans what was written since, and a reader's read()/read_batch() of a
// key it does not know refreshes once before reporting the miss (contains() does not: call
// refresh()). A reader never writes, removes or clears files (those calls raise kInvalidUsage,
// except clear(), which forgets the reader's index only). A reader keeps the segments it knows
// open until a refresh sees them gone: the space of a segment the writer deleted is freed then.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mori/umbp/config.h"
#include "src/tier_events.h"

namespace mori::umbp {

struct SsdStats {
  uint64_t used_bytes = 0, capacity_bytes = 0, keys = 0, segments = 0;
  uint64_t writes = 0, write_bytes = 0, reads = 0, read_bytes = 0;
  uint64_t corrupt_reads = 0;  // checksum or header mismatches (served as misses)
  uint64_t evicted_keys = 0, gc_runs = 0, gc_moved_bytes = 0;
  bool io_uring = false;  // whether batched reads go through io_uring (writes are pwrite to the page cache)
  // Ours, beyond MORI's fields:
  uint64_t failed_writes = 0;    // writes refused: no room, or an I/O error (nothing of them is visible)
  uint64_t enospc_writes = 0;    // of which the file system was full
  uint64_t io_errors = 0;        // reads that failed with an I/O error (served as misses)
  uint64_t skipped_records = 0;  // torn or corrupt records a scan (recovery, refresh) skipped
  uint64_t refreshes = 0;        // scans for segments written by another process
  bool direct_io = false;        // whether reads bypass the page cache (io_uring and O_DIRECT both available)
};

enum class SsdAccess : int {
  kReadWrite = 0,  // the one writer of the directory (Standalone, SharedSSDLeader)
  kReadOnly = 1,   // reads what the writer wrote (SharedSSDFollower)
};

class SsdTier {
 public:
  // Opens (creating if needed) the tier in config.storage_dir and recovers the values a
  // previous tier there wrote durably. Throws mori::Error naming the directory on failure.
  explicit SsdTier(const SsdConfig& config);
  SsdTier(const SsdConfig& config, SsdAccess access);
  ~SsdTier();
  SsdTier(const SsdTier&) = delete;
  SsdTier& operator=(const SsdTier&) = delete;

  // Stores a value. A key already present keeps its value (true). False when the value cannot
  // fit even after reclaiming, or the file system refuses it (ENOSPC, EIO): then nothing of it
  // is visible. Keys are 1..4032 bytes.
  bool write(const std::string& key, const void* data, size_t size);
  std::vector<bool> write_batch(const std::vector<std::string>& keys, const std::vector<const void*>& datas,
                                const std::vector<size_t>& sizes);
  // Reads the whole value into dst. False on a miss, when size != the stored size, or on a
  // checksum mismatch (the key is then dropped and counted in stats().corrupt_reads).
  bool read(const std::string& key, void* dst, size_t size);
  // Many reads in flight at once (io_uring queue depth), each as read().
  std::vector<bool> read_batch(const std::vector<std::string>& keys, const std::vector<void*>& dsts,
                               const std::vector<size_t>& sizes);
  bool contains(const std::string& key) const;
  // The stored size, or 0 on a miss.
  size_t value_size(const std::string& key) const;
  bool remove(const std::string& key);
  void clear();  // every value gone, segment files removed
  void flush();  // Relaxed durability: everything written so far reaches stable storage
  SsdStats stats() const;
  // Scans segments written by another process since the last scan (a reader's view of the
  // writer's directory); returns the number of keys that became visible. A writer: 0.
  size_t refresh();

  // Every key that enters or leaves the index (written, reclaimed, removed, cleared, dropped as
  // corrupt; not GC moves) is appended to `log` from now on (null: none), every record indexed
  // (GC moves too, and at once those indexed already) goes to log->ssd_placed(), every segment
  // file deleted to log->ssd_segment_dropped().
  void set_event_log(TierEvents* log);
  // (key, size) of every value the index holds.
  std::vector<std::pair<std::string, uint64_t>> snapshot() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mori::umbp
