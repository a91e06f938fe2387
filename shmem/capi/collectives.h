// SPDX-License-Identifier: MIT
// The C API's collectives: argument checks that turn a team or an active set into a group of
// the host collective engine (mori/shmem/collective_engine.h), which runs them.
#pragma once

#include <shmem.h>

#include <cstddef>

#include "capi/state.h"
#include "mori/shmem/collective_engine.h"

namespace mori::capi {

namespace coll = mori::shmem::coll;
using coll::Group;

static_assert(kMaxTeams == coll::kTeamChannels, "one inbox channel per team slot");
static_assert(TeamSlot::kRounds == coll::kBarrierRounds, "a team slot holds the barrier's rounds");

// A team's group: its members, its slot's symmetric words, its inbox channel.
Group team_group(shmem_team_t team, const char* fn);
// Checks the arguments; throws when this PE is not in the active set. The words are in pSync.
Group active_group(int start, int log_stride, int size, long* psync, const char* fn);

// Throws naming `fn` unless [p, p+bytes) is symmetric memory.
void check_symmetric(const void* p, size_t bytes, const char* fn);

}  // namespace mori::capi
