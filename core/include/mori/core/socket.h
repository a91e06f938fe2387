// SPDX-License-Identifier: MIT
// Small RAII helpers over blocking TCP sockets with deadlines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <sys/socket.h>

#include "mori/core/status.h"
#include "mori/core/unique_fd.h"

namespace mori::net {

// Monotonic seconds.
double now();

// Listens on host:port (port 0 = any free port); stores the bound port.
UniqueFd listen_tcp(const std::string& host, int port, int* bound_port, int backlog = 256);
// A refused connection when the caller asked not to retry one (kRemote).
class ConnectRefused : public Error {
 public:
  using Error::Error;
};
// Connects, retrying refused connections until timeout_s, or throws Timeout; with
// retry_refused=false a refusal (nothing listens on the port) throws ConnectRefused at once.
// Authenticated services dial through net::dial (dial.h) instead.
UniqueFd connect_tcp(const std::string& host, int port, double timeout_s, bool retry_refused = true);

// Full reads/writes. recv_all returns false on orderly EOF before any byte; throws on errors
// or on EOF mid-message. A negative deadline means no deadline.
void send_all(int fd, const void* buf, size_t n);
bool recv_all(int fd, void* buf, size_t n, double deadline = -1);

void set_nodelay(int fd);
// Blocking send()/recv() on fd fail with EAGAIN after `seconds` without progress.
void set_timeouts(int fd, double seconds);

// Drops the first `sent` bytes from a scatter/gather message after a partial sendmsg().
void advance_iov(struct msghdr& msg, size_t sent);
// Makes a silent peer (host gone, link down) an error on this socket within about
// timeout_s: TCP keepalive probes on idle connections, TCP_USER_TIMEOUT on unacknowledged data.
void set_liveness(int fd, double timeout_s);
// "ip:port" of the other end of a connected socket ("?" if unknown).
std::string peer_address(int fd);

}  // namespace mori::net
