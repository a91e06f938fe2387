// SPDX-License-Identifier: MIT
#include "src/unix_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "mori/core/socket.h"
#include "mori/core/socket_spin.h"
#include "mori/core/status.h"

namespace mori::umbp {
namespace {

sockaddr_un socket_address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  MORI_CHECK_ARG(!path.empty() && path.size() < sizeof(addr.sun_path),
                 "unix socket path '%s' must be 1..%zu characters", path.c_str(), sizeof(addr.sun_path) - 1);
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

// Waits until fd is ready for `events` or the deadline passes (kTimeout).
void wait_ready(int fd, short events, double deadline, const char* what) {
  while (true) {
    int ms = -1;
    if (deadline >= 0) {
      const double left = deadline - net::now();
      if (left <= 0) raise(Status::kTimeout, "timed out %s", what);
      ms = static_cast<int>(left * 1000) + 1;
    }
    pollfd pfd{fd, events, 0};
    const int rc = ::poll(&pfd, 1, ms);
    if (rc > 0) return;  // ready, or an error/hangup the next call reports
    if (rc < 0 && errno != EINTR) raise_errno("poll");
  }
}

}  // namespace

std::string unix_socket_path(const std::string& address) {
  constexpr std::string_view kScheme = "unix://";
  std::string path = address;
  if (path.rfind(kScheme, 0) == 0) path = path.substr(kScheme.size());
  MORI_CHECK_ARG(!path.empty() && path[0] == '/',
                 "standalone_process.address must be unix:///absolute/path.sock (got '%s')", address.c_str());
  return path;
}

int listen_unix(const std::string& path) {
  sockaddr_un addr = socket_address(path);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) raise_errno("socket(AF_UNIX)");
  ::unlink(path.c_str());  // a dead server's socket: the caller holds the path's lock
  // Created 0600 from the start (umask), then made so explicitly: no window where others connect.
  const mode_t old_mask = ::umask(0177);
  const int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  const int err = errno;
  ::umask(old_mask);
  if (rc != 0) {
    ::close(fd);
    errno = err;
    raise_errno("bind %s", path.c_str());
  }
  ::chmod(path.c_str(), 0600);
  if (::listen(fd, 256) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    raise_errno("listen %s", path.c_str());
  }
  return fd;
}

int connect_unix(const std::string& path) {
  sockaddr_un addr = socket_address(path);
  // Non-blocking: a server whose backlog is full (stopped, swamped) makes connect() fail with
  // EAGAIN instead of blocking past every deadline. The calls below poll when it is not ready.
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) raise_errno("socket(AF_UNIX)");
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

PeerCred peer_cred(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) raise_errno("getsockopt(SO_PEERCRED)");
  return PeerCred{cred.pid, cred.uid, cred.gid};
}

void send_frame(int fd, wire::Frame frame, const void* payload, int pass_fd, double deadline) {
  iovec iov[2] = {{&frame, sizeof(frame)}, {const_cast<void*>(payload), frame.length}};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = frame.length > 0 ? 2 : 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (pass_fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  }
  size_t left = sizeof(frame) + frame.length;
  // Sent at once where the socket has room (the usual case: no poll first); poll only when full.
  while (left > 0) {
    const ssize_t k = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        wait_ready(fd, POLLOUT, deadline, "sending a request");
        continue;
      }
      if (errno == EPIPE || errno == ECONNRESET) raise(Status::kRemote, "the other end closed the connection");
      raise_errno("sendmsg");
    }
    left -= static_cast<size_t>(k);
    net::advance_iov(msg, static_cast<size_t>(k));
    msg.msg_control = nullptr;  // the descriptor went with the first byte
    msg.msg_controllen = 0;
  }
}

