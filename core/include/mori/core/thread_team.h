// SPDX-License-Identifier: MIT
// A small persistent team of threads (EP's CPU kernels, UMBP's large copies): run(n, fn) calls fn(0..n-1)
// spread over the team (the calling thread works too) and returns when all are done.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mori {

class ThreadTeam {
 public:
  explicit ThreadTeam(int threads);
  ~ThreadTeam();
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Calls fn(i) for every i in [0, tasks); rethrows the first exception a task threw.
  void run(int tasks, const std::function<void(int)>& fn);

 private:
  void worker_loop();
  // Runs tasks of run `generation` until none is left to claim.
  void work(uint64_t generation, const std::function<void(int)>* fn, int tasks);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  uint64_t generation_ = 0;  // one per run()
  bool stop_ = false;
  const std::function<void(int)>* fn_ = nullptr;
  int tasks_ = 0;
  int finished_ = 0;  // of the current run: tasks done, or skipped after an error
  // The next task to claim, the low 32 bits of its run's generation in the upper 32: a worker
  // that wakes late claims nothing of a later run with an earlier run's function. run() waits
  // for the tasks, not for the workers: one that has not woken (its core busy elsewhere) by the
  // time the others took every task costs the caller nothing.
  std::atomic<uint64_t> next_{0};
  std::exception_ptr error_;
};

}  // namespace mori
