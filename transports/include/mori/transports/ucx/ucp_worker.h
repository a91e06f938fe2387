// SPDX-License-Identifier: MIT
// One UCP context and worker with its own progress thread. MORI's callers never
// drive UCX progress, and UCX's tcp and shared-memory transports emulate RMA and
// atomics in software on the target, so every worker is progressed by a thread
// that sleeps on the worker's event fd (ucp_worker_arm) and is woken by traffic or
// by ucp_worker_signal. Used by transports/ucx and by io/'s RDMA backend.
//
// Thread mode: UCS_THREAD_MODE_MULTI. Two threads touch the worker (the caller's and
// the progress thread); UCX's worker lock is held per call, where a mutex of ours would
// have to be held across a whole wait to the same end. A caller waits for its request
// by progressing for a few microseconds (the progress thread steps aside meanwhile),
// then hands progress back to the progress thread and sleeps until that thread has
// progressed something: on a crowded machine a spinning caller took the core from the
// very thread (a peer's, or its own) that had to deliver the reply.
//
// An owner may instead keep its UCP objects to the progress thread alone (io's RDMA backend):
// it hands that thread work (submit, call) and never calls UCP itself.
#pragma once

#if MORI_HAVE_UCX_HEADERS

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mori/transports/ucx/ucp_library.h"

namespace mori::ucx {

class UcpWorker {
 public:
  struct Options {
    std::string owner;  // for logs and errors: "shmem PE 3", "io engine x"
    // UCP settings applied with ucp_config_modify over the user's UCX_* environment
    // (which stays untouched); a setting this UCX does not know is logged and skipped.
    std::vector<std::pair<std::string, std::string>> config;
    uint64_t features = 0;  // UCP_FEATURE_* (WAKEUP is always added)
    // Runs on the progress thread every `periodic_s` seconds (0: never).
    std::function<void()> periodic;
    double periodic_s = 0;
    // Runs after a progress call that did something (e.g. ring waiters' doorbells).
    std::function<void()> on_progress;
    // Asked on the progress thread before it sleeps on the worker's event fd: the longest it
    // may sleep, in seconds (0: progress again at once; negative: no limit). For owners with
    // operations in flight whose completion UCX may not signal on the fd (large shared-memory
    // puts signal none).
    std::function<double()> max_sleep_s;
  };

  // Throws mori::Error when the context or worker cannot be created.
  UcpWorker(const Ucp& api, Options options);
  ~UcpWorker();
  UcpWorker(const UcpWorker&) = delete;
  UcpWorker& operator=(const UcpWorker&) = delete;

  const Ucp& api() const { return api_; }
  ucp_context_h context() const { return context_; }
  ucp_worker_h worker() const { return worker_; }
  const std::string& owner() const { return options_.owner; }
  // This worker's address, to be sent to peers (ucp_ep_create's remote address).
  const std::string& address() const { return address_; }
  // UCS_MEMORY_TYPE_* bits UCX can reach here (ucp_context_query).
  uint64_t memory_types() const { return memory_types_; }

  // One ucp_worker_progress (none when another thread is progressing: returns 0); runs
  // on_progress when it did something.
  unsigned progress();
  // Waits for a request of a *_nbx call (a status pointer): progresses until it
  // completes, `give_up()` says so, or `timeout_s` passes. Returns its status and frees
  // it; UCS_ERR_TIMED_OUT / UCS_ERR_CANCELED leave it to release() (see there).
  ucs_status_t wait(ucs_status_ptr_t request, double timeout_s, const std::function<bool()>& give_up = {});
  // The same for any condition that progress makes true (an answer arrived): UCS_OK once
  // `done()`, UCS_ERR_CANCELED when `give_up()`, UCS_ERR_TIMED_OUT after `timeout_s`.
  ucs_status_t wait_for(const std::function<bool()>& done, double timeout_s, const std::function<bool()>& give_up = {});
  // Frees a request that wait() gave up on, once whatever could still complete it is
  // gone (its endpoint force-closed): progresses briefly so UCX finishes it, then frees.
  void release(ucs_status_ptr_t request);
  // A caller that progresses the worker itself for a while (a PE waiting in the library,
  // serving its peers' RMA): the progress thread stands aside until the last one ends. It
  // takes over at once when that caller will sleep next (`will_sleep`: nobody else would
  // progress), else within a few ms (ucp_worker.cc: kStandAsideMaxS): a caller that polls
  // in a loop (put, quiet, put, ...) would otherwise wake it between every two calls, for
  // nothing.
  void begin_polling();
  void end_polling(bool will_sleep);
  // A caller posts an operation (a put, say): like a poll, it keeps the progress thread
  // aside at its next look, so that it does not wake for each completion of what the caller
  // posts and take UCX's worker lock from under it; the caller's quiet progresses them. (No
  // scope: a caller that then sleeps in wait() must hand progress back at once.)
  void note_call() { polls_begun_.fetch_add(1, std::memory_order_relaxed); }
  // Whether wait() keeps progressing while progress does something (set when this PE has
  // a core of its own) or sleeps after a short spin whatever happens.
  void set_spin_while_busy(bool on) { spin_while_busy_.store(on, std::memory_order_relaxed); }
  // Runs fn on the progress thread at its next round, in submission order. Throws once
  // stop() began (the owner is closing).
  void submit(std::function<void()> fn);
  // Runs fn on the progress thread and waits for it; its exception comes back here. On the
  // progress thread itself, runs it at once.
  void call(const std::function<void()>& fn);
  // Starts the progress thread (after the owner has set up what its callbacks use).
  void start();
  // Stops the progress thread (idempotent); the worker stays usable by the caller. Work
  // submitted before runs first.
  void stop();
  // Stops the progress thread and destroys the worker, which purges what its endpoints still
  // hold, UCX's own requests included (a peer's transfer half served, say). Those may use
  // memory registered in the context: unmap it only after this (UCX calls into a freed
  // registration otherwise). The context stays until the destructor. Idempotent.
  void destroy_worker();

 private:
  void run();
  // Runs the submitted work (progress thread); says whether there was any.
  bool run_submitted();

  const Ucp& api_;
  Options options_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::string address_;
  uint64_t memory_types_ = 0;
  int efd_ = -1;
  // Wakes sleepers of wait() after a progress call that did something.
  void wake_sleepers();

  std::atomic<bool> stop_{false};
  std::atomic<uint32_t> spinners_{0};     // callers progressing the worker (futex word: run() sleeps on it)
  std::atomic<uint32_t> sleepers_{0};     // callers sleeping in wait()
  std::atomic<bool> aside_{false};        // the progress thread sleeps on spinners_
  std::atomic<uint32_t> polls_begun_{0};  // begin_polling calls, so far
  std::atomic<bool> spin_while_busy_{false};
  std::atomic<bool> hand_over_{false};    // the last polling caller went to sleep: take over
  std::atomic<uint32_t> progressed_{0};   // bumped for sleepers after progress did something (futex word)
  std::atomic<bool> progressing_{false};  // a thread is inside ucp_worker_progress
  std::mutex work_mu_;
  std::deque<std::function<void()>> work_;  // submitted, for the progress thread
  std::atomic<bool> has_work_{false};       // work_ is not empty (read without the lock)
  bool closing_ = false;                    // stop() began: no more submissions
  std::thread thread_;
};

}  // namespace mori::ucx

#endif  // MORI_HAVE_UCX_HEADERS
