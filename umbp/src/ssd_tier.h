// SPDX-License-Identifier: MIT
// The SSD tier: a segmented log of values in `storage_dir` (MORI's SegmentedLog layout).
// Values are appended to the open segment; an in-memory index maps key -> (segment, offset,
// size, checksum). Reclaim drops the oldest values when use passes the high watermark, down to
// the low one; background GC rewrites segments whose live share fell low. Reads verify the
// value's checksum and land straight in the caller's buffer. With Strict durability a write is
// on stable storage when it returns, and a new SsdTier over the same directory finds it again.
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mori/umbp/config.h"

namespace mori::umbp {

struct SsdStats {
  uint64_t used_bytes = 0, capacity_bytes = 0, keys = 0, segments = 0;
  uint64_t writes = 0, write_bytes = 0, reads = 0, read_bytes = 0;
  uint64_t corrupt_reads = 0;  // checksum or header mismatches (served as misses)
  uint64_t evicted_keys = 0, gc_runs = 0, gc_moved_bytes = 0;
  bool io_uring = false;       // whether reads and writes go through io_uring
};

class SsdTier {
 public:
  // Opens (creating if needed) the tier in config.storage_dir and recovers the values a
  // previous tier there wrote durably. Throws mori::Error naming the directory on failure.
  explicit SsdTier(const SsdConfig& config);
  ~SsdTier();
  SsdTier(const SsdTier&) = delete;
  SsdTier& operator=(const SsdTier&) = delete;

  // Stores a value. A key already present keeps its value (true). False when the value cannot
  // fit even after reclaiming (then nothing of it is visible).
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

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mori::umbp
