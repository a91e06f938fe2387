// SPDX-License-Identifier: MIT
// Collectives over teams and active sets, on the runtime's one-sided operations:
// a dissemination barrier on symmetric counters, then every member pulls (get) or
// pushes (put) its share directly between the users' symmetric buffers.
#include "capi/collectives.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "capi/inbox.h"
#include "capi/typed_helpers.h"
#include "capi/wait.h"
#include "mori/core/env.h"
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
  g.channel = Inbox::kActiveSetChannel;
  return g;
}

bool shares_this_host(const Group& g, mori::shmem::Runtime& r) { return r.shares_host(g.pes, g.n, g.arrived); }

namespace {

// Same host: the runtime's barrier (Runtime::barrier_same_host) on the group's words.
void central_barrier(Group& g, mori::shmem::Runtime& r, const char* fn) {
  r.barrier_same_host(g.pes, g.n, g.me, g.arrived, g.released, 0, fn);
}

// Across hosts (or over ucx) a large broadcast is pushed: each member tells the root that its
// dest is free (one notify on the root's arrival counter); the root waits for all of them, then
// the data goes down a binomial tree, each PE putting it into its children's dest with a
// signal on their release word (the root to members n/2, n/4, ..., 1 away, each of those on to
// its own subtree), so the root sends log2(n) copies, not n - 1, and the subtrees' copies run
// at once. Only the root waits for notices: the counter is consumed by n - 1, so it is zero
// between broadcasts, and a member sends its next notice only after this broadcast's data
// reached it, so no notice of the next one is counted in this one (a forwarding PE needs no
// notice of its own: every dest was free before the root sent anything).
void push_broadcast(Group& g, void* dest, const void* source, size_t bytes, int root, bool root_copies,
                    const char* fn) {
  auto& r = rt(fn);
  const int n = g.n, rel = (g.me - root + n) % n;  // position in the tree, the root at 0
  auto send_subtrees = [&](const void* data, int below) {
    // Children at rel + m for m = below/2, below/4, ..., 1: the biggest subtree first.
    bool sent = false;
    for (int m = below >> 1; m >= 1; m >>= 1) {
      if (rel + m >= n) continue;
      const int pe = g.pes[(rel + m + root) % n];
      if (bytes) r.put_signal(dest, data, bytes, g.released, 1, SignalOp::kSet, pe, true);
      else r.notify(nullptr, nullptr, 0, g.released, 1, SignalOp::kSet, pe, fn);
      sent = true;
    }
    if (sent) r.quiet();  // the data (source, or this PE's dest) may be reused on return
  };
  if (rel == 0) {
    uint64_t* ready = g.arrived;
    const uint64_t others = static_cast<uint64_t>(n - 1);
    bool rung = true;
    for (int k = 0; k < n; ++k) rung = rung && (k == g.me || r.rings_on_delivery(g.pes[k]));
    wait([&] { return __atomic_load_n(ready, __ATOMIC_ACQUIRE) >= others; }, fn, ready,
         mori::shmem::WaitFrom{-1, 0, rung},
         [&] { return "the broadcast's members to free their dest (" +
                      std::to_string(__atomic_load_n(ready, __ATOMIC_ACQUIRE)) + " of " + std::to_string(others) + ")"; });
    __atomic_fetch_sub(ready, others, __ATOMIC_ACQ_REL);
    int top = 1;
    while (top < n) top <<= 1;
    send_subtrees(source, top);
    if (root_copies && dest != source) std::memmove(dest, source, bytes);
    return;
  }
  r.notify(nullptr, nullptr, 0, g.arrived, 1, SignalOp::kAdd, g.pes[root], fn);
  const int low = rel & -rel;  // the parent is rel - low
  const int from = g.pes[(rel - low + root) % n];
  uint64_t* mine = g.released;
  wait([&] { return __atomic_load_n(mine, __ATOMIC_ACQUIRE) != 0; }, fn, mine,
       mori::shmem::WaitFrom{from, 0, false},
       [&] { return "PE " + std::to_string(from) + " to pass on the broadcast of PE " + std::to_string(g.pes[root]); });
  __atomic_store_n(mine, 0, __ATOMIC_RELAXED);
  send_subtrees(dest, low);
}

}  // namespace

