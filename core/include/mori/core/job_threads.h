// SPDX-License-Identifier: MIT
// A few threads that run submitted jobs in turn, first come first served: work a caller hands
// off so that it need not wait for it (MORI-IO's same-host copies, the UMBP master's calls that
// wait on the interpreter lock or Redis). Jobs submitted before the destructor all run; the
// destructor waits for them.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mori {

class JobThreads {
 public:
  // threads: at least 1; name: the threads' name (name_thread), cut to 15 characters.
  JobThreads(int threads, const char* name);
  ~JobThreads();
  JobThreads(const JobThreads&) = delete;
  JobThreads& operator=(const JobThreads&) = delete;

  size_t size() const { return threads_.size(); }
  void submit(std::function<void()> job);

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace mori
