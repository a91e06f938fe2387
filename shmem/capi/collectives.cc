// SPDX-License-Identifier: MIT
// Collectives over teams and active sets: the arguments become a group of the host collective
// engine (mori/shmem/collective_engine.h), which runs them.
#include "capi/collectives.h"

#include "capi/typed_helpers.h"
#include "mori/core/status.h"

namespace mori::capi {

Group team_group(shmem_team_t team, const char* fn) {
  mori_shmem_team* t = check_team(team, fn);
  Group g;
  g.pes = t->pes.data();
  g.n = static_cast<int>(t->pes.size());
  g.me = t->my_index;
  TeamSlot& slot = state().sym->teams[t->slot];
  g.counters = slot.counters;
  g.chain = &slot.chain;
  g.arrived = &slot.arrived;
  g.released = &slot.released;
  g.world = t->world;
  g.channel = t->slot;
  return g;
}

Group active_group(int start, int log_stride, int size, long* psync, const char* fn) {
  auto& r = rt(fn);
  if (size < 1 || start < 0 || log_stride < 0 || log_stride > 30)
    raise(Status::kInvalidArgument, "bad active set (PE_start %d, logPE_stride %d, PE_size %d)", start, log_stride,
          size);
  long last = start + (static_cast<long>(size - 1) << log_stride);
  if (last >= r.n_pes())
    raise(Status::kInvalidArgument, "active set (PE_start %d, logPE_stride %d, PE_size %d) reaches PE %ld of %d", start,
          log_stride, size, last, r.n_pes());
  if (!psync) raise(Status::kInvalidArgument, "pSync is NULL");
  check_symmetric(psync, SHMEM_BARRIER_SYNC_SIZE * sizeof(long), fn);
  Group g;
  g.storage.resize(size);
  for (int i = 0; i < size; ++i) g.storage[i] = start + (i << log_stride);
  g.pes = g.storage.data();
  g.n = size;
  int rel = r.my_pe() - start;
  if (rel >= 0 && (rel & ((1 << log_stride) - 1)) == 0 && (rel >> log_stride) < size) g.me = rel >> log_stride;
  if (g.me < 0)
    raise(Status::kInvalidArgument, "PE %d is not in the active set (PE_start %d, logPE_stride %d, PE_size %d)",
          r.my_pe(), start, log_stride, size);
  g.counters = reinterpret_cast<uint64_t*>(psync);
  g.chain = reinterpret_cast<uint64_t*>(psync) + kPsyncChain;
  g.arrived = reinterpret_cast<uint64_t*>(psync) + kPsyncArrived;
  g.released = reinterpret_cast<uint64_t*>(psync) + kPsyncReleased;
  g.world = false;
  g.channel = coll::kActiveSetChannel;
  return g;
}

void check_symmetric(const void* p, size_t bytes, const char* fn) { rt(fn).resolve(p, bytes, fn); }

// ---- noexcept entry points of the typed team routines

int broadcast(shmem_team_t team, void* dest, const void* source, size_t bytes, int root, const char* fn) noexcept {
  return capi_call(fn, [&] {
    Group g = team_group(team, fn);
    if (g.me < 0) return -1;
    coll::broadcast(g, dest, source, bytes, root, true, fn);
    return 0;
  });
}

int collect(shmem_team_t team, void* dest, const void* source, size_t bytes, const char* fn) noexcept {
  return capi_call(fn, [&] {
    Group g = team_group(team, fn);
    if (g.me < 0) return -1;
    coll::collect(g, dest, source, bytes, fn);
    return 0;
  });
}

int fcollect(shmem_team_t team, void* dest, const void* source, size_t bytes, const char* fn) noexcept {
  return capi_call(fn, [&] {
    Group g = team_group(team, fn);
    if (g.me < 0) return -1;
    coll::fcollect(g, dest, source, bytes, fn);
    return 0;
  });
}

int alltoall(shmem_team_t team, void* dest, const void* source, size_t bytes, const char* fn) noexcept {
  return capi_call(fn, [&] {
    Group g = team_group(team, fn);
    if (g.me < 0) return -1;
    coll::alltoalls(g, dest, source, 1, 1, 1, bytes, fn);
    return 0;
  });
}

int alltoalls(shmem_team_t team, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems,
              size_t elem, const char* fn) noexcept {
  return capi_call(fn, [&] {
    Group g = team_group(team, fn);
    if (g.me < 0) return -1;
    coll::alltoalls(g, dest, source, dst, sst, nelems, elem, fn);
    return 0;
  });
}

}  // namespace mori::capi

using namespace mori::capi;

