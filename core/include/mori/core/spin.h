// SPDX-License-Identifier: MIT
// Bounded busy-polling, the part of a spin-then-sleep wait that shmem's waits (shmem's
// tuned_wait.h, runtime_wait.h) and MORI-IO's tcp threads share. A thread that polls instead
// of sleeping saves its wake-up (a few to tens of microseconds when the core had halted) and
// holds a core meanwhile, which pays only where the process has cores to spare: usable_cpus()
// says how many it may run on, a SpinBudget caps how many of its threads poll at once.
#pragma once

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>

namespace mori {

// CPUs this process may run on: its affinity mask (taskset, a container's cpuset), else the
// online count. Not hardware_concurrency(), which ignores the mask.
inline int usable_cpus() {
  cpu_set_t cpus;
  int n = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 0;
  if (n <= 0) n = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return n > 0 ? n : 1;
}

// One busy-poll step: tells the core (and its hyper-thread sibling) that this is a spin.
inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls `ready` until it holds (true) or `until` passes (false), relaxing between polls and
// reading the clock once every `polls_per_clock` polls (a clock read costs more than a cheap
// poll). A poll that is a system call itself wants polls_per_clock 1.
template <typename Pred>
bool spin_until(Pred ready, std::chrono::steady_clock::time_point until, int polls_per_clock = 64) {
  for (int i = 1;; ++i) {
    if (ready()) return true;
    if (i % polls_per_clock == 0 && std::chrono::steady_clock::now() >= until) return ready();
    cpu_relax();
  }
}

// Caps how many threads busy-poll at once: each holds a core while it polls, and a process
// whose pollers outnumber its spare cores slows the threads that do the work. A thread that
// gets no place sleeps at once, as without polling.
class SpinBudget {
 public:
  explicit SpinBudget(int places) : free_(places) {}
  bool take() {
    int n = free_.load(std::memory_order_relaxed);
    while (n > 0)
      if (free_.compare_exchange_weak(n, n - 1, std::memory_order_acquire, std::memory_order_relaxed)) return true;
    return false;
  }
  void give() { free_.fetch_add(1, std::memory_order_release); }

 private:
  std::atomic<int> free_;
};

// A place in a SpinBudget for as long as it lives (none: `*this` is false).
class SpinTicket {
 public:
  explicit SpinTicket(SpinBudget& b) : b_(b.take() ? &b : nullptr) {}
  ~SpinTicket() {
    if (b_) b_->give();
  }
  SpinTicket(const SpinTicket&) = delete;
  SpinTicket& operator=(const SpinTicket&) = delete;
  explicit operator bool() const { return b_ != nullptr; }

 private:
  SpinBudget* b_;
};

}  // namespace mori
