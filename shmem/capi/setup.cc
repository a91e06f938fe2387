// SPDX-License-Identifier: MIT
// Library setup, exit and query routines; error reporting; shmem_global_exit.
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "mori/shmem/collective_engine.h"
#include "capi/state.h"
#include "capi/symmetric_data.h"
#include "mori/core/env.h"
#include "mori/core/futex.h"
#include "mori/core/launch.h"
#include "mori/core/log.h"
#include "mori/core/mpi_bootstrap.h"
#include "mori/core/status.h"
#include "mori/core/thread_name.h"

using mori::shmem::Runtime;

namespace mori::capi {
namespace {

State g_state;

// Waits for a peer's shmem_global_exit: the peer stores the status into this PE's
// SymBlock and wakes the futex (or, across hosts, the timed sleep notices it).
class ExitWatcher {
 public:
  void start(SymBlock* sym) {
    sym_ = sym;
    stop_.store(false);
    thread_ = std::thread([this] { run(); });
    name_thread(thread_, "mori-exitwatch");
  }
  void stop() {
    if (!thread_.joinable()) return;
    stop_.store(true);
    __atomic_fetch_add(&sym_->exit_futex, 1, __ATOMIC_SEQ_CST);
    futex::wake(&sym_->exit_futex);
    thread_.join();
  }

 private:
  void run() {
    while (!stop_.load()) {
      uint32_t seen = __atomic_load_n(&sym_->exit_futex, __ATOMIC_ACQUIRE);
      uint64_t code = __atomic_load_n(&sym_->exit_code, __ATOMIC_ACQUIRE);
      if (code & 1) {
        // The whole job ends with the status a peer passed to shmem_global_exit.
        _exit(static_cast<int>(code >> 1));
      }
      futex::wait(&sym_->exit_futex, seen, 100'000'000);
    }
  }
  SymBlock* sym_ = nullptr;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};
ExitWatcher g_watcher;

}  // namespace

State& state() { return g_state; }

void global_exit(int status) noexcept {
  std::fflush(nullptr);
  if (Runtime::initialized() && g_state.sym) {
    try {
      auto& r = Runtime::get("shmem_global_exit");
      uint64_t code = (static_cast<uint64_t>(static_cast<uint32_t>(status)) << 1) | 1;
      for (int pe = 0; pe < r.n_pes(); ++pe) {
        if (pe == r.my_pe()) continue;
        try {
          // Fetching forms: each completes at the peer before this PE exits (a posted AMO
          // could be lost with the process), so the peer's errors see the status first.
          r.atomic(&g_state.sym->exit_code, AmoOp::kSwap, 8, code, 0, pe, "shmem_global_exit");
          r.atomic(&g_state.sym->exit_futex, AmoOp::kFetchAdd, 4, 1, 0, pe, "shmem_global_exit");
          if (auto* word = static_cast<uint32_t*>(r.ptr(&g_state.sym->exit_futex, pe))) futex::wake(word);
        } catch (...) {
          // a peer that is already gone needs no notice
        }
      }
    } catch (...) {
    }
  }
  _exit(status);
}

void fail(const char* fn, const std::exception& e) noexcept {
  // A peer that called shmem_global_exit stores its status here before it exits, so an
  // error that its exit caused (a wait that saw it gone) must end with its status, not ours.
  if (g_state.sym) {
    uint64_t code = __atomic_load_n(&g_state.sym->exit_code, __ATOMIC_ACQUIRE);
    if (code & 1) {
      std::fflush(nullptr);
      _exit(static_cast<int>(code >> 1));
    }
  }
  int pe = Runtime::initialized() ? Runtime::get(fn).my_pe() : -1;
  // A transport may have raised a peer's loss without the runtime hearing of it: let the runtime
  // record the PE lost first, so that same-host PEs seeing this one leave name that PE instead.
  if (pe >= 0) {
    try {
      Runtime::get(fn).check_peers(fn);
    } catch (const std::exception&) {
    }
  }
  const char* what = e.what();
  // Runtime messages often start with the routine's generic name; always lead with the public one.
  if (pe >= 0)
    std::fprintf(stderr, "shmem error on PE %d: %s: %s\n", pe, fn, what);
  else
    std::fprintf(stderr, "shmem error: %s: %s\n", fn, what);
  global_exit(1);
}

void setup_state() {
  auto& r = rt("shmem_init");
  g_state.sym = static_cast<SymBlock*>(r.malloc(sizeof(SymBlock), 64, "shmem_init", false));
  std::memset(g_state.sym, 0, sizeof(SymBlock));
  g_state.used_slots = 0;
  g_state.used_nodes = 0;
  g_state.data_bytes = make_data_symmetric();
  shmem::coll::inbox().setup(r);
  setup_predefined_teams();
  g_watcher.start(g_state.sym);
  r.barrier_all();  // nobody touches a peer's SymBlock or inbox before the peer zeroed it
}

void teardown_state() {
  g_watcher.stop();
  teardown_teams();
  shmem::coll::inbox().teardown();
  g_state.sym = nullptr;
}

}  // namespace mori::capi

using namespace mori::capi;

