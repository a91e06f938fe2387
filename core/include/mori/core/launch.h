// SPDX-License-Identifier: MIT
// Which launcher started this process, and the bootstrap that follows from it: the one
// launcher detection, used by shmem_init() in C programs and by mori.core.bootstrap in Python.
//
// Order: `mori run` / oshrun (MORI_STORE_ADDR), mpirun (Open MPI, PMI or PMIx variables),
// torchrun (TORCHELASTIC_RUN_ID) or plain MASTER_ADDR/RANK/WORLD_SIZE, else a job of one PE.
// The job secret of a MASTER_ADDR job follows launch_secret.h's policy.
#pragma once

#include <memory>
#include <string>

#include "mori/core/bootstrap.h"

namespace mori {

struct LaunchInfo {
  std::string kind = "single";  // "mori-run", "mpi", "torchrun", "env" or "single"
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string store_host;  // mori-run, torchrun, env: where the bootstrap store listens
  int store_port = 0;
  std::string secret_hex;       // mori-run, torchrun, env: the job secret (64 hex digits)
  bool derived_secret = false;  // computed from the store's address (one host only)
  bool local_size_known = false;
  bool openmpi = false;  // mpi: started by Open MPI's mpirun (else an MPICH-style PMI launcher)
};

// Reads the launcher's variables now (not the cached settings). Throws mori::Error
// (kInvalidArgument) for an inconsistent environment, or a job that may span hosts without
// MORI_JOB_SECRET.
LaunchInfo detect_launch();

// The bootstrap for this process as detect_launch() finds it. Under mpirun it loads libmpi at
// run time (mpi_bootstrap.h). Sets *mpi_initialized when it called MPI_Init itself.
std::unique_ptr<Bootstrap> make_launch_bootstrap(bool* mpi_initialized);

}  // namespace mori
