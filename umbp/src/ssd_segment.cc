// SPDX-License-Identifier: MIT
#include "src/ssd_segment.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "src/ssd_io.h"

namespace mori::umbp::ssd {

std::string segment_file_name(uint64_t id) {
  char name[40];
  std::snprintf(name, sizeof(name), "seg-%016" PRIx64 ".log", id);
  return name;
}

bool parse_segment_file_name(const char* name, uint64_t* id) {
  if (std::strlen(name) != 4 + 16 + 4 || std::strncmp(name, "seg-", 4) != 0 || std::strcmp(name + 20, ".log") != 0)
    return false;
  uint64_t value = 0;
  for (int i = 4; i < 20; ++i) {
    char c = name[i];
    int digit = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (digit < 0) return false;
    value = value * 16 + static_cast<uint64_t>(digit);
  }
  *id = value;
  return true;
}

Segment::~Segment() {
  if (fd >= 0) ::close(fd);
  if (direct_fd >= 0) ::close(direct_fd);
}

bool Segment::open(const std::string& file_path, uint64_t segment_id, bool create) {
  id = segment_id;
  path = file_path;
  fd = create ? ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644)
              : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct statx sx{};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_INO | STATX_SIZE | STATX_DIOALIGN, &sx) != 0) {
    int saved = errno;
    ::close(fd);
    fd = -1;
    errno = saved;
    return false;
  }
  inode = sx.stx_ino;
  size = sx.stx_size;
  // Values sit at 4 KiB offsets: O_DIRECT works when the file system asks for no more than that.
  // Where statx does not report the alignments (overlay and some container file systems), O_DIRECT is
  // tried with 4 KiB: a refusal shows up as EINVAL on the first read, which turns it off (direct_refused).
  const bool reported = (sx.stx_mask & STATX_DIOALIGN) && sx.stx_dio_offset_align != 0;
  if (!reported ||
      (sx.stx_dio_offset_align <= kRecordAlign && sx.stx_dio_mem_align != 0 && sx.stx_dio_mem_align <= kRecordAlign)) {
    direct_fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (direct_fd >= 0) direct_mem_align = reported ? sx.stx_dio_mem_align : kRecordAlign;
  }
  return true;
}

ScanResult scan_segment(int fd, uint64_t from, uint64_t file_size, const std::function<void(ScannedRecord&&)>& visit) {
  ScanResult result{from, 0};
  alignas(kRecordAlign) static thread_local char block[kRecordAlign];
  uint64_t pos = align_up(from);
  bool in_bad_run = false;
  while (pos + sizeof(RecordHeader) <= file_size) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(kRecordAlign, file_size - pos));
    if (pread_all(fd, block, want, pos) != 0) break;
    RecordHeader header;
    std::memcpy(&header, block, sizeof(header));
    bool valid = false;
    if (header.magic == kRecordMagic && header.key_len > 0 && header.key_len <= want - sizeof(RecordHeader)) {
      std::string_view key(block + sizeof(RecordHeader), header.key_len);
      valid = header_valid(header, key, file_size - pos);
    }
    if (!valid) {
      in_bad_run = true;
      pos += kRecordAlign;
      continue;
    }
    if (in_bad_run) ++result.skipped;
    in_bad_run = false;
    ScannedRecord record{header, std::string(block + sizeof(RecordHeader), header.key_len), pos};
    pos += record_bytes(header.key_len, header.value_size);
    result.end = pos;
    visit(std::move(record));
  }
  if (in_bad_run) ++result.skipped;
  return result;
}

}  // namespace mori::umbp::ssd
