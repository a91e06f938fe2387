// SPDX-License-Identifier: MIT
// The PE group a collective runs over: a team (symmetric counters in its slot) or
// an active set (PE_start, logPE_stride, PE_size; counters in the caller's pSync).
#pragma once

#include <shmem.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mori::shmem {
class Runtime;
}

namespace mori::capi {

struct Group {
  std::vector<int> storage;   // active sets own their PE list
  const int* pes = nullptr;   // world PE of each member
  int n = 0;
  int me = -1;                // my index, -1 when not a member
  uint64_t* counters = nullptr;  // symmetric barrier counters (TeamSlot::kRounds words)
  uint64_t* chain = nullptr;     // symmetric running-offset word of collect
  uint64_t* arrived = nullptr;   // same-host barrier: arrival mask (on member 0)
  uint64_t* released = nullptr;  // same-host barrier: this member's release flag
  bool world = false;
  int channel = -1;              // the Inbox channel: the team's slot, or the active sets' one
};

Group team_group(shmem_team_t team, const char* fn);
// Checks the arguments; throws when this PE is not in the active set.
Group active_group(int start, int log_stride, int size, long* psync, const char* fn);

// Barrier over the group: completes this PE's outstanding RMA first (quiet) unless `sync_only`.
// Members that all share this host (at most 64) meet at a central arrival mask and sleep
// until the last one wakes them (one wake-up each per barrier); others run a dissemination
// barrier (log2(n) rounds of point-to-point signals).
void group_barrier(Group& g, const char* fn, bool sync_only = false);

// Whether every member of `g` is a PE of this host reached through shared memory (the same
// answer on every member).
bool shares_this_host(const Group& g, mori::shmem::Runtime& r);

// Same-host small collectives: when the group's 3 or more members are all on this host (shared
// memory) and a part
// fits the inbox, each member copies its `bytes` of `part` (nullptr: nothing) into member 0's
// staging, the members meet at the central barrier, and the parts are then read from there
// (one wake-up per PE per collective). `valid()` false: the caller takes another path.
struct StagedParts {
  const char* first = nullptr;
  size_t stride = 0;
  bool valid() const { return first != nullptr; }
  const char* part(int member) const { return first + static_cast<size_t>(member) * stride; }
};
StagedParts stage_and_meet(Group& g, const void* part, size_t bytes, const char* fn);

// Throws naming `fn` unless [p, p+bytes) is symmetric memory.
void check_symmetric(const void* p, size_t bytes, const char* fn);

// Byte-level collectives over a group (team and active-set routines share them).
void broadcast_group(Group& g, void* dest, const void* source, size_t bytes, int root, bool root_copies,
                     const char* fn);
void collect_group(Group& g, void* dest, const void* source, size_t bytes, const char* fn);
void fcollect_group(Group& g, void* dest, const void* source, size_t bytes, const char* fn);
void alltoalls_group(Group& g, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems,
                     size_t elem, const char* fn);

}  // namespace mori::capi
