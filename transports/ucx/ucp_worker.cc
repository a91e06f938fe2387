// SPDX-License-Identifier: MIT
#include "mori/transports/ucx/ucp_worker.h"

#if MORI_HAVE_UCX_HEADERS

#include <poll.h>
#include <sched.h>

#include <chrono>
#include <cmath>
#include <future>

#include "mori/core/futex.h"
#include "mori/core/log.h"
#include "mori/core/status.h"
#include "mori/core/thread_name.h"

namespace mori::ucx {

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// How long a caller progresses for its own request before it sleeps, yielding between polls,
// where PEs outnumber cores: a few round trips of a target that shares a core with others. 50 us
// left most fetch-adds and gets of a 4-PE job on 2 cores to a progress thread's wake-up; 200 us
// made them 10-20 % faster (4 PEs over UCX's tcp: fetch-add 26.6 -> 21.6 us, put+quiet of 8 B
// 47 -> 38 us, 8-PE RMA rows 0.68-1.1 of the time; 4-6 alternated runs, three times, 2026-12-03).
// The collectives moved by up to 20-35 % either way between those runs, with no consistent
// direction (small 4-PE ones slower in one, faster in another). Doubling it when a request
// completed soon after its caller fell asleep (up to 800 us) was slower than either.
constexpr double kSpinS = 200e-6;
// The same with a core of our own (set_spin_while_busy): a flush that waits for a socket to
// drain sees nothing to progress for longer than a round trip, and sleeping there hands
// each step of the transfer to a woken thread.
constexpr double kSpinDedicatedS = 500e-6;
// A sleeping caller progresses itself at least this often: some transports signal no
// event for some completions (large shared-memory puts), so nobody else would.
constexpr int64_t kSleepNs = 250'000;
// While callers progress the worker, the progress thread looks whether they still do after
// kStandAsideS, then twice as long each time they did, up to kStandAsideMaxS: each look
// preempts a PE that spins on its core (5000 looks a second made a 2-PE put loop 1.4 x slower).
constexpr double kStandAsideS = 200e-6;
constexpr double kStandAsideMaxS = 2e-3;

}  // namespace

UcpWorker::UcpWorker(const Ucp& api, Options options) : api_(api), options_(std::move(options)) {
  ucp_config_t* config = nullptr;
  check(api_, api_.config_read(nullptr, nullptr, &config), "ucp_config_read");
  for (auto& [name, value] : options_.config) {
    ucs_status_t s = api_.config_modify(config, name.c_str(), value.c_str());
    if (s != UCS_OK)
      MORI_LOG(kDebug, "UCX", "%s: UCX setting %s=%s not applied: %s", options_.owner.c_str(), name.c_str(),
               value.c_str(), api_.status_string(s));
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = options_.features | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  ucs_status_t s = api_.init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &context_);
  api_.config_release(config);
  check(api_, s, (options_.owner + ": ucp_init").c_str());

  try {
    ucp_context_attr_t attr{};
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    check(api_, api_.context_query(context_, &attr), "ucp_context_query");
    memory_types_ = attr.memory_types;

    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_MULTI;
    check(api_, api_.worker_create(context_, &wp, &worker_), (options_.owner + ": ucp_worker_create").c_str());
    ucp_address_t* addr = nullptr;
    size_t len = 0;
    check(api_, api_.worker_get_address(worker_, &addr, &len), "ucp_worker_get_address");
    address_.assign(reinterpret_cast<const char*>(addr), len);
    api_.worker_release_address(worker_, addr);
    check(api_, api_.worker_get_efd(worker_, &efd_), "ucp_worker_get_efd");
  } catch (...) {
    if (worker_) api_.worker_destroy(worker_);
    api_.cleanup(context_);
    throw;
  }
}

UcpWorker::~UcpWorker() {
  destroy_worker();
  api_.cleanup(context_);
}

void UcpWorker::destroy_worker() {
  stop();
  if (worker_ == nullptr) return;
  api_.worker_destroy(worker_);
  worker_ = nullptr;
}

void UcpWorker::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { run(); });
  name_thread(thread_, "mori-ucx");
}

void UcpWorker::stop() {
  {
    std::lock_guard<std::mutex> lock(work_mu_);
    closing_ = true;
  }
  if (!thread_.joinable()) return;
  stop_.store(true);
  api_.worker_signal(worker_);
  thread_.join();
}

