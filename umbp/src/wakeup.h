// SPDX-License-Identifier: MIT
// A wake-up flag a thread waits on (as Python's threading.Event) that C++ code can set without the
// interpreter lock: the distributed client's heartbeat thread waits on one, and commits made by the
// peer service's native put path set it (peer_puts.h).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace mori::umbp {

class Wakeup {
 public:
  void set() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      set_ = true;
    }
    cv_.notify_all();
  }
  void clear() {
    std::lock_guard<std::mutex> lk(mu_);
    set_ = false;
  }
  bool is_set() const {
    std::lock_guard<std::mutex> lk(mu_);
    return set_;
  }
  // True once set (at once if it is), false when timeout_s passed first.
  bool wait(double timeout_s) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, std::chrono::duration<double>(timeout_s), [this] { return set_; });
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool set_ = false;
};

}  // namespace mori::umbp