extern "C" {

void shmem_barrier_all(void) {
  return capi_call("shmem_barrier_all", [&] {
    Group g = team_group(SHMEM_TEAM_WORLD, "shmem_barrier_all");
    coll::barrier(g, "shmem_barrier_all");
  });
}

void shmem_sync_all(void) {
  return capi_call("shmem_sync_all", [&] {
    Group g = team_group(SHMEM_TEAM_WORLD, "shmem_sync_all");
    coll::barrier(g, "shmem_sync_all", true);
  });
}

int shmem_team_sync(shmem_team_t team) {
  return capi_call("shmem_team_sync", [&] {
    Group g = team_group(team, "shmem_team_sync");
    if (g.me < 0) return -1;
    coll::barrier(g, "shmem_team_sync", true);
    return 0;
  });
}

int shmem_broadcastmem(shmem_team_t team, void* dest, const void* source, size_t nelems, int PE_root) {
  return broadcast(team, dest, source, nelems, PE_root, "shmem_broadcastmem");
}
int shmem_collectmem(shmem_team_t team, void* dest, const void* source, size_t nelems) {
  return collect(team, dest, source, nelems, "shmem_collectmem");
}
int shmem_fcollectmem(shmem_team_t team, void* dest, const void* source, size_t nelems) {
  return fcollect(team, dest, source, nelems, "shmem_fcollectmem");
}
int shmem_alltoallmem(shmem_team_t team, void* dest, const void* source, size_t nelems) {
  return alltoall(team, dest, source, nelems, "shmem_alltoallmem");
}
int shmem_alltoallsmem(shmem_team_t team, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems) {
  return alltoalls(team, dest, source, dst, sst, nelems, 1, "shmem_alltoallsmem");
}

// ---- active sets (pSync holds the barrier counters and the collect offset word)

void shmem_barrier(int PE_start, int logPE_stride, int PE_size, long* pSync) {
  return capi_call("shmem_barrier", [&] {
    Group g = active_group(PE_start, logPE_stride, PE_size, pSync, "shmem_barrier");
    coll::barrier(g, "shmem_barrier");
  });
}

void shmem_sync(int PE_start, int logPE_stride, int PE_size, long* pSync) {
  return capi_call("shmem_sync", [&] {
    Group g = active_group(PE_start, logPE_stride, PE_size, pSync, "shmem_sync");
    coll::barrier(g, "shmem_sync", true);
  });
}

#define MORI_ACTIVE_SIZED(BITS)                                                                                        \
  void shmem_broadcast##BITS(void* dest, const void* source, size_t nelems, int PE_root, int PE_start,                 \
                             int logPE_stride, int PE_size, long* pSync) {                                             \
    const char* fn = "shmem_broadcast" #BITS;                                                                          \
    return capi_call(fn, [&] {                                                                                         \
      Group g = active_group(PE_start, logPE_stride, PE_size, pSync, fn);                                              \
      coll::broadcast(g, dest, source, nelems*(BITS / 8), PE_root, false, fn);                                         \
    });                                                                                                                \
  }                                                                                                                    \
  void shmem_collect##BITS(void* dest, const void* source, size_t nelems, int PE_start, int logPE_stride, int PE_size, \
                           long* pSync) {                                                                              \
    const char* fn = "shmem_collect" #BITS;                                                                            \
    return capi_call(fn, [&] {                                                                                         \
      Group g = active_group(PE_start, logPE_stride, PE_size, pSync, fn);                                              \
      coll::collect(g, dest, source, nelems*(BITS / 8), fn);                                                           \
    });                                                                                                                \
  }                                                                                                                    \
  void shmem_fcollect##BITS(void* dest, const void* source, size_t nelems, int PE_start, int logPE_stride,             \
                            int PE_size, long* pSync) {                                                                \
    const char* fn = "shmem_fcollect" #BITS;                                                                           \
    return capi_call(fn, [&] {                                                                                         \
      Group g = active_group(PE_start, logPE_stride, PE_size, pSync, fn);                                              \
      coll::fcollect(g, dest, source, nelems*(BITS / 8), fn);                                                          \
    });                                                                                                                \
  }                                                                                                                    \
  void shmem_alltoall##BITS(void* dest, const void* source, size_t nelems, int PE_start, int logPE_stride,             \
                            int PE_size, long* pSync) {                                                                \
    const char* fn = "shmem_alltoall" #BITS;                                                                           \
    return capi_call(fn, [&] {                                                                                         \
      Group g = active_group(PE_start, logPE_stride, PE_size, pSync, fn);                                              \
      coll::alltoalls(g, dest, source, 1, 1, 1, nelems*(BITS / 8), fn);                                                \
    });                                                                                                                \
  }                                                                                                                    \
  void shmem_alltoalls##BITS(void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems,              \
                             int PE_start, int logPE_stride, int PE_size, long* pSync) {                               \
    const char* fn = "shmem_alltoalls" #BITS;                                                                          \
    return capi_call(fn, [&] {                                                                                         \
      Group g = active_group(PE_start, logPE_stride, PE_size, pSync, fn);                                              \
      coll::alltoalls(g, dest, source, dst, sst, nelems, BITS / 8, fn);                                                \
    });                                                                                                                \
  }

MORI_ACTIVE_SIZED(32)
MORI_ACTIVE_SIZED(64)

}  // extern "C"