void UcpWorker::submit(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(work_mu_);
    if (closing_) raise(Status::kInvalidUsage, "%s is closing", options_.owner.c_str());
    work_.push_back(std::move(fn));
    has_work_.store(true, std::memory_order_release);
  }
  api_.worker_signal(worker_);
}

void UcpWorker::call(const std::function<void()>& fn) {
  if (std::this_thread::get_id() == thread_.get_id()) {
    fn();
    return;
  }
  std::promise<void> done;
  auto finished = done.get_future();
  submit([&] {
    try {
      fn();
      done.set_value();
    } catch (...) {
      done.set_exception(std::current_exception());
    }
  });
  finished.get();
}

bool UcpWorker::run_submitted() {
  if (!has_work_.load(std::memory_order_acquire)) return false;  // the transport's path: no lock
  std::deque<std::function<void()>> work;
  {
    std::lock_guard<std::mutex> lock(work_mu_);
    work.swap(work_);
    has_work_.store(false, std::memory_order_relaxed);
  }
  for (auto& fn : work) fn();
  return !work.empty();
}

unsigned UcpWorker::progress() {
  // One thread progresses at a time; another does not queue on UCX's worker lock behind it
  // (a convoy: every unlock woke the waiting thread just to find the lock taken again).
  if (progressing_.exchange(true, std::memory_order_acquire)) return 0;
  unsigned n = api_.worker_progress(worker_);
  progressing_.store(false, std::memory_order_release);
  if (n) {
    if (options_.on_progress) options_.on_progress();
    wake_sleepers();
  }
  return n;
}

void UcpWorker::wake_sleepers() {
  if (sleepers_.load(std::memory_order_seq_cst) == 0) return;
  progressed_.fetch_add(1, std::memory_order_seq_cst);
  futex::wake(reinterpret_cast<const uint32_t*>(&progressed_));
}

void UcpWorker::run() {
  double next = options_.periodic_s > 0 ? now_s() + options_.periodic_s : INFINITY;
  double aside_s = kStandAsideS;
  uint32_t polls_seen = polls_begun_.load(std::memory_order_relaxed);
  while (!stop_.load(std::memory_order_relaxed)) {
    run_submitted();
    double t = now_s();
    if (t >= next) {
      options_.periodic();
      next = t + options_.periodic_s;
    }
    // A caller progresses the worker (for its request, or serving peers while it waits): do
    // not fight it for UCX's worker lock (a preempted holder makes the other spin for its
    // whole time slice). A caller that polled since our last look is likely to poll again
    // (a loop of puts and quiets): stay aside for it too, unless it went to sleep since
    // (hand_over_: then nobody else progresses).
    aside_.store(true, std::memory_order_seq_cst);
    uint32_t n = spinners_.load(std::memory_order_seq_cst);
    uint32_t polls = polls_begun_.load(std::memory_order_seq_cst);
    bool handed = hand_over_.exchange(false, std::memory_order_seq_cst);
    if (n > 0 || (polls != polls_seen && !handed)) {
      polls_seen = polls;
      double left = std::isinf(next) ? aside_s : std::min(aside_s, std::max(0.0, next - t));
      futex::wait(reinterpret_cast<const uint32_t*>(&spinners_), n, static_cast<int64_t>(left * 1e9) + 1);
      aside_.store(false, std::memory_order_relaxed);
      aside_s = std::min(aside_s * 2, kStandAsideMaxS);
      continue;
    }
    aside_.store(false, std::memory_order_relaxed);
    polls_seen = polls;
    aside_s = kStandAsideS;
    while (spinners_.load(std::memory_order_acquire) == 0 && progress() != 0) {
    }
    if (spinners_.load(std::memory_order_acquire) > 0) continue;
    t = now_s();
    if (t >= next) continue;
    double limit_s = options_.max_sleep_s ? options_.max_sleep_s() : -1;
    if (limit_s == 0) {
      sched_yield();
      continue;
    }
    ucs_status_t s = api_.worker_arm(worker_);
    if (s == UCS_ERR_BUSY) continue;                          // events arrived meanwhile: progress them first
    if (has_work_.load(std::memory_order_acquire)) continue;  // submitted before the arm: signalled already
    if (s != UCS_OK) {
      MORI_LOG(kError, "UCX", "%s: ucp_worker_arm: %s; progress thread polls", options_.owner.c_str(),
               api_.status_string(s));
    }
    int wait_ms = std::isinf(next) ? 1000 : std::max(1, static_cast<int>((next - t) * 1000));
    if (limit_s > 0) wait_ms = std::min(wait_ms, std::max(1, static_cast<int>(limit_s * 1000)));
    if (s != UCS_OK) wait_ms = 1;
    pollfd p{efd_, POLLIN, 0};
    poll(&p, 1, wait_ms);
  }
  run_submitted();
}

