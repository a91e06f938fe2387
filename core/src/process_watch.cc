// SPDX-License-Identifier: MIT
#include "mori/core/process_watch.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>

#include "mori/core/status.h"
#include "mori/core/thread_name.h"

namespace mori {

namespace {

constexpr int kFallbackPollMs = 100;  // without pidfds, how often the thread looks at /proc

bool gone_without_pidfd(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (std::getline(f, line)) {
    auto close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z') return true;
  }
  return false;
}

}  // namespace

ProcessWatch::~ProcessWatch() { clear(); }

void ProcessWatch::watch(int key, int pid) {
  int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  entries_.push_back(Entry{key, pid, fd, false});
}

bool ProcessWatch::exited(int key) const {
  for (const Entry& e : entries_) {
    if (e.key != key) continue;
    if (e.fd < 0) return gone_without_pidfd(e.pid);
    // A pidfd becomes readable once the process has terminated (zombies included).
    pollfd p{e.fd, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
  }
  return false;
}

void ProcessWatch::start(std::function<void(int)> on_exit) {
  if (thread_.joinable() || entries_.empty()) return;
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  if (stop_fd_ < 0) raise_errno("eventfd for the process watch");
  on_exit_ = std::move(on_exit);
  thread_ = std::thread([this] { run(); });
  name_thread(thread_, "mori-watch");
}

void ProcessWatch::run() {
  while (true) {
    std::vector<pollfd> fds{{stop_fd_, POLLIN, 0}};
    std::vector<Entry*> polled;
    bool fallback = false;
    for (Entry& e : entries_) {
      if (e.reported) continue;
      if (e.fd >= 0) {
        fds.push_back({e.fd, POLLIN, 0});
        polled.push_back(&e);
      } else {
        fallback = true;
      }
    }
    if (polled.empty() && !fallback) {
      // Everyone reported: wait for the stop only.
      pollfd stop{stop_fd_, POLLIN, 0};
      while (poll(&stop, 1, -1) < 0 && errno == EINTR) {
      }
      return;
    }
    int n = poll(fds.data(), fds.size(), fallback ? kFallbackPollMs : -1);
    if (n < 0 && errno != EINTR) return;
    if (fds[0].revents) return;
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents) {
        polled[i - 1]->reported = true;
        on_exit_(polled[i - 1]->key);
      }
    if (fallback)
      for (Entry& e : entries_)
        if (!e.reported && e.fd < 0 && gone_without_pidfd(e.pid)) {
          e.reported = true;
          on_exit_(e.key);
        }
  }
}

void ProcessWatch::clear() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!write(stop_fd_, &one, sizeof(one));  // an eventfd write of 8 bytes cannot fail here
    thread_.join();
  }
  if (stop_fd_ >= 0) close(stop_fd_);
  stop_fd_ = -1;
  for (Entry& e : entries_)
    if (e.fd >= 0) close(e.fd);
  entries_.clear();
}

}  // namespace mori