void group_barrier(Group& g, const char* fn, bool sync_only) {
  auto& r = rt(fn);
  if (!sync_only) r.quiet();
  if (g.n == 1) return;
  if (shares_this_host(g, r)) return central_barrier(g, r, fn);
  // Dissemination: in round k tell member me+2^k, then wait for member me-2^k. Each
  // arrival is consumed (decremented), so the counters are zero again afterwards and
  // an early arrival from the next barrier is kept, not lost.
  for (int round = 0, dist = 1; dist < g.n; ++round, dist <<= 1) {
    int partner = g.pes[(g.me + dist) % g.n];
    int from = g.pes[(g.me - dist % g.n + g.n) % g.n];  // who signals me in this round
    r.notify(nullptr, nullptr, 0, &g.counters[round], 1, SignalOp::kAdd, partner, fn);
    uint64_t* mine = &g.counters[round];
    wait([&] { return __atomic_load_n(mine, __ATOMIC_ACQUIRE) >= 1; }, fn, mine,
         mori::shmem::WaitFrom{from, 0, r.rings_on_delivery(from)},
         [&] { return "PE " + std::to_string(from) + " to reach the barrier (round " + std::to_string(round) + ")"; });
    __atomic_fetch_sub(mine, 1, __ATOMIC_ACQ_REL);
  }
}

StagedParts stage_and_meet(Group& g, const void* part, size_t bytes, const char* fn) {
  auto& r = rt(fn);
  // Two members exchange small parts through the inbox instead: one message each way is one
  // wait each too, without the shared arrival word (faster when each PE has its own core).
  // From kStagePairMin bytes staging wins: a message crosses between the cores twice (the
  // sender's stores take the slot's lines from the receiver, which then reads them back), a
  // staged part once (2-PE alltoall of 1 KiB blocks 0.75 -> 0.65 us, of 8 B 0.27 either way).
  constexpr size_t kStagePairMin = 512;
  if (g.n < 2 || (g.n == 2 && bytes < kStagePairMin) || !inbox().stageable(g, bytes, r) || !shares_this_host(g, r))
    return {};
  const uint64_t parity = inbox().next_stage(g);
  if (part && bytes) std::memcpy(inbox().staged_part(g, g.me, parity, r), part, bytes);
  central_barrier(g, r, fn);  // its release publishes every member's part
  StagedParts parts;
  parts.first = inbox().staged_part(g, 0, parity, r);
  parts.stride = static_cast<size_t>(inbox().staged_part(g, 1, parity, r) - parts.first);
  return parts;
}

void check_symmetric(const void* p, size_t bytes, const char* fn) { rt(fn).resolve(p, bytes, fn); }

void broadcast_group(Group& g, void* dest, const void* source, size_t bytes, int root, bool root_copies,
                     const char* fn) {
  if (root < 0 || root >= g.n) raise(Status::kInvalidArgument, "PE_root %d is out of range for %d PEs", root, g.n);
  auto& r = rt(fn);
  // Parts that fit a message go root to member, so that only the members wait, and each for
  // the root alone (a meeting would cost every member the slowest one's arrival); larger ones
  // are staged.
  if (inbox().usable(g, bytes, r)) {
    if (g.me == root) {
      for (int k = 1; k < g.n; ++k) inbox().send(g, (root + k) % g.n, source, bytes, fn);
      if (root_copies && dest != source) std::memmove(dest, source, bytes);
    } else {
      inbox().receive(g, root, dest, bytes, fn);
    }
    return;
  }
  if (StagedParts parts = stage_and_meet(g, g.me == root ? source : nullptr, bytes, fn); parts.valid()) {
    if (g.me != root || root_copies) std::memmove(dest, parts.part(root), bytes);
    return;
  }
  if (!shares_this_host(g, r)) return push_broadcast(g, dest, source, bytes, root, root_copies, fn);
  group_barrier(g, fn);  // the root's source is ready and every dest is free
  if (bytes) {
    if (g.me != root) r.get(dest, source, bytes, g.pes[root]);
    else if (root_copies && dest != source) std::memmove(dest, source, bytes);
  }
  group_barrier(g, fn);  // the root may reuse its source
}

