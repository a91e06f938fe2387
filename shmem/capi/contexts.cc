// SPDX-License-Identifier: MIT
// Communication contexts. Every context shares the runtime's transports, so ordering
// and completion (fence/quiet) on any context cover the others too, which the spec
// allows; a context created from a team numbers PEs relative to that team.
#include <mutex>
#include <set>

#include "capi/state.h"
#include "mori/core/status.h"

struct mori_shmem_ctx mori_shmem_ctx_default = {&mori_shmem_team_world, 0, true};

namespace mori::capi {
namespace {

std::mutex g_ctx_mu;
std::set<mori_shmem_ctx*> g_ctxs;

int create(mori_shmem_team* team, long options, shmem_ctx_t* ctx) {
  auto* c = new mori_shmem_ctx{team, options, false};
  std::lock_guard<std::mutex> lock(g_ctx_mu);
  g_ctxs.insert(c);
  *ctx = c;
  return 0;
}

}  // namespace

void forget_team_contexts(shmem_team_t team) {
  std::lock_guard<std::mutex> lock(g_ctx_mu);
  for (auto* c : g_ctxs)
    if (c->team == team) c->team = nullptr;
}

int team_world_pe(shmem_ctx_t ctx, int pe, const char* fn) {
  mori_shmem_team* t = ctx->team;
  if (!t) raise(Status::kInvalidArgument, "the context's team was destroyed");
  if (pe < 0 || pe >= static_cast<int>(t->pes.size()))
    raise(Status::kInvalidArgument, "PE %d is out of range for the context's team of %zu PEs", pe, t->pes.size());
  return t->pes[pe];
}

}  // namespace mori::capi

using namespace mori::capi;

extern "C" {

int shmem_ctx_create(long options, shmem_ctx_t* ctx) {
  return capi_call("shmem_ctx_create", [&] {
    rt("shmem_ctx_create");
    if (!ctx) mori::raise(mori::Status::kInvalidArgument, "ctx is NULL");
    return create(&mori_shmem_team_world, options, ctx);
  });
}

int shmem_team_create_ctx(shmem_team_t team, long options, shmem_ctx_t* ctx) {
  return capi_call("shmem_team_create_ctx", [&] {
    rt("shmem_team_create_ctx");
    if (!ctx) mori::raise(mori::Status::kInvalidArgument, "ctx is NULL");
    *ctx = SHMEM_CTX_INVALID;
    if (team == SHMEM_TEAM_INVALID || !team_alive(team) || team->my_index < 0) return -1;
    return create(team, options, ctx);
  });
}

void shmem_ctx_destroy(shmem_ctx_t ctx) {
  return capi_call("shmem_ctx_destroy", [&] {
    auto& r = rt("shmem_ctx_destroy");
    if (ctx == SHMEM_CTX_INVALID || ctx->predefined) return;
    {
      std::lock_guard<std::mutex> lock(g_ctx_mu);
      if (!g_ctxs.erase(ctx)) return;
    }
    r.quiet();  // destroying a context completes its operations
    delete ctx;
  });
}

int shmem_ctx_get_team(shmem_ctx_t ctx, shmem_team_t* team) {
  return capi_call("shmem_ctx_get_team", [&] {
    rt("shmem_ctx_get_team");
    if (!team) return -1;
    if (ctx == SHMEM_CTX_INVALID || !ctx->team) {
      *team = SHMEM_TEAM_INVALID;
      return -1;
    }
    *team = ctx->team;
    return 0;
  });
}

// OpenSHMEM 1.6 sessions are performance hints ("implementations are not required to apply
// any optimization"): MORI's puts and AMOs are already issued directly, so there is
// nothing to batch. The arguments are still checked.
void shmem_ctx_session_start(shmem_ctx_t ctx, long options, const shmem_ctx_session_config_t* config,
                             long config_mask) {
  (void)options;  // any combination of options is allowed
  return capi_call("shmem_ctx_session_start", [&] {
    rt("shmem_ctx_session_start");
    if (ctx == SHMEM_CTX_INVALID) return;
    if (config_mask & ~SHMEM_CTX_SESSION_TOTAL_OPS)
      mori::raise(mori::Status::kInvalidArgument, "config_mask has unknown bits 0x%lx",
                  config_mask & ~SHMEM_CTX_SESSION_TOTAL_OPS);
    if (config_mask && !config) mori::raise(mori::Status::kInvalidArgument, "config is NULL but config_mask is not 0");
  });
}

void shmem_ctx_session_stop(shmem_ctx_t ctx) {
  return capi_call("shmem_ctx_session_stop", [&] {
    rt("shmem_ctx_session_stop");
    (void)ctx;
  });
}

}  // extern "C"
