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
  MORI_CAPI_TRY
  return rt("shmemx_heap_size").heap_size();
  MORI_CAPI_CATCH("shmemx_heap_size")
}

size_t shmemx_heap_free(void) {
  MORI_CAPI_TRY
  return rt("shmemx_heap_free").heap_free();
  MORI_CAPI_CATCH("shmemx_heap_free")
}

void shmemx_signal_add(uint64_t* sig_addr, uint64_t signal, int pe) {
  MORI_CAPI_TRY
  rt("shmemx_signal_add").atomic(sig_addr, mori::AmoOp::kAdd, 8, signal, 0, pe, "shmemx_signal_add");
  MORI_CAPI_CATCH("shmemx_signal_add")
}

void shmemx_signal_set(uint64_t* sig_addr, uint64_t signal, int pe) {
  MORI_CAPI_TRY
  rt("shmemx_signal_set").atomic(sig_addr, mori::AmoOp::kSet, 8, signal, 0, pe, "shmemx_signal_set");
  MORI_CAPI_CATCH("shmemx_signal_set")
}

void* shmemx_team_ptr(shmem_team_t team, const void* dest, int pe) {
  MORI_CAPI_TRY
  auto& r = rt("shmemx_team_ptr");
  if (team == SHMEM_TEAM_INVALID || !team_alive(team) || pe < 0 || pe >= static_cast<int>(team->pes.size()))
    return nullptr;
  return r.ptr(dest, team->pes[pe]);
  MORI_CAPI_CATCH("shmemx_team_ptr")
}

size_t shmemx_symmetric_data_size(void) { return state().data_bytes; }

}  // extern "C"
