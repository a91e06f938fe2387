// SPDX-License-Identifier: MIT
// State of the OpenSHMEM C API on top of mori::shmem::Runtime: teams, contexts,
// the small symmetric block the C API keeps in the heap, and error handling.
#pragma once

#include <shmem.h>

#include <cstdint>
#include <exception>
#include <vector>

#include "mori/shmem/runtime.h"

// The library-side definitions of the opaque handles of shmem.h.
struct mori_shmem_team {
  std::vector<int> pes;       // world PE of each team member, in team order
  std::vector<int> index_of;  // world PE -> team index, or -1 (size n_pes)
  int my_index = -1;
  int slot = -1;  // which TeamSlot of the symmetric block this team uses
  shmem_team_config_t config{};
  long config_mask = 0;
  bool predefined = false;
  bool world = false;  // the world team (PE numbers need no translation)
};

struct mori_shmem_ctx {
  mori_shmem_team* team = nullptr;
  long options = 0;
  bool predefined = false;
};

namespace mori::capi {

// Per-team symmetric words: dissemination barrier counters (self-cleaning: each
// arrival is consumed, so they are back at zero after every barrier), the running
// offset word of shmem_collect, and the words of the same-host barrier (the arrival
// mask, used on the group's first member only, and each member's release flag; both
// are zero again after every barrier).
struct alignas(64) TeamSlot {
  static constexpr int kRounds = 32;
  uint64_t counters[kRounds];
  uint64_t chain;
  uint64_t scratch;
  uint64_t arrived;
  uint64_t released;
};
// pSync layout of the active-set routines (SHMEM_*_SYNC_SIZE is 64 longs).
constexpr int kPsyncChain = TeamSlot::kRounds;
constexpr int kPsyncArrived = TeamSlot::kRounds + 2;
constexpr int kPsyncReleased = TeamSlot::kRounds + 3;
static_assert(kPsyncReleased < SHMEM_BARRIER_SYNC_SIZE, "the barrier's words must fit in pSync");

// One MCS queue node per lock a PE may wait for or hold at the same time.
struct alignas(64) LockNode {
  uint64_t next;    // successor's code (pe+1)<<8 | node, or 0
  uint64_t locked;  // 1 while waiting for the predecessor's hand-over
};

constexpr int kMaxTeams = 64;
constexpr int kMaxLockNodes = 64;

// Lives in the symmetric heap at the same offset on every PE.
struct SymBlock {
  TeamSlot teams[kMaxTeams];
  LockNode locks[kMaxLockNodes];
  alignas(64) uint64_t exit_code;  // global_exit: (status << 1) | 1
  uint32_t exit_futex;
};

struct State {
  SymBlock* sym = nullptr;
  uint64_t used_slots = 0;  // bit i: this PE belongs to a live team using slot i
  uint64_t used_nodes = 0;  // bit i: lock node i in use
  int thread_level = SHMEM_THREAD_MULTIPLE;
  bool mpi_initialized_by_us = false;
  size_t data_bytes = 0;  // symmetric data+bss size
};
State& state();

// The runtime for an entry point (throws "not initialized" naming it).
inline mori::shmem::Runtime& rt(const char* fn) { return mori::shmem::Runtime::get(fn); }

// Reports a failed call on stderr (naming it and this PE) and ends the job the way
// shmem_global_exit does: a broken call must not leave the other PEs waiting.
[[noreturn]] void fail(const char* fn, const std::exception& e) noexcept;
[[noreturn]] void global_exit(int status) noexcept;

// Runs the body of C API function `fn`: an exception it throws ends in fail(fn, ...), so no C++
// exception crosses into C. The body's result is the call's: `return capi_call(fn, [&] { ... });`
template <typename Body>
auto capi_call(const char* fn, Body&& body) noexcept -> decltype(body()) {
  try {
    return body();
  } catch (const std::exception& e) {
    fail(fn, e);
  }
}

// World PE of `pe` in ctx's team (checked).
int team_world_pe(shmem_ctx_t ctx, int pe, const char* fn);
inline int world_pe(shmem_ctx_t ctx, int pe, const char* fn) {
  return ctx->team == &mori_shmem_team_world ? pe : team_world_pe(ctx, pe, fn);  // the common case inline
}
mori_shmem_team* check_team(shmem_team_t team, const char* fn);
bool team_alive(shmem_team_t team);
// Contexts created from a destroyed team become invalid.
void forget_team_contexts(shmem_team_t team);

// Set up / tear down the C API's own state around Runtime::init/finalize.
void setup_state();
void teardown_state();
void setup_predefined_teams();
void teardown_teams();

}  // namespace mori::capi