ucs_status_t UcpWorker::wait(ucs_status_ptr_t request, double timeout_s, const std::function<bool()>& give_up) {
  if (request == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(request)) return UCS_PTR_STATUS(request);
  ucs_status_t status = UCS_INPROGRESS;
  ucs_status_t s = wait_for(
      [&] {
        status = api_.request_check_status(request);
        if (status == UCS_INPROGRESS) return false;
        api_.request_free(request);
        return true;
      },
      timeout_s, give_up);
  return s == UCS_OK ? status : s;
}

ucs_status_t UcpWorker::wait_for(const std::function<bool()>& done, double timeout_s,
                                 const std::function<bool()>& give_up) {
  const double start = now_s();
  const double deadline = std::isinf(timeout_s) ? INFINITY : start + timeout_s;
  // Progress ourselves while the reply may be a few microseconds away (the progress thread
  // stays out of the worker lock meanwhile). With a core of our own, also for as long as
  // progress keeps doing something (a flush of many puts: each handed to a woken thread
  // cost a wake-up); otherwise unrelated traffic must not keep us past kSpinS.
  begin_polling();
  const bool busy_spin = spin_while_busy_.load(std::memory_order_relaxed);
  const double spin_s = busy_spin ? kSpinDedicatedS : kSpinS;
  double last_work = start;
  for (unsigned polls = 1;; ++polls) {
    if (done()) {
      end_polling(false);
      return UCS_OK;
    }
    if ((polls & 15) == 0) {
      double t = now_s();
      if (t - last_work > spin_s || t > deadline) break;
      if ((polls & 255) == 0 && give_up && give_up()) break;
    }
    if (progress() && busy_spin) last_work = now_s();
    // Where PEs outnumber cores, hand the core over between polls: the peer whose reply we
    // wait for (or the PE that must run after us) may need it. 4 PEs on 2 cores over UCX's
    // tcp: barrier 161 -> 105 us, broadcast+barrier 507 -> 343 us (medians of 5 alternated runs).
    if (!busy_spin) sched_yield();
  }
  end_polling(true);
  // Then sleep: the progress thread (woken by the worker's event fd) progresses, and wakes
  // us whenever it did something; we progress once per kSleepNs ourselves.
  for (;;) {
    uint32_t seen = progressed_.load(std::memory_order_seq_cst);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    bool finished = done();
    if (!finished) futex::wait(reinterpret_cast<const uint32_t*>(&progressed_), seen, kSleepNs);
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    if (finished || done()) return UCS_OK;
    if (progressed_.load(std::memory_order_relaxed) == seen) progress();  // nobody progressed meanwhile
    if (give_up && give_up()) return UCS_ERR_CANCELED;
    if (now_s() > deadline) return UCS_ERR_TIMED_OUT;
  }
}

void UcpWorker::begin_polling() {
  spinners_.fetch_add(1, std::memory_order_acq_rel);
  polls_begun_.fetch_add(1, std::memory_order_relaxed);
}

void UcpWorker::end_polling(bool will_sleep) {
  if (spinners_.fetch_sub(1, std::memory_order_seq_cst) == 1 && will_sleep) {
    hand_over_.store(true, std::memory_order_seq_cst);
    if (aside_.load(std::memory_order_seq_cst)) futex::wake(reinterpret_cast<const uint32_t*>(&spinners_));
  }
}

void UcpWorker::release(ucs_status_ptr_t request) {
  if (request == nullptr || UCS_PTR_IS_ERR(request)) return;
  double deadline = now_s() + 1.0;
  while (api_.request_check_status(request) == UCS_INPROGRESS && now_s() < deadline) progress();
  api_.request_free(request);
}

}  // namespace mori::ucx

#endif  // MORI_HAVE_UCX_HEADERS
