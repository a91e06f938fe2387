// SPDX-License-Identifier: MIT
#include "mori/core/launch.h"

#include <cstdlib>
#include <initializer_list>
#include <string>

#include "mori/core/env.h"
#include "mori/core/launch_secret.h"
#include "mori/core/log.h"
#include "mori/core/mpi_bootstrap.h"
#include "mori/core/status.h"
#include "mori/core/store.h"
#include "mori/core/unique_id.h"

namespace mori {
namespace {

// The launchers' own variables (Open MPI, PMI, torchrun, mori run's local ones). MORI's
// settings come from the env table; these are other programs' names, read only here.
const char* launcher_var(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// The first of `names` that is set, as an integer; `fallback` when none is.
int launcher_int(std::initializer_list<const char*> names, int fallback) {
  for (const char* n : names)
    if (const char* v = launcher_var(n)) {
      char* end = nullptr;
      long x = std::strtol(v, &end, 10);
      if (end == v || *end != '\0') raise(Status::kInvalidArgument, "%s=%s is not an integer", n, v);
      return static_cast<int>(x);
    }
  return fallback;
}

constexpr auto kMpiSize = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"};
constexpr auto kMpiRank = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};

}  // namespace

LaunchInfo detect_launch() {
  const env::Settings e = env::current();
  LaunchInfo info;
  // 1. mori run (and oshrun, which uses it): a store hosted by the launcher.
  if (!e.store_addr.empty()) {
    auto colon = e.store_addr.rfind(':');
    if (colon == std::string::npos)
      raise(Status::kInvalidArgument, "MORI_STORE_ADDR=%s is not host:port", e.store_addr.c_str());
    if (e.rank < 0 || e.world_size < 1)
      raise(Status::kInvalidArgument, "MORI_STORE_ADDR is set but MORI_RANK/MORI_WORLD_SIZE are not");
    info.kind = "mori-run";
    info.rank = static_cast<int>(e.rank);
    info.size = static_cast<int>(e.world_size);
    info.local_rank = launcher_int({"MORI_LOCAL_RANK"}, 0);
    info.local_size = launcher_int({"MORI_LOCAL_WORLD_SIZE"}, 1);
    info.local_size_known = launcher_var("MORI_LOCAL_WORLD_SIZE") != nullptr;
    info.store_host = e.store_addr.substr(0, colon);
    info.store_port = std::atoi(e.store_addr.c_str() + colon + 1);
    info.secret_hex = e.job_secret;
    return info;
  }
  // 2. mpirun (Open MPI, or an MPICH-style PMI launcher).
  int mpi_size = launcher_int(kMpiSize, -1);
  int mpi_rank = launcher_int(kMpiRank, -1);
  if (mpi_size > 0 && mpi_rank >= 0) {
    info.kind = "mpi";
    info.rank = mpi_rank;
    info.size = mpi_size;
    info.local_rank = launcher_int({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}, 0);
    info.local_size = launcher_int({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}, 1);
    info.local_size_known = launcher_var("OMPI_COMM_WORLD_LOCAL_SIZE") || launcher_var("MPI_LOCALNRANKS");
    info.openmpi = launcher_var("OMPI_COMM_WORLD_SIZE") != nullptr;
    return info;
  }
  // 3. torchrun-style variables. torchrun's agent (or torch's rank-0 store) owns MASTER_PORT, so
  // MORI's store, hosted by rank 0, uses the next port unless MORI_MASTER_PORT says otherwise.
  const char* addr = launcher_var("MASTER_ADDR");
  if (addr && launcher_var("RANK") && launcher_var("WORLD_SIZE")) {
    const char* run_id = launcher_var("TORCHELASTIC_RUN_ID");
    info.kind = run_id ? "torchrun" : "env";
    info.rank = launcher_int({"RANK"}, 0);
    info.size = launcher_int({"WORLD_SIZE"}, 1);
    info.local_rank = launcher_int({"LOCAL_RANK"}, 0);
    int local_size = launcher_int({"LOCAL_WORLD_SIZE"}, -1);
    info.local_size_known = local_size >= 0;
    info.local_size = info.local_size_known ? local_size : 1;
    info.store_port = e.master_port ? static_cast<int>(e.master_port) : launcher_int({"MASTER_PORT"}, 29500) + 1;
    EnvLaunchSecret s =
        env_launch_secret(e.job_secret, addr, info.store_port, run_id ? run_id : "", info.size, local_size);
    info.store_host = s.store_host;
    info.secret_hex = s.secret_hex;
    info.derived_secret = s.derived;
    return info;
  }
  return info;
}

std::unique_ptr<Bootstrap> make_launch_bootstrap(bool* mpi_initialized) {
  *mpi_initialized = false;
  LaunchInfo info = detect_launch();
  if (info.kind == "mpi") return make_mpi_bootstrap(info.openmpi, mpi_initialized);
  if (info.kind == "single") return make_single_bootstrap();
  if (info.kind == "mori-run")
    return bootstrap_from_store(info.store_host, info.store_port, secret_from_hex(info.secret_hex), info.rank,
                                info.size, false);
  // torchrun / env: rank 0 hosts the store.
  if (info.derived_secret && info.local_rank == 0)
    MORI_LOG(kWarn, "BOOTSTRAP",
             "MORI_JOB_SECRET is not set, so the job secret is derived from MASTER_ADDR and the port, and anyone "
             "on this host who knows them can join the job; set the same random MORI_JOB_SECRET (64 hex digits) "
             "on every rank");
  return bootstrap_from_store(info.store_host, info.store_port, secret_from_hex(info.secret_hex), info.rank, info.size,
                              info.rank == 0, 0);
}

}  // namespace mori
