// SPDX-License-Identifier: MIT
// One segment file of the SSD tier's log: its descriptors (closed when the last user lets go,
// so a segment dropped while a read is in flight stays readable until the read ends), and the
// scan that finds its records (recovery, and a reader following the writer's appends).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "src/ssd_record.h"

namespace mori::umbp::ssd {

std::string segment_file_name(uint64_t id);
// Whether `name` is a segment file's name; its id in *id.
bool parse_segment_file_name(const char* name, uint64_t* id);

struct Segment {
  uint64_t id = 0;
  std::string path;
  int fd = -1;                              // buffered: appends, scans, reads into unaligned memory
  int direct_fd = -1;                       // O_DIRECT reads; -1 where the file system refuses them
  size_t direct_mem_align = 0;              // the memory alignment O_DIRECT asks for (statx, else 4 KiB)
  std::atomic<bool> direct_refused{false};  // an O_DIRECT read got EINVAL: read through fd from then on
  ino_t inode = 0;
  uint64_t size = 0;              // bytes the file takes (appended, or found on disk)
  uint64_t scanned = 0;           // a reader: the offset its next scan starts at
  uint64_t live_bytes = 0;        // bytes of records the index points to
  bool dirty = false;             // appended since the last fdatasync
  std::vector<std::string> keys;  // keys of value records here (some since moved or removed)
  struct Tombstone {
    std::string key;
    uint64_t target_segment;  // the segment that held the removed value
    uint64_t sequence;
  };
  std::vector<Tombstone> tombstones;

  Segment() = default;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  // Opens path: created (exclusively) for appending and reading when `create`, else read-only
  // (segments other than the one being appended to never change). False with errno set.
  bool open(const std::string& file_path, uint64_t segment_id, bool create);
};

struct ScannedRecord {
  RecordHeader header;
  std::string key;
  uint64_t offset = 0;  // of the header
};

struct ScanResult {
  uint64_t end = 0;      // just past the last whole record found (the scan's start when none)
  uint64_t skipped = 0;  // runs of blocks that held no valid record before a valid one or the end
};

// Visits every valid record of fd in [from, file_size).
ScanResult scan_segment(int fd, uint64_t from, uint64_t file_size, const std::function<void(ScannedRecord&&)>& visit);

}  // namespace mori::umbp::ssd
