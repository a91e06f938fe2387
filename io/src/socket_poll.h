// SPDX-License-Identifier: MIT
// MORI_IO_TCP_POLL_US: where the host has cores to spare, a target's connection thread and an
// initiator's caller waiting for a reply busy-poll their socket for a bounded window before
// they sleep in the kernel (poll_readable, core/socket_spin.h; recv_polling below). What it saves is the wake-up of a
// thread asleep in poll()/recv(), once for the request (target) and once for the reply (initiator), and once per
// segment of a large payload that arrives while the receiver copies the previous one.
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>

#include "mori/core/socket_reader.h"
#include "mori/core/socket_spin.h"
#include "mori/core/status.h"

namespace mori::io {

// MORI_IO_TCP_POLL_US "auto": a process that may run on this many CPUs polls; below it (the
// 2-core CI machine) a poller would take the core its peer process needs to answer.
constexpr int kPollAutoMinCpus = 8;
constexpr int kPollAutoUs = 50;
// MORI_IO_TCP_LANES "auto": four connections per peer where as many CPUs can receive on them
// (bulk transfers striped over four), two on smaller machines.
constexpr int kLanesAutoMinCpus = kPollAutoMinCpus;
constexpr int kLanesAuto = 4, kLanesSmall = 2;
// MORI_IO_TCP_STRIPE_FROM "auto": striped from 192 KiB where as many CPUs can copy on the lanes;
// on smaller machines only above the chunk. Two CPUs already copy both ends of one connection
// side by side, so a second lane only adds hand-offs (docs/io.md, Round 13).
constexpr int kStripeAutoMinCpus = kPollAutoMinCpus;
constexpr size_t kStripeAutoBytes = 192 * 1024;

// Receives up to `n` bytes of a payload into `dst` without sleeping: what has arrived, and
// what arrives while it polls, until `window` passes with nothing new. Returns the bytes
// received; the caller's blocking read takes the rest (and reports a close). Call it only
// when the connection's SocketReader holds nothing buffered. `landed`: as SocketReader::read's.
inline size_t recv_polling(int fd, char* dst, size_t n, std::chrono::microseconds window,
                           const SocketReader::Landed* landed = nullptr) {
  if (window.count() <= 0 || n == 0) return 0;
  SpinTicket ticket(socket_spin_budget());
  if (!ticket) return 0;
  size_t got = 0;
  auto until = std::chrono::steady_clock::now() + window;
  while (got < n) {
    ssize_t k = ::recv(fd, dst + got, n - got, MSG_DONTWAIT);
    if (k > 0) {
      if (landed) (*landed)(dst + got, static_cast<size_t>(k));
      got += static_cast<size_t>(k);
      until = std::chrono::steady_clock::now() + window;  // the window runs from the last byte
      continue;
    }
    if (k == 0) break;  // closed: the blocking read says so
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) raise_errno("tcp recv");
    if (std::chrono::steady_clock::now() >= until) break;
    cpu_relax();
  }
  return got;
}

}  // namespace mori::io
