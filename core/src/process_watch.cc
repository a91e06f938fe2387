// SPDX-License-Identifier: MIT
#include "mori/core/process_watch.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <string>

namespace mori {

ProcessWatch::~ProcessWatch() { clear(); }

void ProcessWatch::watch(int key, int pid) {
  int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  entries_.push_back(Entry{key, pid, fd});
}

bool ProcessWatch::exited(int key) const {
  for (const Entry& e : entries_) {
    if (e.key != key) continue;
    if (e.fd >= 0) {
      // A pidfd becomes readable once the process has terminated (zombies included).
      pollfd p{e.fd, POLLIN, 0};
      return poll(&p, 1, 0) > 0;
    } else {
      // No pidfd support: fall back to kill(0) plus the zombie state in /proc.
      if (kill(e.pid, 0) != 0 && errno == ESRCH) return true;
      std::ifstream f("/proc/" + std::to_string(e.pid) + "/stat");
      std::string line;
      if (std::getline(f, line)) {
        auto close = line.rfind(')');
        if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z') return true;
      }
      return false;
    }
  }
  return false;
}

void ProcessWatch::clear() {
  for (Entry& e : entries_)
    if (e.fd >= 0) close(e.fd);
  entries_.clear();
}

}  // namespace mori
