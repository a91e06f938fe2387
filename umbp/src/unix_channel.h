// SPDX-License-Identifier: MIT
// The per-host server's transport: a Unix stream socket that carries wire::Frame messages, and
// at most one descriptor per message (SCM_RIGHTS). Every wait has a deadline; a negative
// deadline (server side, between requests) means none.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "src/standalone_wire.h"

namespace mori::umbp {

// "unix:///run/x.sock" or a bare absolute path -> the path. Anything else throws
// kInvalidArgument naming the address.
std::string unix_socket_path(const std::string& address);

// Binds and listens at `path` with mode 0600 (the caller holds the path's lock, so any file
// there is a dead server's and is replaced). Returns the listening descriptor.
int listen_unix(const std::string& path);
// Connects to `path` (a non-blocking descriptor); -1 with errno set: ENOENT or ECONNREFUSED when
// nobody listens there, EAGAIN when the listener's backlog is full.
int connect_unix(const std::string& path);

struct PeerCred {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};
// The credentials the kernel recorded for the other end of a connected Unix socket.
PeerCred peer_cred(int fd);

// Sends a frame and its payload; `pass_fd` >= 0 rides along as SCM_RIGHTS. Throws kTimeout
// past `deadline` (monotonic seconds, net::now()), kRemote when the peer is gone.
void send_frame(int fd, wire::Frame frame, const void* payload, int pass_fd, double deadline);
// Receives a frame header: false on an orderly end before any byte. A descriptor sent with it
// is stored in *passed_fd (else -1; the caller owns it). Checks magic, version and length.
bool recv_frame(int fd, wire::Frame* frame, int* passed_fd, double deadline);
// Receives exactly n bytes (a payload) before `deadline`.
void recv_payload(int fd, void* buf, size_t n, double deadline);

}  // namespace mori::umbp
