// SPDX-License-Identifier: MIT
#include "mori/core/socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <thread>

#include "mori/core/status.h"

namespace mori::net {

double now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static sockaddr_in resolve(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (host.empty() || host == "0.0.0.0") {
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
  } else if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
    if (rc != 0 || !res)
      raise(Status::kInvalidArgument, "cannot resolve host '%s': %s", host.c_str(), gai_strerror(rc));
    addr.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
    freeaddrinfo(res);
  }
  return addr;
}

UniqueFd listen_tcp(const std::string& host, int port, int* bound_port, int backlog) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) raise_errno("socket");
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr = resolve(host, port);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
    raise_errno("bind %s:%d", host.c_str(), port);
  if (listen(fd.get(), backlog) != 0) raise_errno("listen");
  socklen_t len = sizeof(addr);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  if (bound_port) *bound_port = ntohs(addr.sin_port);
  return fd;
}

// Whether a connected socket is connected to itself. While nothing listens on a port of this
// host's ephemeral range, a connect() to it can be given that very port as its own and then
// completes with itself (TCP's simultaneous open): a rank retrying to reach a store whose host
// has not bound its port yet would hold the port the store is about to bind.
static bool connected_to_itself(int fd) {
  sockaddr_in self{}, peer{};
  socklen_t a = sizeof(self), b = sizeof(peer);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&self), &a) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &b) != 0)
    return false;
  return self.sin_port == peer.sin_port && self.sin_addr.s_addr == peer.sin_addr.s_addr;
}

UniqueFd connect_tcp(const std::string& host, int port, double timeout_s, bool retry_refused) {
  sockaddr_in addr = resolve(host, port);
  double deadline = now() + timeout_s;
  int last_err = 0;
  while (true) {
    UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) raise_errno("socket");
    // So that a socket that met itself, once closed, leaves no TIME_WAIT that keeps the port
    // from the store's listener (which binds with SO_REUSEADDR too).
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      if (!connected_to_itself(fd.get())) {
        set_nodelay(fd.get());
        return fd;
      }
      errno = ECONNREFUSED;  // nothing listened there: the socket met itself (see connected_to_itself)
    }
    last_err = errno;
    fd.reset();
    if (last_err == ECONNREFUSED && !retry_refused)
      throw ConnectRefused(Status::kRemote,
                           format("%s:%d refused the connection (nothing listens there)", host.c_str(), port));
    if (now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  raise(Status::kTimeout, "could not connect to %s:%d within %.0f s: %s", host.c_str(), port, timeout_s,
        std::strerror(last_err));
}

void send_all(int fd, const void* buf, size_t n) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR) continue;
      raise_errno("send");
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
}

bool recv_all(int fd, void* buf, size_t n, double deadline) {
  char* p = static_cast<char*>(buf);
  size_t got = 0;
  while (got < n) {
    if (deadline >= 0) {
      double left = deadline - now();
      if (left <= 0) raise(Status::kTimeout, "timed out receiving from socket");
      pollfd pfd{fd, POLLIN, 0};
      int rc = poll(&pfd, 1, static_cast<int>(left * 1000) + 1);
      if (rc < 0 && errno != EINTR) raise_errno("poll");
      if (rc <= 0) continue;
    }
    ssize_t k = ::recv(fd, p + got, n - got, 0);
    if (k == 0) {
      if (got == 0) return false;
      raise(Status::kRemote, "connection closed in the middle of a message");
    }
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      raise_errno("recv");
    }
    got += static_cast<size_t>(k);
  }
  return true;
}

void advance_iov(struct msghdr& msg, size_t sent) {
  while (msg.msg_iovlen > 0 && sent >= msg.msg_iov->iov_len) {
    sent -= msg.msg_iov->iov_len;
    ++msg.msg_iov;
    --msg.msg_iovlen;
  }
  if (msg.msg_iovlen > 0) {
    msg.msg_iov->iov_base = static_cast<char*>(msg.msg_iov->iov_base) + sent;
    msg.msg_iov->iov_len -= sent;
  }
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void set_timeouts(int fd, double seconds) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(seconds);
  tv.tv_usec = static_cast<suseconds_t>((seconds - static_cast<double>(tv.tv_sec)) * 1e6);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

void set_liveness(int fd, double timeout_s) {
  // Probe after a quarter of the budget of silence, three probes spread over another quarter.
  int idle = std::max(1, std::min(60, static_cast<int>(timeout_s / 4)));
  int interval = std::max(1, std::min(20, static_cast<int>(timeout_s / 12)));
  int count = 3;
  int one = 1;
  unsigned user_timeout_ms = static_cast<unsigned>(std::max(1.0, timeout_s) * 1000);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
}

std::string peer_address(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  char buf[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &addr.sin_addr, buf, sizeof(buf));
  return std::string(buf) + ":" + std::to_string(ntohs(addr.sin_port));
}

}  // namespace mori::net
