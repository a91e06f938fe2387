// SPDX-License-Identifier: MIT
#include "mori/core/thread_team.h"

namespace mori {

ThreadTeam::ThreadTeam(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadTeam::~ThreadTeam() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

namespace {
constexpr uint64_t kIndexMask = 0xffffffffu;
}

void ThreadTeam::work(uint64_t generation, const std::function<void(int)>* fn, int tasks) {
  const uint64_t tag = (generation & kIndexMask) << 32;
  for (;;) {
    uint64_t cur = next_.load(std::memory_order_relaxed);
    do {
      if ((cur & ~kIndexMask) != tag || static_cast<int>(cur & kIndexMask) >= tasks) return;
    } while (!next_.compare_exchange_weak(cur, cur + 1, std::memory_order_relaxed));
    // A claimed task keeps its run from finishing: `fn` stays valid until it is done.
    std::exception_ptr err;
    try {
      (*fn)(static_cast<int>(cur & kIndexMask));
    } catch (...) {
      err = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu_);
    ++finished_;
    if (err) {
      if (!error_) error_ = err;
      // The tasks nobody claimed yet are skipped: claim them all and count them finished.
      uint64_t c = next_.load(std::memory_order_relaxed);
      while ((c & ~kIndexMask) == tag && static_cast<int>(c & kIndexMask) < tasks) {
        if (next_.compare_exchange_weak(c, tag | static_cast<uint64_t>(tasks), std::memory_order_relaxed)) {
          finished_ += tasks - static_cast<int>(c & kIndexMask);
          break;
        }
      }
    }
    if (finished_ == tasks) done_.notify_one();
  }
}

void ThreadTeam::worker_loop() {
  uint64_t seen = 0;
  while (true) {
    const std::function<void(int)>* fn;
    int tasks;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = fn_;
      tasks = tasks_;
    }
    work(seen, fn, tasks);
  }
}

void ThreadTeam::run(int tasks, const std::function<void(int)>& fn) {
  if (tasks <= 0) return;
  if (workers_.empty() || tasks == 1) {
    for (int i = 0; i < tasks; ++i) fn(i);
    return;
  }
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation = ++generation_;
    fn_ = &fn;
    tasks_ = tasks;
    finished_ = 0;
    error_ = nullptr;
    next_.store((generation & kIndexMask) << 32, std::memory_order_relaxed);
  }
  wake_.notify_all();
  work(generation, &fn, tasks);
  std::exception_ptr err;
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return finished_ == tasks; });
    err = error_;
    fn_ = nullptr;
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace mori