void fcollect_group(Group& g, void* dest, const void* source, size_t bytes, const char* fn) {
  auto& r = rt(fn);
  if (StagedParts parts = stage_and_meet(g, source, bytes, fn); parts.valid()) {
    for (int j = 0; j < g.n; ++j) std::memcpy(static_cast<char*>(dest) + static_cast<size_t>(j) * bytes, parts.part(j), bytes);
    return;
  }
  if (inbox().usable(g, bytes, r)) {
    char* out = static_cast<char*>(dest);
    for (int k = 1; k < g.n; ++k) inbox().send(g, (g.me + k) % g.n, source, bytes, fn);
    std::memmove(out + static_cast<size_t>(g.me) * bytes, source, bytes);
    for (int k = 1; k < g.n; ++k) {
      int j = (g.me - k + g.n) % g.n;  // in the order the others sent to me
      inbox().receive(g, j, out + static_cast<size_t>(j) * bytes, bytes, fn);
    }
    return;
  }
  if (!shares_this_host(g, r)) {
    // Off shared memory every member reads the others' parts: gets that overlap beat puts
    // that do (64 KiB parts on 2 cores, AMD VM, over UCX's tcp: 4 PEs 1.44 -> 0.72 ms, 8 PEs
    // 9.5 -> 4.7 ms; over MORI's tcp 0.91 -> 0.69 and 4.3 -> 3.4 ms; alternated runs).
    group_barrier(g, fn);  // every source is ready, every dest free
    if (bytes) {
      char* out = static_cast<char*>(dest);
      std::memmove(out + static_cast<size_t>(g.me) * bytes, source, bytes);
      for (int k = 1; k < g.n; ++k) {
        const int j = (g.me + k) % g.n;  // start at different peers to spread the traffic
        r.get(out + static_cast<size_t>(j) * bytes, source, bytes, g.pes[j], true);
      }
    }
    return group_barrier(g, fn);  // its quiet completes the gets: the sources may be reused
  }
  group_barrier(g, fn);
  if (bytes) {
    char* at = static_cast<char*>(dest) + static_cast<size_t>(g.me) * bytes;
    for (int k = 0; k < g.n; ++k) {
      int j = (g.me + k) % g.n;  // start at different peers to spread the traffic
      r.put(at, source, bytes, g.pes[j], true);
    }
  }
  group_barrier(g, fn);
}

void collect_group(Group& g, void* dest, const void* source, size_t bytes, const char* fn) {
  auto& r = rt(fn);
  group_barrier(g, fn);
  // Running offset: member k waits for k-1's end offset (stored +1 so zero means "not yet").
  uint64_t offset = 0;
  if (g.me > 0) {
    uint64_t* mine = g.chain;
    int from = g.pes[g.me - 1];
    wait([&] { return __atomic_load_n(mine, __ATOMIC_ACQUIRE) != 0; }, fn, mine,
         mori::shmem::WaitFrom{from, 0, r.rings_on_delivery(from)},
         [&] { return "PE " + std::to_string(from) + " to pass on the running offset of collect"; });
    offset = __atomic_load_n(mine, __ATOMIC_ACQUIRE) - 1;
    __atomic_store_n(mine, 0, __ATOMIC_RELEASE);
  }
  if (g.me + 1 < g.n) r.notify(nullptr, nullptr, 0, g.chain, offset + bytes + 1, SignalOp::kSet, g.pes[g.me + 1], fn);
  if (bytes) {
    char* at = static_cast<char*>(dest) + offset;
    for (int k = 0; k < g.n; ++k) r.put(at, source, bytes, g.pes[(g.me + k) % g.n], true);
  }
  group_barrier(g, fn);
}

