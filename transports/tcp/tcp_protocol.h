// SPDX-License-Identifier: MIT
// The tcp transport's wire format. One connection per (initiator PE, target PE)
// pair carries requests one way and replies the other. Requests are applied by
// the target in the order they arrive, which is what gives fence its meaning;
// replies come back in request order.
//
//   both ways:           mutual challenge-response on the job secret (core/auth.h,
//                        label kAuthLabel); the secret itself never crosses the wire
//   initiator -> target: Hello, then Request [+ payload] ...
//   target -> initiator: HelloReply, then Reply [+ payload] ...
//
// Puts, put-with-signal and non-fetching atomics are not acknowledged unless
// they fail (or the request asks with kFlagAck); gets, fetching atomics and
// flushes always get a reply. A flush reply therefore proves that everything
// sent before it on that connection has been applied: that is quiet.
// All integers are little-endian (the only byte order MORI runs on).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace mori::tcp {

constexpr std::string_view kAuthLabel = "mori-tcp-v1";
constexpr char kHelloMagic[8] = {'M', 'O', 'R', 'I', 'T', 'C', 'P', '2'};
constexpr uint32_t kProtocolVersion = 2;

// Largest payload of one request. Bigger transfers are split into chunks of at
// most this size, pipelined on the connection. The bound is also a safety
// limit: the target drains at most this much from a request it refuses, and
// closes connections that announce more.
constexpr size_t kMaxChunk = 1 << 20;
// Longest error text a reply may carry.
constexpr size_t kMaxErrorText = 1024;

enum HelloFlags : uint32_t {
  // The runtime's own connection of a PE; losing it without a goodbye means the PE is gone.
  kHelloPrimary = 1,
};

// Sent once authenticated.
struct Hello {
  char magic[8];
  int32_t from_pe;
  int32_t to_pe;  // the target the initiator believes it reached
  uint32_t flags;
  uint32_t version;
  uint64_t reserved;
};
static_assert(sizeof(Hello) == 32);

enum class HelloStatus : uint8_t {
  kOk = 0,
  kRefused = 1,    // not a MORI tcp hello (a wrong secret never gets this far)
  kWrongPe = 2,    // to_pe is not this PE, or from_pe is out of range
  kDuplicate = 3,  // that PE already has a primary connection
  kBadVersion = 4,
  kBusy = 5,  // too many authenticated connections
};

struct HelloReply {
  uint8_t status;  // HelloStatus
  uint8_t pad[3];
  int32_t pe;  // the target's PE number
  uint64_t max_chunk;
};
static_assert(sizeof(HelloReply) == 16);

enum class Op : uint8_t {
  kPut = 1,        // payload of `length` bytes -> (region, offset)
  kGet = 2,        // reply carries `length` bytes from (region, offset)
  kAmo = 3,        // aux = AmoOp, width 4 or 8, operand = value, compare
  kPutSignal = 4,  // kPut, then signal (signal_region, signal_offset) updated with aux = SignalOp, operand
  kFlush = 5,      // reply once everything before it is applied
  kBye = 6,        // the initiator leaves on purpose (finalize)
};

enum RequestFlags : uint8_t {
  kFlagAck = 1,  // reply even on success
};

struct Request {
  uint8_t op;     // Op
  uint8_t aux;    // AmoOp for kAmo, SignalOp for kPutSignal
  uint8_t width;  // atomic width in bytes
  uint8_t flags;  // RequestFlags
  uint32_t region;
  uint64_t offset;
  uint64_t length;
  uint64_t operand;
  uint64_t compare;
  uint32_t signal_region;
  uint32_t pad;
  uint64_t signal_offset;
  uint64_t seq;  // initiator's request counter, echoed in the reply
};
static_assert(sizeof(Request) == 64);

enum class ReplyStatus : uint8_t {
  kOk = 0,
  kOutOfBounds = 1,  // (region, offset, length) is not inside registered memory
  kBadRegion = 2,    // no such region, or not reachable over tcp (device memory)
  kBadRequest = 3,   // malformed: unknown op, bad width/alignment/op code
  kTooLarge = 4,     // length above kMaxChunk; the target closes the connection
};

struct Reply {
  uint8_t status;  // ReplyStatus
  uint8_t op;      // the request's op
  uint8_t pad[2];
  uint32_t length;  // bytes that follow: get data (status kOk) or error text
  uint64_t seq;
  uint64_t value;  // old value of a fetching atomic
};
static_assert(sizeof(Reply) == 24);

}  // namespace mori::tcp
