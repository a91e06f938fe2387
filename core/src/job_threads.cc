// SPDX-License-Identifier: MIT
#include "mori/core/job_threads.h"

#include <algorithm>

#include "mori/core/thread_name.h"

namespace mori {

JobThreads::JobThreads(int threads, const char* name) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back([this] { loop(); });
    name_thread(threads_.back(), name);
  }
}

JobThreads::~JobThreads() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void JobThreads::submit(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void JobThreads::loop() {
  while (true) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and every job has run
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace mori
