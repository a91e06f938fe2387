// SPDX-License-Identifier: MIT
// Sending one scatter/gather message on a tcp connection, as two sendmsg() calls of about half
// each where it is a little over one segment of loopback's 64 KiB MTU (MORI_IO_TCP_SEND_HALVES).
// A 64 KiB payload with its header goes as a full segment and a tail of a few bytes, and the
// receiver, woken by the first, then waits for the tail; as two halves it takes the first while
// the second is copied in. On the 16-core host (docs/io.md, Round 7) halves took 64 KiB transfers
// 5-8 % faster both ways, 96 KiB 0-8 %, were neutral at 128 KiB and slower from 32 to 48 KiB (one
// segment either way, and a second send's cost): so only messages above 64 KiB are halved.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstddef>

#include "mori/core/socket.h"
#include "src/network_ordered.h"

namespace mori::io {

// Messages larger than this may be halved: one loopback segment or less gains nothing from it.
constexpr size_t kSendHalvesFrom = 64 * 1024;

// Sends all of `msg` (its iov entries are consumed), in two halves where it holds more than
// kSendHalvesFrom and at most `halves_upto` bytes. `fail(errno)` is called on an error other
// than EINTR and must not return (it raises).
template <typename Fail>
void send_message(int fd, msghdr& msg, size_t halves_upto, Fail&& fail) {
  size_t total = 0;
  for (size_t i = 0; i < msg.msg_iovlen; ++i) total += msg.msg_iov[i].iov_len;
  size_t stop = total > kSendHalvesFrom && total <= halves_upto ? total / 2 : total;
  size_t sent = 0;
  while (msg.msg_iovlen > 0) {
    // Only up to `stop` in this call: the entry where it falls is cut there for the call.
    const size_t want = stop - sent;
    size_t n = 0, before = 0;
    while (n < msg.msg_iovlen && before + msg.msg_iov[n].iov_len < want) before += msg.msg_iov[n++].iov_len;
    msghdr part = msg;
    size_t whole = 0;
    const bool cut = n < msg.msg_iovlen;
    if (cut) {
      whole = msg.msg_iov[n].iov_len;
      msg.msg_iov[n].iov_len = want - before;
      part.msg_iovlen = n + 1;
    }
    ssize_t k;
    {
      NetworkOrderedAccess payload;  // registered memory, reused once the peer has answered
      k = ::sendmsg(fd, &part, MSG_NOSIGNAL);
    }
    if (cut) msg.msg_iov[n].iov_len = whole;
    if (k < 0) {
      if (errno == EINTR) continue;
      fail(errno);
      return;
    }
    net::advance_iov(msg, static_cast<size_t>(k));
    sent += static_cast<size_t>(k);
    if (sent == stop) stop = total;
  }
}

}  // namespace mori::io
