// SPDX-License-Identifier: MIT
// Buffered reads from a blocking socket: small frames come out of one recv()
// each batch, large payloads go straight from the kernel into their destination
// (only the part that arrived with an earlier frame's recv() is copied).
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

namespace mori {

class SocketReader {
 public:
  explicit SocketReader(int fd, size_t buffer_bytes = 64 * 1024) : fd_(fd), buf_(buffer_bytes) {}

  // Sees the bytes of a read as they land, in order: [p, p + n) now holds them.
  using Landed = std::function<void(const char* p, size_t n)>;

  // Reads exactly n bytes into dst. Returns false on an orderly close before the
  // first byte; throws on errors or on a close in the middle. `landed`, when given, is told
  // of each part as it arrives (while the rest is still on its way).
  bool read(void* dst, size_t n, const Landed* landed = nullptr);
  // As read(), for a header the caller knows a large payload follows: when nothing is
  // buffered it receives these n bytes alone, so the payload's read finds the buffer
  // empty and receives straight into its destination (one more recv(), no copy).
  bool read_header(void* dst, size_t n);
  // The first n bytes of the next message, for a loop that serves one message after another
  // and sleeps in recv() between them (not in poll() and then recv(): a system call a message
  // fewer). As read_header() (`alone`) or read(), except that a connection idle for its receive
  // timeout (SO_RCVTIMEO) before the first byte is kIdle, not an error; once a byte of the
  // message has come, a timeout throws as read() does.
  enum class Next { kMessage, kClosed, kIdle };
  Next next(void* dst, size_t n, bool alone);
  // Reads and discards n bytes (the payload of a refused request).
  void skip(size_t n);
  // Payloads at least this long skip the buffer once it is empty: a copy of more
  // would cost more than the recv() it saves.
  static constexpr size_t kDirectBytes = 16 * 1024;

  // True while bytes already received wait in the buffer (poll() would not see them).
  bool buffered() const { return pos_ < end_; }

 private:
  // recv() into the buffer; returns bytes read (0 on orderly close).
  size_t fill();

  int fd_;
  std::vector<char> buf_;
  size_t pos_ = 0, end_ = 0;
};

}  // namespace mori
