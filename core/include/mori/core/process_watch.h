// SPDX-License-Identifier: MIT
// Notices when a process on this host has exited (pidfd), so waits on a dead peer fail.
#pragma once

#include <vector>

namespace mori {

class ProcessWatch {
 public:
  ProcessWatch() = default;
  ~ProcessWatch();
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;

  // Starts watching `pid` under the caller's `key` (a PE number).
  void watch(int key, int pid);
  // Whether the process watched under `key` has exited (false if not watched).
  bool exited(int key) const;
  void clear();

 private:
  struct Entry {
    int key, pid, fd;
  };
  std::vector<Entry> entries_;
};

}  // namespace mori
