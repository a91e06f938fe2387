// SPDX-License-Identifier: MIT
// shmemx.h: MORI's extensions.
#include <shmemx.h>

#include <chrono>

#include "capi/state.h"
#include "mori/core/status.h"

using namespace mori::capi;

extern "C" {

double shmemx_wtime(void) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

size_t shmemx_heap_size(void) {
  return capi_call("shmemx_heap_size", [&] { return rt("shmemx_heap_size").heap_size(); });
}

size_t shmemx_heap_free(void) {
  return capi_call("shmemx_heap_free", [&] { return rt("shmemx_heap_free").heap_free(); });
}

// The shmemx_ forms predate OpenSHMEM 1.6's standard names; they stay for existing programs.
void shmemx_signal_add(uint64_t* sig_addr, uint64_t signal, int pe) { shmem_signal_add(sig_addr, signal, pe); }
void shmemx_signal_set(uint64_t* sig_addr, uint64_t signal, int pe) { shmem_signal_set(sig_addr, signal, pe); }
void* shmemx_team_ptr(shmem_team_t team, const void* dest, int pe) { return shmem_team_ptr(team, dest, pe); }

size_t shmemx_symmetric_data_size(void) { return state().data_bytes; }

}  // extern "C"
