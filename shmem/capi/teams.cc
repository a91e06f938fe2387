// SPDX-License-Identifier: MIT
// Teams: SHMEM_TEAM_WORLD, SHMEM_TEAM_SHARED and teams split from them. Each team
// uses one TeamSlot of the symmetric block; members agree on a free slot with an
// OR-reduction of their in-use masks over the parent team.
#include <mutex>
#include <set>

#include "capi/collectives.h"
#include "mori/shmem/collective_engine.h"
#include "capi/state.h"
#include "mori/core/status.h"

struct mori_shmem_team mori_shmem_team_world, mori_shmem_team_shared;

namespace mori::capi {
namespace {

std::mutex g_teams_mu;
std::set<mori_shmem_team*> g_teams;  // live user-created teams

void fill_team(mori_shmem_team& t, std::vector<int> pes, int slot, int my_pe, int n_pes) {
  t.pes = std::move(pes);
  t.index_of.assign(n_pes, -1);
  for (size_t i = 0; i < t.pes.size(); ++i) t.index_of[t.pes[i]] = static_cast<int>(i);
  t.my_index = t.index_of[my_pe];
  t.slot = slot;
  t.config = {};
  t.config_mask = 0;
}

// Bitwise OR of every parent member's in-use slot mask (collective over the parent).
uint64_t slots_in_use(mori_shmem_team* parent, const char* fn) {
  auto& r = rt(fn);
  auto& st = state();
  Group g = team_group(parent, fn);
  uint64_t* scratch = &st.sym->teams[parent->slot].scratch;
  __atomic_store_n(scratch, st.used_slots, __ATOMIC_RELEASE);
  coll::barrier(g, fn);
  uint64_t all = 0;
  for (int j = 0; j < g.n; ++j) all |= r.atomic(scratch, AmoOp::kFetch, 8, 0, 0, g.pes[j], fn);
  coll::barrier(g, fn);  // nobody rewrites its scratch while another member reads it
  return all;
}

int free_slot(uint64_t used, int after = -1) {
  for (int s = 2; s < kMaxTeams; ++s)
    if (!(used >> s & 1) && s != after) return s;
  return -1;
}

mori_shmem_team* make_team(std::vector<int> pes, int slot, const shmem_team_config_t* config, long mask,
                           const char* fn) {
  auto& r = rt(fn);
  auto* t = new mori_shmem_team();
  fill_team(*t, std::move(pes), slot, r.my_pe(), r.n_pes());
  if (config && (mask & SHMEM_TEAM_NUM_CONTEXTS)) t->config.num_contexts = config->num_contexts;
  t->config_mask = mask;
  state().used_slots |= 1ull << slot;
  shmem::coll::inbox().restart_stages(slot);  // every member of the new team counts its staged collectives from 0
  std::lock_guard<std::mutex> lock(g_teams_mu);
  g_teams.insert(t);
  return t;
}

}  // namespace

void setup_predefined_teams() {
  auto& r = rt("shmem_init");
  std::vector<int> world(r.n_pes());
  for (int i = 0; i < r.n_pes(); ++i) world[i] = i;
  fill_team(mori_shmem_team_world, world, 0, r.my_pe(), r.n_pes());
  mori_shmem_team_world.predefined = mori_shmem_team_world.world = true;
  fill_team(mori_shmem_team_shared, r.topology().local_pes(), 1, r.my_pe(), r.n_pes());
  mori_shmem_team_shared.predefined = true;
  mori_shmem_team_shared.world = r.topology().local_size() == r.n_pes();
  state().used_slots = 0b11;
}

void teardown_teams() {
  std::lock_guard<std::mutex> lock(g_teams_mu);
  for (auto* t : g_teams) delete t;
  g_teams.clear();
  mori_shmem_team_world = {};
  mori_shmem_team_shared = {};
}

mori_shmem_team* check_team(shmem_team_t team, const char* fn) {
  rt(fn);
  if (team == SHMEM_TEAM_INVALID) raise(Status::kInvalidArgument, "team is SHMEM_TEAM_INVALID");
  if (team != &mori_shmem_team_world && team != &mori_shmem_team_shared) {
    std::lock_guard<std::mutex> lock(g_teams_mu);
    if (!g_teams.count(team)) raise(Status::kInvalidArgument, "team %p is not a live team", static_cast<void*>(team));
  }
  return team;
}

bool team_alive(shmem_team_t team) {
  if (team == &mori_shmem_team_world || team == &mori_shmem_team_shared) return true;
  std::lock_guard<std::mutex> lock(g_teams_mu);
  return g_teams.count(team) != 0;
}

}  // namespace mori::capi

using namespace mori::capi;
using mori::Status;

