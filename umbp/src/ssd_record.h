// SPDX-License-Identifier: MIT
// The on-disk record of the SSD tier's segmented log.
//
//   [RecordHeader 64 B][key][zeros to a 4 KiB boundary] [value][zeros to a 4 KiB boundary]
//
// Both blocks are padded to kRecordAlign so that every value starts at a 4 KiB-aligned file
// offset (reads can bypass the page cache with O_DIRECT), and every record starts at one too:
// a scan that meets a torn or corrupt header resynchronises at the next 4 KiB block instead of
// losing the rest of the segment. The header checksum covers the header and the key, the value
// checksum (checksum.h) the value; a scan trusts a header only when its checksum matches, a read
// serves a value only when its checksum matches. Values are written before their header, so a
// reader that sees a valid header (a follower scanning the leader's segment) sees the whole value.
#pragma once

#include "src/checksum.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace mori::umbp::ssd {

inline constexpr uint32_t kRecordMagic = 0x524D4255;  // "UBMR" read as little-endian bytes
// 2: value checksums over 256 KiB are taken by chunks (checksum.h); version 1 records are not read.
inline constexpr uint16_t kRecordVersion = 2;
inline constexpr size_t kRecordAlign = 4096;

enum class RecordKind : uint16_t { kValue = 1, kTombstone = 2 };

struct RecordHeader {
  uint32_t magic = kRecordMagic;
  uint16_t version = kRecordVersion;
  uint16_t kind = static_cast<uint16_t>(RecordKind::kValue);
  uint32_t key_len = 0;
  uint32_t reserved = 0;
  uint64_t value_size = 0;
  uint64_t sequence = 0;         // tier-wide, increasing: the newest record of a key wins
  uint64_t value_checksum = 0;   // value_checksum() of the value
  uint64_t target_segment = 0;   // tombstones: the segment that held the removed value
  uint64_t header_checksum = 0;  // of this header (this field as 0) and the key
  uint64_t pad = 0;
};
static_assert(sizeof(RecordHeader) == 64, "the on-disk header is 64 bytes");

// Keys fit with their header in one 4 KiB block.
inline constexpr size_t kMaxKeyBytes = kRecordAlign - sizeof(RecordHeader);

constexpr uint64_t align_up(uint64_t n) { return (n + kRecordAlign - 1) / kRecordAlign * kRecordAlign; }
constexpr uint64_t header_block_bytes(size_t key_len) { return align_up(sizeof(RecordHeader) + key_len); }
constexpr uint64_t record_bytes(size_t key_len, uint64_t value_size) {
  return header_block_bytes(key_len) + align_up(value_size);
}

inline uint64_t header_checksum(const RecordHeader& header, std::string_view key) {
  RecordHeader copy = header;
  copy.header_checksum = 0;
  return XXH3_64bits_withSeed(key.data(), key.size(), XXH3_64bits(&copy, sizeof(copy)));
}

// Whether `header` (followed by `key`) is a record this version wrote, whole. `room` is the number
// of bytes of the segment from the header on: a record claiming more is torn.
inline bool header_valid(const RecordHeader& header, std::string_view key, uint64_t room) {
  if (header.magic != kRecordMagic || header.version != kRecordVersion) return false;
  if (header.kind != static_cast<uint16_t>(RecordKind::kValue) &&
      header.kind != static_cast<uint16_t>(RecordKind::kTombstone))
    return false;
  if (header.key_len == 0 || header.key_len > kMaxKeyBytes || header.key_len != key.size()) return false;
  if (header.value_size > room || record_bytes(header.key_len, header.value_size) > room) return false;
  return header.header_checksum == header_checksum(header, key);
}

}  // namespace mori::umbp::ssd
