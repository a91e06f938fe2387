// SPDX-License-Identifier: MIT
// The per-host server's wire format (StandaloneProcess mode), over a Unix stream socket.
//
//   worker -> server: Frame(op, id) + payload ...   (a Register frame carries one memfd, SCM_RIGHTS)
//   server -> worker: Frame(op, id, status) + payload, one per request (but kDirectReads), in order
//
// Values never ride this channel: a put or get names (region, offset, size) in memory the worker
// handed over once (register_memory) and the server copies between that mapping and its store.
// Region 0 means "not registered": offset is then an address in the worker, which the server
// reaches with process_vm_readv/writev (one extra copy). A reply with status != 0 carries the
// error text as its payload. Every length is checked against a maximum before anything is
// allocated; a frame that breaks the framing (magic, version, length) ends the connection after
// an error reply, a payload that does not parse is an error reply and the connection goes on.
// Integers are little-endian (the only byte order MORI runs on), like io/src/wire.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "mori/core/status.h"

namespace mori::umbp::wire {

constexpr uint32_t kMagic = 0x50424d55;  // "UMBP"
constexpr uint16_t kVersion = 1;
constexpr size_t kMaxPayload = size_t{32} << 20;  // a batch of 4096 keys of 4 KiB fits with room
constexpr size_t kMaxBatch = 1u << 16;            // items in one batch request
constexpr size_t kMaxMessage = 4096;              // longest error text of a reply

enum class Op : uint16_t {
  kPing = 1,                    // -> u8 ready, u32 deployment mode, u64 server pid
  kRegister = 2,                // u64 worker_base, u64 size, u64 fd_offset + memfd -> u32 region id
  kDeregister = 3,              // u32 region id -> (empty)
  kBatchPut = 4,                // u32 n, u8 with_depth, n x Item [+ i32 depth] -> n x u8
  kBatchGet = 5,                // u32 n, n x Item -> n x u8
  kBatchExists = 6,             // u32 n, n x key -> n x u8
  kBatchExistsConsecutive = 7,  // u32 n, n x key -> u64
  kClear = 8,                   // -> u8
  kFlush = 9,                   // -> u8
  kStats = 10,                  // -> ClientStats (u64 fields in order)
  kReportExternalKv = 11,       // u32 tier, u32 n, n x hash -> u8
  kRevokeExternalKv = 12,       // u32 tier, u32 n, n x hash -> u8
  kRevokeAllExternalKv = 13,    // u32 tier -> u8
  kMatchExternalKv = 14,        // u8 count_as_hit, u32 n, n x hash -> u32 m, m x Match
  kExternalKvHitCounts = 15,    // u32 n, n x hash -> u32 m, m x (hash, u64)
  // -> u8 available [, string storage_dir + the shared SSD index's memfd (ssd_shared_index.h)]
  kSsdIndex = 16,
  // One-way (no reply): values the worker read from the SSD itself (ssd_shared_index.h), for the
  // server's counters and promote on read: u32 n, n x (key, u32 region, u64 offset, u64 size, u64 checksum)
  kDirectReads = 17,
};
constexpr uint16_t kMaxOp = 17;

struct Frame {
  uint32_t magic;
  uint16_t version;
  uint16_t op;      // Op
  uint64_t id;      // echoed in the reply
  uint32_t status;  // replies: mori::Status (0 = ok; else the payload is the error text)
  uint32_t length;  // payload bytes that follow
};
static_assert(sizeof(Frame) == 24 && std::is_trivially_copyable_v<Frame>);

// Where an item's bytes are: (region, offset, size) of a registered region, or region 0 and an
// address in the worker.
constexpr uint32_t kUnregistered = 0;

// Appends little-endian fields to a payload.
class Writer {
 public:
  template <typename T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const size_t at = buf_.size();
    buf_.resize(at + sizeof(T));
    std::memcpy(buf_.data() + at, &v, sizeof(T));
  }
  void put_string(std::string_view s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    buf_.insert(buf_.end(), s.begin(), s.end());
  }
  void put_bytes(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    buf_.insert(buf_.end(), c, c + n);
  }
  std::vector<char>& buffer() { return buf_; }
  size_t size() const { return buf_.size(); }

 private:
  std::vector<char> buf_;
};

// Reads a payload front to back; any read past the end, or a count over its limit, throws
// mori::Error(kInvalidArgument) ("malformed ... frame").
class Reader {
 public:
  Reader(const char* data, size_t size) : p_(data), end_(data + size) {}

  template <typename T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T));
    T v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  std::string get_string(size_t max_len) {
    const uint32_t n = get<uint32_t>();
    if (n > max_len) raise(Status::kInvalidArgument, "malformed frame: a string of %u bytes exceeds %zu", n, max_len);
    need(n);
    std::string s(p_, n);
    p_ += n;
    return s;
  }
  // A count of items, each at least `min_item_bytes` long: refused before anything is sized by it.
  uint32_t get_count(size_t max_count, size_t min_item_bytes) {
    const uint32_t n = get<uint32_t>();
    if (n > max_count)
      raise(Status::kInvalidArgument, "malformed frame: %u items exceed the limit of %zu", n, max_count);
    if (static_cast<size_t>(end_ - p_) < n * min_item_bytes)
      raise(Status::kInvalidArgument, "malformed frame: %u items cannot fit in the %zu bytes left", n,
            static_cast<size_t>(end_ - p_));
    return n;
  }
  void get_bytes(void* dst, size_t n) {
    need(n);
    std::memcpy(dst, p_, n);
    p_ += n;
  }
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  void expect_end() const {
    if (p_ != end_) raise(Status::kInvalidArgument, "malformed frame: %zu trailing bytes", left());
  }

 private:
  void need(size_t n) const {
    if (static_cast<size_t>(end_ - p_) < n)
      raise(Status::kInvalidArgument, "malformed frame: needs %zu more bytes, %zu left", n, left());
  }
  const char* p_;
  const char* end_;
};

}  // namespace mori::umbp::wire
