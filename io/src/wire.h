// SPDX-License-Identifier: MIT
// The IO engine's wire format between an initiator and a target engine.
//
//   initiator -> target: auth handshake (core/auth, label "mori-io-v1", the target's
//                        engine secret), Hello, [identity handshake], then Request [+ payload] ...
//   target -> initiator: HelloReply, then Reply [+ payload] ... and Revoke messages
//
// The identity handshake (label "mori-io-sender-v1", the initiator's own engine secret)
// runs when the target holds the descriptor of the engine the Hello names: only then are
// that connection's notifications credited to that engine.
//
// Every request names a region by (id, region key) and a byte range; the target checks
// all three before touching memory. WRITE payloads and READ replies are at most
// kMaxChunk bytes, so a refused write is drained in bounded time and a peer announcing
// more is cut off. Replies carry the request's id; a connection answers in order.
// Integers are little-endian (the only byte order MORI runs on).
#pragma once

#include <cstddef>
#include <cstdint>

namespace mori::io::wire {

constexpr char kAuthLabel[] = "mori-io-v1";
// The second handshake, by which an initiator proves it is the engine its Hello names
// (when the target holds that engine's descriptor): the target is the client there.
constexpr char kIdentityLabel[] = "mori-io-sender-v1";
constexpr uint32_t kVersion = 3;  // 3: Request.flags (kNotifyOnSuccess)
constexpr size_t kMaxChunk = 16u << 20;
constexpr size_t kMaxKey = 4096;      // longest engine key
constexpr size_t kMaxMessage = 1024;  // longest error text of a reply

struct Hello {
  uint32_t version;
  uint32_t key_len;  // followed by the initiator's engine key
};

enum class HelloStatus : uint32_t {
  kRefused = 0,        // a malformed hello
  kAccepted = 1,       // served; the target does not know the engine named, so its notifications are dropped
  kProveIdentity = 2,  // the target knows that engine: the identity handshake follows
  kTooManyPeer = 3,    // `limit` connections of this engine are served already
  kTooManyTotal = 4,   // `limit` connections are served already
};

struct HelloReply {
  uint32_t version;
  uint32_t status;  // HelloStatus
  uint32_t limit;   // the cap, when refused for it
};

enum class Op : uint8_t {
  kWrite = 1,      // payload of `length` bytes -> (region, offset)
  kRead = 2,       // reply carries `length` bytes from (region, offset)
  kNotify = 3,     // aux = transfer uid: an inbound transfer of the initiator finished (see kNotifyOnSuccess)
  kGrant = 4,      // same-host direct access: reply GrantReply for (region, key)
  kRevokeAck = 5,  // aux = region id: the initiator dropped its grant
};

// Request.flags of a kWrite or kRead that is the whole of its transfer: aux is the transfer's
// uid, and the request, once it succeeds (the write's data in place, the read's reply sent),
// counts as the transfer's notification: no kNotify message follows.
constexpr uint8_t kNotifyOnSuccess = 1;

struct Request {
  uint8_t op;  // Op
  uint8_t flags;
  uint8_t pad[2];
  uint32_t region;
  uint64_t id;  // echoed in the reply
  uint64_t region_key;
  uint64_t offset;
  uint64_t length;
  uint64_t aux;
};
static_assert(sizeof(Request) == 48);

enum class ReplyKind : uint8_t {
  kReply = 1,   // answers request `id`
  kRevoke = 2,  // target -> initiator: region `id` is being deregistered; drop grants, ack
};

struct Reply {
  uint8_t kind;    // ReplyKind
  uint8_t status;  // StatusCode of the request
  uint16_t message_len;
  uint32_t pad;
  uint64_t id;
  uint64_t length;  // payload bytes that follow the message (READ data, GrantReply)
};
static_assert(sizeof(Reply) == 24);

// What a target tells a same-host initiator that may access a region directly
// (process_vm_readv/writev): where it is, and a token it can read to prove the two
// processes see the same memory (same pid namespace, ptrace allowed).
struct GrantReply {
  uint64_t pid;
  uint64_t addr;
  uint64_t size;
  uint64_t token_addr;
  uint8_t token[16];
};
static_assert(sizeof(GrantReply) == 48);

}  // namespace mori::io::wire
