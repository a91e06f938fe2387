// SPDX-License-Identifier: MIT
// The per-host server's transport: a Unix stream socket that carries wire::Frame messages, and
// at most one descriptor per message (SCM_RIGHTS). Every wait has a deadline; a negative
// deadline (server side, between requests) means none.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

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
// The receiving side of one connection. A frame's header and payload are read with one recvmsg
// where they arrived together (a peer sends both with one sendmsg: the usual case), instead of a
// read of the header and a read of the payload; bytes of a later frame that came with them stay
// buffered for the next call. A descriptor (SCM_RIGHTS) goes with the frame whose bytes
// carried it (the kernel ends a read with the message that carries one). Used by one thread.
class FrameReader {
 public:
  // `spin`: before it sleeps for a frame that is expected (a reply, the next request), the reader
  // busy-polls the socket this long (UMBP_SERVER_POLL_US; 0: never), within the process's
  // budget of pollers (mori/core/socket_spin.h).
  explicit FrameReader(std::chrono::microseconds spin = std::chrono::microseconds{0}) : spin_(spin) {}
  FrameReader(const FrameReader&) = delete;
  FrameReader& operator=(const FrameReader&) = delete;
  ~FrameReader() { reset(); }

  // The next frame: false on an orderly end before its first byte. Its header is waited for until
  // `header_deadline` (monotonic seconds, net::now(); < 0: no limit), its payload for
  // `payload_timeout_s` once the header is in (< 0: until header_deadline). `wait_first`: the frame
  // is not expected yet (the next request, a reply right after its request), so the read polls
  // first instead of trying a read that would find nothing. *payload points into this reader until
  // the next call. A descriptor sent with the frame is stored in *passed_fd (else -1; the caller
  // owns it). Checks magic, version and length (kInvalidArgument) before a byte of the payload is
  // read; kRemote when the peer closes in the middle of a frame, kTimeout past a deadline.
  bool next(int fd, wire::Frame* frame, const char** payload, int* passed_fd, double header_deadline,
            double payload_timeout_s, bool wait_first);
  void set_spin(std::chrono::microseconds spin) { spin_ = spin; }
  // Bytes received and not yet handed out (after a failed next(): > 0 when part of the frame came).
  size_t buffered() const { return end_ - begin_; }
  // Drops what is buffered (the connection was closed or replaced).
  void reset();

 private:
  // One recvmsg into the buffer's free tail (polling first when `wait_first`); false on an orderly end.
  bool fill(int fd, double deadline, bool wait_first);
  // Moves the unread bytes to the front and makes room for `bytes` of them.
  void make_room(size_t bytes);

  // Waits until `fd` is readable (spinning first for spin_), or throws kTimeout past `deadline`.
  void wait_readable(int fd, double deadline, const char* what);

  std::chrono::microseconds spin_;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;  // [begin_, end_): received, not yet handed out
  int fd_ = -1;                 // a received descriptor not yet handed out ...
  size_t fd_at_ = 0;            // ... and the last byte read with it (an offset in buf_)
};

}  // namespace mori::umbp