extern "C" {

int shmem_team_my_pe(shmem_team_t team) {
  return capi_call("shmem_team_my_pe", [&] {
    rt("shmem_team_my_pe");
    if (team == SHMEM_TEAM_INVALID || !team_alive(team)) return -1;
    return team->my_index;
  });
}

int shmem_team_n_pes(shmem_team_t team) {
  return capi_call("shmem_team_n_pes", [&] {
    rt("shmem_team_n_pes");
    if (team == SHMEM_TEAM_INVALID || !team_alive(team)) return -1;
    return static_cast<int>(team->pes.size());
  });
}

int shmem_team_get_config(shmem_team_t team, long config_mask, shmem_team_config_t* config) {
  return capi_call("shmem_team_get_config", [&] {
    rt("shmem_team_get_config");
    if (team == SHMEM_TEAM_INVALID || !team_alive(team)) return -1;
    if (config_mask == 0) return 0;  // 1.6: nothing asked, nothing read or written (config may be NULL)
    if (!config) return -1;
    if (config_mask & SHMEM_TEAM_NUM_CONTEXTS) config->num_contexts = team->config.num_contexts;
    return 0;
  });
}

int shmem_team_translate_pe(shmem_team_t src_team, int src_pe, shmem_team_t dest_team) {
  return capi_call("shmem_team_translate_pe", [&] {
    rt("shmem_team_translate_pe");
    if (src_team == SHMEM_TEAM_INVALID || dest_team == SHMEM_TEAM_INVALID || !team_alive(src_team) ||
        !team_alive(dest_team))
      return -1;
    if (src_pe < 0 || src_pe >= static_cast<int>(src_team->pes.size())) return -1;
    return dest_team->index_of[src_team->pes[src_pe]];
  });
}

int shmem_team_split_strided(shmem_team_t parent, int start, int stride, int size, const shmem_team_config_t* config,
                             long config_mask, shmem_team_t* new_team) {
  const char* fn = "shmem_team_split_strided";
  return capi_call(fn, [&] {
    rt(fn);
    if (!new_team) mori::raise(Status::kInvalidArgument, "new_team is NULL");
    *new_team = SHMEM_TEAM_INVALID;
    if (parent == SHMEM_TEAM_INVALID || !team_alive(parent)) return -1;
    if (parent->my_index < 0) return -1;
    int pn = static_cast<int>(parent->pes.size());
    // Arguments are the same on every member, so every member rejects them alike.
    bool ok = size >= 1 && start >= 0 && start < pn && (stride != 0 || size == 1);
    long last = static_cast<long>(start) + static_cast<long>(size - 1) * stride;
    ok = ok && last >= 0 && last < pn;
    if (!ok) return -1;
    std::vector<int> pes;
    for (int i = 0; i < size; ++i) pes.push_back(parent->pes[start + i * stride]);
    uint64_t used = slots_in_use(parent, fn);
    int slot = free_slot(used);
    if (slot < 0) return -1;  // all members see the same mask: all fail together
    bool member = false;
    for (int pe : pes) member |= pe == parent->pes[parent->my_index];
    if (member) *new_team = make_team(std::move(pes), slot, config, config_mask, fn);
    return 0;
  });
}

int shmem_team_split_2d(shmem_team_t parent, int xrange, const shmem_team_config_t* xaxis_config, long xaxis_mask,
                        shmem_team_t* xaxis_team, const shmem_team_config_t* yaxis_config, long yaxis_mask,
                        shmem_team_t* yaxis_team) {
  const char* fn = "shmem_team_split_2d";
  return capi_call(fn, [&] {
    rt(fn);
    if (!xaxis_team || !yaxis_team) mori::raise(Status::kInvalidArgument, "xaxis_team or yaxis_team is NULL");
    *xaxis_team = *yaxis_team = SHMEM_TEAM_INVALID;
    if (parent == SHMEM_TEAM_INVALID || !team_alive(parent) || parent->my_index < 0 || xrange <= 0) return -1;
    int pn = static_cast<int>(parent->pes.size());
    if (xrange > pn) xrange = pn;
    int me = parent->my_index;
    int row = me / xrange, col = me % xrange;
    std::vector<int> xs, ys;
    for (int i = row * xrange; i < std::min(pn, (row + 1) * xrange); ++i) xs.push_back(parent->pes[i]);
    for (int i = col; i < pn; i += xrange) ys.push_back(parent->pes[i]);
    uint64_t used = slots_in_use(parent, fn);
    int xslot = free_slot(used), yslot = free_slot(used | (xslot >= 0 ? 1ull << xslot : 0));
    if (xslot < 0 || yslot < 0) return -1;
    *xaxis_team = make_team(std::move(xs), xslot, xaxis_config, xaxis_mask, fn);
    *yaxis_team = make_team(std::move(ys), yslot, yaxis_config, yaxis_mask, fn);
    return 0;
  });
}

void shmem_team_destroy(shmem_team_t team) {
  return capi_call("shmem_team_destroy", [&] {
    rt("shmem_team_destroy");
    if (team == SHMEM_TEAM_INVALID || team->predefined) return;
    {
      std::lock_guard<std::mutex> lock(g_teams_mu);
      if (!g_teams.erase(team)) return;
    }
    forget_team_contexts(team);
    state().used_slots &= ~(1ull << team->slot);
    delete team;
  });
}

// OpenSHMEM 1.6: shmem_ptr with a PE number relative to `team`; NULL when the PE is not a
// member, the team is invalid, or its memory is not mapped here.
void* shmem_team_ptr(shmem_team_t team, const void* dest, int pe) {
  return capi_call("shmem_team_ptr", [&]() -> void* {
    auto& r = rt("shmem_team_ptr");
    if (team == SHMEM_TEAM_INVALID || !team_alive(team) || pe < 0 || pe >= static_cast<int>(team->pes.size()))
      return nullptr;
    return r.ptr(dest, team->pes[pe]);
  });
}

}  // extern "C"