namespace {

// A program that returns from main (or calls exit) without shmem_finalize still finalizes,
// as Open MPI's OSHMEM does: otherwise the runtime's threads and the exit watcher would
// be torn down by static destructors mid-flight (abort, lost stdio output, status 134).
// Registered at the end of initialization, so it runs before the destructors of every
// static object the libraries or the runtime's setup created (exit runs handlers in
// reverse order of registration); exit's status and stdio flushing are untouched.
// OpenSHMEM 1.6: every shmem_init[_thread] is matched by a shmem_finalize; the library stays
// initialized until the last one (start_pes, whose repeats are no-ops, counts once).
int g_init_count = 0;

void finalize_at_exit() {
  if (!Runtime::initialized()) return;
  g_init_count = 1;  // however many inits are unmatched: this one finalizes
  shmem_finalize();
}

void init_common(int requested, const char* fn) {
  if (Runtime::initialized()) {  // a repeated initialization only counts
    ++g_init_count;
    return;
  }
  // Settings as the environment says now (OpenSHMEM's SHMEM_SYMMETRIC_SIZE is the heap size's
  // alias in the table: MORI_SHMEM_HEAP_SIZE wins when both are set).
  mori::env::reload();
  bool mpi_init = false;
  auto boot = mori::make_launch_bootstrap(&mpi_init);
  state().mpi_initialized_by_us = mpi_init;
  Runtime::init(std::move(boot));
  state().thread_level = requested;
  Runtime::get(fn).set_thread_level(static_cast<mori::shmem::ThreadLevel>(requested));
  setup_state();
  g_init_count = 1;
  static bool at_exit_registered = false;
  if (!at_exit_registered && std::atexit(finalize_at_exit) == 0) at_exit_registered = true;
}

}  // namespace

extern "C" {

void shmem_init(void) {
  return capi_call("shmem_init", [&] { init_common(SHMEM_THREAD_SINGLE, "shmem_init"); });
}

int shmem_init_thread(int requested, int* provided) {
  return capi_call("shmem_init_thread", [&] {
    if (requested < SHMEM_THREAD_SINGLE || requested > SHMEM_THREAD_MULTIPLE)
      mori::raise(mori::Status::kInvalidArgument, "unknown thread level %d", requested);
    // Every level is supported: the runtime's operations are thread-safe. A repeated
    // initialization keeps the level of the first (the spec does not switch levels).
    init_common(requested, "shmem_init_thread");
    if (provided) *provided = state().thread_level;
    return 0;
  });
}

void shmem_query_thread(int* provided) {
  return capi_call("shmem_query_thread", [&] {
    rt("shmem_query_thread");
    if (provided) *provided = state().thread_level;
  });
}

void shmem_query_initialized(int* initialized) {
  if (initialized) *initialized = Runtime::initialized() ? 1 : 0;
}

void shmem_finalize(void) {
  return capi_call("shmem_finalize", [&] {
    if (!Runtime::initialized()) return;
    if (--g_init_count > 0) {  // not the last: collective like every finalize, nothing released
      auto& r = rt("shmem_finalize");
      r.quiet();
      r.barrier_all();
      return;
    }
    // Write out buffered output before the closing barrier: once every PE has passed it, the
    // first to exit with a non-zero status makes the launcher stop the others, which must
    // not take their output with them.
    std::fflush(nullptr);
    rt("shmem_finalize").barrier_all();
    teardown_state();
    Runtime::finalize();
    mori::finalize_mpi_bootstrap();
  });
}

void shmem_global_exit(int status) { global_exit(status); }

int shmem_my_pe(void) {
  return capi_call("shmem_my_pe", [&] { return rt("shmem_my_pe").my_pe(); });
}

int shmem_n_pes(void) {
  return capi_call("shmem_n_pes", [&] { return rt("shmem_n_pes").n_pes(); });
}

int shmem_pe_accessible(int pe) {
  return capi_call("shmem_pe_accessible", [&] {
    auto& r = rt("shmem_pe_accessible");
    if (pe < 0 || pe >= r.n_pes()) return 0;
    try {
      r.check_peers("shmem_pe_accessible");  // a PE that died is not accessible
    } catch (const mori::Error&) {
      return 0;
    }
    return 1;
  });
}

int shmem_addr_accessible(const void* addr, int pe) {
  return capi_call("shmem_addr_accessible", [&] {
    auto& r = rt("shmem_addr_accessible");
    return pe >= 0 && pe < r.n_pes() && r.is_symmetric(addr) ? 1 : 0;
  });
}

void* shmem_ptr(const void* dest, int pe) {
  return capi_call("shmem_ptr", [&] { return rt("shmem_ptr").ptr(dest, pe); });
}

void shmem_info_get_version(int* major, int* minor) {
  if (major) *major = SHMEM_MAJOR_VERSION;
  if (minor) *minor = SHMEM_MINOR_VERSION;
}

void shmem_info_get_name(char* name) {
  if (name) std::snprintf(name, SHMEM_MAX_NAME_LEN, "%s", SHMEM_VENDOR_STRING);
}

void shmem_pcontrol(const int level, ...) {
  // Profiling levels carry no meaning without a profiler attached; accepted and ignored.
  (void)level;
}

// ---- deprecated names
void start_pes(int npes) {
  (void)npes;                                 // the launcher decides the job size
  if (!Runtime::initialized()) shmem_init();  // repeated calls have no effect (and need no finalize)
}
int _my_pe(void) { return shmem_my_pe(); }
int _num_pes(void) { return shmem_n_pes(); }
void shmem_clear_cache_inv(void) {}
void shmem_set_cache_inv(void) {}
void shmem_clear_cache_line_inv(void*) {}
void shmem_set_cache_line_inv(void*) {}
void shmem_udcflush(void) {}
void shmem_udcflush_line(void*) {}

}  // extern "C"
