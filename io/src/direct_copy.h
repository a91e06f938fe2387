// SPDX-License-Identifier: MIT
// Same-host CPU memory without a socket: process_vm_readv/writev straight between the two
// processes' memory (one copy, done by the kernel). Large jobs run on worker threads,
// split so both cores copy; small ones on the caller's thread.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mori/io/direct_copy.h"  // DirectSegment, direct_copy()

namespace mori::io {

class DirectCopier {
 public:
  explicit DirectCopier(int threads);
  ~DirectCopier();
  DirectCopier(const DirectCopier&) = delete;
  DirectCopier& operator=(const DirectCopier&) = delete;

  size_t threads() const { return workers_.size(); }
  void submit(std::function<void()> job);

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace mori::io
