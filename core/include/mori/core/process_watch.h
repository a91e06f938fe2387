// SPDX-License-Identifier: MIT
// Notices when a process on this host has exited (pidfd), so waits on a dead peer fail.
#pragma once

#include <functional>
#include <thread>
#include <vector>

namespace mori {

class ProcessWatch {
 public:
  ProcessWatch() = default;
  ~ProcessWatch();
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;

  // Starts watching `pid` under the caller's `key` (a PE number). Call before start().
  void watch(int key, int pid);
  // Whether the process watched under `key` has exited (false if not watched).
  bool exited(int key) const;
  // Runs a thread that calls on_exit(key) once for each watched process, as soon as it exits
  // (so a dead peer is noticed by operations that never wait, and wakes those that sleep).
  void start(std::function<void(int key)> on_exit);
  // Ends the thread (no call of on_exit after it returns) and forgets every process.
  void clear();

 private:
  void run();
  struct Entry {
    int key, pid, fd;
    bool reported;
  };
  std::vector<Entry> entries_;
  std::function<void(int)> on_exit_;
  std::thread thread_;
  int stop_fd_ = -1;  // eventfd that ends the thread
};

}  // namespace mori
