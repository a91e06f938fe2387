// SPDX-License-Identifier: MIT
#include "mori/core/dial.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "mori/core/auth.h"
#include "mori/core/socket.h"

namespace mori::net {

UniqueFd dial(const DialOptions& o) {
  while (true) {
    bool reached = false;
    try {
      UniqueFd fd = connect_tcp(o.host, o.port, std::max(0.1, o.deadline - now()), o.retry_refused);
      reached = true;
      if (o.liveness_s > 0) set_liveness(fd.get(), o.liveness_s);
      auth::client_handshake(fd.get(), o.secret, o.secret_len, o.label, o.deadline);
      if (o.greet) o.greet(fd.get(), o.deadline);
      return fd;
    } catch (const auth::Refused&) {
      throw;  // a definite no: no retry changes it
    } catch (const ConnectRefused& e) {
      throw DialError(e.status(), e.what(), false);
    } catch (const Error& e) {
      if (e.status() == Status::kInvalidArgument || e.status() == Status::kInvalidUsage) throw;
      // A timeout means the deadline passed inside the attempt.
      if (e.status() == Status::kTimeout || now() + o.retry_pause_s >= o.deadline)
        throw DialError(e.status(), e.what(), reached);
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(o.retry_pause_s));
  }
}

}  // namespace mori::net
