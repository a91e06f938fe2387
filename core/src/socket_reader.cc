// SPDX-License-Identifier: MIT
#include "mori/core/socket_reader.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "mori/core/status.h"

namespace mori {

size_t SocketReader::fill() {
  if (pos_ == end_) pos_ = end_ = 0;
  while (true) {
    ssize_t k = ::recv(fd_, buf_.data() + end_, buf_.size() - end_, 0);
    if (k >= 0) {
      end_ += static_cast<size_t>(k);
      return static_cast<size_t>(k);
    }
    if (errno == EINTR) continue;
    raise_errno("tcp recv");
  }
}

bool SocketReader::read(void* dst, size_t n, const Landed* landed) {
  char* out = static_cast<char*>(dst);
  size_t got = 0;
  while (got < n) {
    if (pos_ < end_) {
      size_t take = std::min(n - got, end_ - pos_);
      std::memcpy(out + got, buf_.data() + pos_, take);
      pos_ += take;
      if (landed) (*landed)(out + got, take);
      got += take;
      continue;
    }
    size_t want = n - got;
    if (want >= kDirectBytes || want >= buf_.size() / 2) {
      // Large payload: let the kernel copy straight into the destination.
      ssize_t k = ::recv(fd_, out + got, want, 0);
      if (k < 0) {
        if (errno == EINTR) continue;
        raise_errno("tcp recv");
      }
      if (k == 0) {
        if (got == 0) return false;
        raise(Status::kRemote, "connection closed in the middle of a %zu-byte message", n);
      }
      if (landed) (*landed)(out + got, static_cast<size_t>(k));
      got += static_cast<size_t>(k);
      continue;
    }
    if (fill() == 0) {
      if (got == 0) return false;
      raise(Status::kRemote, "connection closed in the middle of a %zu-byte message", n);
    }
  }
  return true;
}

bool SocketReader::read_header(void* dst, size_t n) {
  if (pos_ < end_) return read(dst, n);
  char* out = static_cast<char*>(dst);
  size_t got = 0;
  while (got < n) {
    ssize_t k = ::recv(fd_, out + got, n - got, 0);
    if (k < 0) {
      if (errno == EINTR) continue;
      raise_errno("tcp recv");
    }
    if (k == 0) {
      if (got == 0) return false;
      raise(Status::kRemote, "connection closed in the middle of a %zu-byte message", n);
    }
    got += static_cast<size_t>(k);
  }
  return true;
}

SocketReader::Next SocketReader::next(void* dst, size_t n, bool alone) {
  if (pos_ == end_) {
    char* out = static_cast<char*>(dst);
    ssize_t k;
    do {
      k = alone ? ::recv(fd_, out, n, 0) : ::recv(fd_, buf_.data(), buf_.size(), 0);
    } while (k < 0 && errno == EINTR);
    if (k < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Next::kIdle;
      raise_errno("tcp recv");
    }
    if (k == 0) return Next::kClosed;
    if (alone) {
      const size_t got = static_cast<size_t>(k);
      if (got < n && !read_header(out + got, n - got))
        raise(Status::kRemote, "connection closed in the middle of a %zu-byte message", n);
      return Next::kMessage;
    }
    pos_ = 0;
    end_ = static_cast<size_t>(k);
  }
  return read(dst, n) ? Next::kMessage : Next::kClosed;
}

void SocketReader::skip(size_t n) {
  while (n > 0) {
    if (pos_ == end_ && fill() == 0) raise(Status::kRemote, "connection closed in the middle of a payload");
    size_t take = std::min(n, end_ - pos_);
    pos_ += take;
    n -= take;
  }
}

}  // namespace mori
