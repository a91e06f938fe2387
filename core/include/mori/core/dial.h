// SPDX-License-Identifier: MIT
// The client side of every authenticated MORI service (bootstrap store, tcp transport, IO
// engine): connect, prove the shared secret (auth::client_handshake), say the service's hello,
// and try again until a deadline while a connection breaks on the way.
//
// Retrying matters because the accept side (net::Acceptor) evicts the oldest unauthenticated
// connection when strangers flood it, and that may be ours; a real peer comes back and gets in.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "mori/core/status.h"
#include "mori/core/unique_fd.h"

namespace mori::net {

struct DialOptions {
  std::string host;
  int port = 0;
  const void* secret = nullptr;  // the shared secret; never sent
  size_t secret_len = 0;
  std::string_view label;  // the service's auth label, e.g. "mori-store-v1"
  double deadline = 0;     // net::now() seconds by which the dial succeeds or fails
  double liveness_s = 0;   // > 0: net::set_liveness(fd, liveness_s) right after connecting
  double retry_pause_s = 0.05;
  // false: a refused connection fails the dial at once. For services whose listener exists
  // before anyone can know its address, where a refusal means the process is gone.
  bool retry_refused = true;
  // The service's own hello after authentication. Throw auth::Refused for a definite no (not
  // retried), mori::Error for a broken exchange (retried while time is left).
  std::function<void(int fd, double deadline)> greet;
};

// The final failure of a dial that was not refused: the last attempt's status and text.
class DialError : public Error {
 public:
  DialError(Status status, const std::string& what, bool reached) : Error(status, what), reached_(reached) {}
  // Whether the last attempt got a TCP connection (it then broke in the handshake or hello).
  bool reached() const { return reached_; }

 private:
  bool reached_;
};

// Returns a connected, authenticated, greeted socket. Throws auth::Refused (the peer said no:
// wrong secret, or `greet` refused), the original Error for a bad address (kInvalidArgument),
// and DialError when the deadline passes; callers add who they were dialling.
UniqueFd dial(const DialOptions& options);

}  // namespace mori::net