bool FrameReader::fill(int fd, double deadline, bool wait_first) {
  // Waiting is poll's, never a blocking recvmsg's: a reader asleep in recvmsg is woken each time
  // the other end consumes what this end sent (the socket's write-space wake-up, which poll's
  // POLLIN filters out), and runs for nothing: a spurious wake-up and two context switches per
  // request, measured on the per-host server's connection threads.
  if (wait_first) wait_readable(fd, deadline, begin_ == end_ ? "waiting for a reply" : "receiving a message");
  const int flags = MSG_CMSG_CLOEXEC | MSG_DONTWAIT;
  while (true) {
    iovec iov{buf_.data() + end_, buf_.size() - end_};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t k = ::recvmsg(fd, &msg, flags);
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        wait_readable(fd, deadline, begin_ == end_ ? "waiting for a reply" : "receiving a message");
        continue;
      }
      if (errno == ECONNRESET) raise(Status::kRemote, "the other end reset the connection");
      raise_errno("recvmsg");
    }
    // Keep the first descriptor that arrives; close any other (a frame carries one at most).
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n; ++i) {
        int f;
        std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (fd_ < 0 && k > 0) {
          fd_ = f;
          fd_at_ = end_ + static_cast<size_t>(k) - 1;
        } else {
          ::close(f);
        }
      }
    }
    end_ += static_cast<size_t>(k);
    return k > 0;
  }
}

void FrameReader::wait_readable(int fd, double deadline, const char* what) {
  if (poll_readable(fd, spin_)) return;
  wait_ready(fd, POLLIN, deadline, what);
}

void FrameReader::make_room(size_t bytes) {
  if (begin_ > 0) {
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    if (fd_ >= 0) fd_at_ -= begin_;
    begin_ = 0;
  }
  // Room for a small request's header and payload, and whatever came after them, from the start.
  constexpr size_t kInitial = size_t{64} << 10;
  if (buf_.size() < bytes || buf_.size() < kInitial) buf_.resize(std::max(bytes, kInitial));
}

bool FrameReader::next(int fd, wire::Frame* frame, const char** payload, int* passed_fd, double header_deadline,
                       double payload_timeout_s, bool wait_first) {
  *passed_fd = -1;
  *payload = nullptr;
  constexpr size_t kHead = sizeof(wire::Frame);
  if (buffered() < kHead) {
    make_room(kHead);
    while (buffered() < kHead) {
      if (!fill(fd, header_deadline, wait_first && buffered() == 0)) {
        if (buffered() == 0) return false;
        raise(Status::kRemote, "the connection closed in the middle of a message");
      }
    }
  }
  std::memcpy(frame, buf_.data() + begin_, kHead);
  if (frame->magic != wire::kMagic)
    raise(Status::kInvalidArgument, "not a MORI-UMBP frame (magic 0x%08x)", frame->magic);
  if (frame->version != wire::kVersion)
    raise(Status::kInvalidArgument, "protocol version %u, this side speaks %u", frame->version, wire::kVersion);
  if (frame->length > wire::kMaxPayload)
    raise(Status::kInvalidArgument, "a payload of %u bytes exceeds the limit of %zu", frame->length, wire::kMaxPayload);
  const size_t whole = kHead + frame->length;
  if (buffered() < whole) {
    if (buf_.size() - begin_ < whole) make_room(whole);
    const double deadline = payload_timeout_s >= 0 ? net::now() + payload_timeout_s : header_deadline;
    while (buffered() < whole)
      if (!fill(fd, deadline, false)) raise(Status::kRemote, "the connection closed in the middle of a message");
  }
  *payload = buf_.data() + begin_ + kHead;
  if (fd_ >= 0 && fd_at_ < begin_ + whole) {
    *passed_fd = fd_;
    fd_ = -1;
  }
  begin_ += whole;
  // Nothing left: the next frame is read from the front (the payload stays valid until then).
  if (begin_ == end_) begin_ = end_ = 0;
  return true;
}

void FrameReader::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  begin_ = end_ = 0;
}

}  // namespace mori::umbp