void alltoalls_group(Group& g, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems,
                     size_t elem, const char* fn) {
  auto& r = rt(fn);
  const size_t block = nelems * elem;
  if (dst == 1 && sst == 1) {
    // Member i stages its n blocks; member j takes block j of every member's part.
    if (StagedParts parts = stage_and_meet(g, source, block * g.n, fn); parts.valid()) {
      for (int i = 0; i < g.n; ++i)
        std::memcpy(static_cast<char*>(dest) + static_cast<size_t>(i) * block,
                    parts.part(i) + static_cast<size_t>(g.me) * block, block);
      return;
    }
  }
  if (dst == 1 && sst == 1 && inbox().usable(g, block, r)) {
    char* out = static_cast<char*>(dest);
    const char* in = static_cast<const char*>(source);
    for (int k = 1; k < g.n; ++k) {
      int j = (g.me + k) % g.n;
      inbox().send(g, j, in + static_cast<size_t>(j) * block, block, fn);
    }
    std::memmove(out + static_cast<size_t>(g.me) * block, in + static_cast<size_t>(g.me) * block, block);
    for (int k = 1; k < g.n; ++k) {
      int j = (g.me - k + g.n) % g.n;
      inbox().receive(g, j, out + static_cast<size_t>(j) * block, block, fn);
    }
    return;
  }
  group_barrier(g, fn);
  if (nelems) {
    for (int k = 0; k < g.n; ++k) {
      int j = (g.me + k) % g.n;
      char* d = static_cast<char*>(dest) + static_cast<ptrdiff_t>(j * nelems * elem) * dst;
      const char* s = static_cast<const char*>(source) + static_cast<ptrdiff_t>(g.me * nelems * elem) * sst;
      if (dst == 1 && sst == 1) r.get(d, s, nelems * elem, g.pes[j], true);
      else r.iget(d, s, dst, sst, nelems, elem, g.pes[j]);
    }
  }
  group_barrier(g, fn);  // its quiet completes the gets
}

// ---- noexcept entry points of the typed team routines

int broadcast(shmem_team_t team, void* dest, const void* source, size_t bytes, int root, const char* fn) noexcept {
  return capi_call(fn, [&] {
  Group g = team_group(team, fn);
  if (g.me < 0) return -1;
  broadcast_group(g, dest, source, bytes, root, true, fn);
  return 0;
  });
}

int collect(shmem_team_t team, void* dest, const void* source, size_t bytes, const char* fn) noexcept {
  return capi_call(fn, [&] {
  Group g = team_group(team, fn);
  if (g.me < 0) return -1;
  collect_group(g, dest, source, bytes, fn);
  return 0;
  });
}

int fcollect(shmem_team_t team, void* dest, const void* source, size_t bytes, const char* fn) noexcept {
  return capi_call(fn, [&] {
  Group g = team_group(team, fn);
  if (g.me < 0) return -1;
  fcollect_group(g, dest, source, bytes, fn);
  return 0;
  });
}

int alltoall(shmem_team_t team, void* dest, const void* source, size_t bytes, const char* fn) noexcept {
  return capi_call(fn, [&] {
  Group g = team_group(team, fn);
  if (g.me < 0) return -1;
  alltoalls_group(g, dest, source, 1, 1, 1, bytes, fn);
  return 0;
  });
}

int alltoalls(shmem_team_t team, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems,
              size_t elem, const char* fn) noexcept {
  return capi_call(fn, [&] {
  Group g = team_group(team, fn);
  if (g.me < 0) return -1;
  alltoalls_group(g, dest, source, dst, sst, nelems, elem, fn);
  return 0;
  });
}

}  // namespace mori::capi

using namespace mori::capi;

extern "C" {

void shmem_barrier_all(void) {
  return capi_call("shmem_barrier_all", [&] {
  Group g = team_group(SHMEM_TEAM_WORLD, "shmem_barrier_all");
  group_barrier(g, "shmem_barrier_all");
  });
}

void shmem_sync_all(void) {
  return capi_call("shmem_sync_all", [&] {
  Group g = team_group(SHMEM_TEAM_WORLD, "shmem_sync_all");
  group_barrier(g, "shmem_sync_all", true);
  });
}

int shmem_team_sync(shmem_team_t team) {
  return capi_call("shmem_team_sync", [&] {
  Group g = team_group(team, "shmem_team_sync");
  if (g.me < 0) return -1;
  group_barrier(g, "shmem_team_sync", true);
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
int shmem_alltoallsmem(shmem_team_t team, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst,
                       size_t nelems) {
  return alltoalls(team, dest, source, dst, sst, nelems, 1, "shmem_alltoallsmem");
}

// ---- active sets (pSync holds the barrier counters and the collect offset word)

void shmem_barrier(int PE_start, int logPE_stride, int PE_size, long* pSync) {
  return capi_call("shmem_barrier", [&] {
  Group g = active_group(PE_start, logPE_stride, PE_size, pSync, "shmem_barrier");
  group_barrier(g, "shmem_barrier");
  });
}

void shmem_sync(int PE_start, int logPE_stride, int PE_size, long* pSync) {
  return capi_call("shmem_sync", [&] {
  Group g = active_group(PE_start, logPE_stride, PE_size, pSync, "shmem_sync");
  group_barrier(g, "shmem_sync", true);
  });
}

#define MORI_ACTIVE_SIZED(BITS)                                                                                     \
  void shmem_broadcast##BITS(void* dest, const void* source, size_t nelems, int PE_root, int PE_start,              \
                             int logPE_stride, int PE_size, long* pSync) {                                          \
    const char* fn = "shmem_broadcast" #BITS;                                                                       \
    return capi_call(fn, [&] {                                                                                      \
    Group g = active_group(PE_start, logPE_stride, PE_size, pSync, fn);                                             \
    broadcast_group(g, dest, source, nelems * (BITS / 8), PE_root, false, fn);                                      \
    });                                                                                                             \
  }                                                                                                                 \
  void shmem_collect##BITS(void* dest, const void* source, size_t nelems, int PE_start, int logPE_stride,           \
                           int PE_size, long* pSync) {                                                              \
    const char* fn = "shmem_collect" #BITS;                                                                         \
    return capi_call(fn, [&] {                                                                                      \
    Group g = active_group(PE_start, logPE_stride, PE_size, pSync, fn);                                             \
    collect_group(g, dest, source, nelems * (BITS / 8), fn);                                                        \
    });                                                                                                             \
  }                                                                                                                 \
  void shmem_fcollect##BITS(void* dest, const void* source, size_t nelems, int PE_start, int logPE_stride,          \
                            int PE_size, long* pSync) {                                                             \
    const char* fn = "shmem_fcollect" #BITS;                                                                        \
    return capi_call(fn, [&] {                                                                                      \
    Group g = active_group(PE_start, logPE_stride, PE_size, pSync, fn);                                             \
    fcollect_group(g, dest, source, nelems * (BITS / 8), fn);                                                       \
    });                                                                                                             \
  }                                                                                                                 \
  void shmem_alltoall##BITS(void* dest, const void* source, size_t nelems, int PE_start, int logPE_stride,          \
                            int PE_size, long* pSync) {                                                             \
    const char* fn = "shmem_alltoall" #BITS;                                                                        \
    return capi_call(fn, [&] {                                                                                      \
    Group g = active_group(PE_start, logPE_stride, PE_size, pSync, fn);                                             \
    alltoalls_group(g, dest, source, 1, 1, 1, nelems * (BITS / 8), fn);                                             \
    });                                                                                                             \
  }                                                                                                                 \
  void shmem_alltoalls##BITS(void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems,          \
                             int PE_start, int logPE_stride, int PE_size, long* pSync) {                            \
    const char* fn = "shmem_alltoalls" #BITS;                                                                       \
    return capi_call(fn, [&] {                                                                                      \
    Group g = active_group(PE_start, logPE_stride, PE_size, pSync, fn);                                             \
    alltoalls_group(g, dest, source, dst, sst, nelems, BITS / 8, fn);                                               \
    });                                                                                                             \
  }

MORI_ACTIVE_SIZED(32)
MORI_ACTIVE_SIZED(64)

}  // extern "C"
