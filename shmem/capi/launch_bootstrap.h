// SPDX-License-Identifier: MIT
// How shmem_init() in a C program finds its peers: the same launcher detection as
// mori.core.bootstrap.detect_launch (mori run, mpirun, MASTER_ADDR/RANK/WORLD_SIZE,
// else a job of one PE).
#pragma once

#include <memory>

#include "mori/core/bootstrap.h"

namespace mori::capi {

// Builds the bootstrap for this process. Under mpirun it loads libmpi at run time
// (MPI_Init + MPI_Allgather through function pointers), so libmori needs no MPI at link time.
// Sets *mpi_initialized when it called MPI_Init itself (finalize then calls MPI_Finalize).
std::unique_ptr<Bootstrap> make_launch_bootstrap(bool* mpi_initialized);

// Calls MPI_Finalize when make_launch_bootstrap initialized MPI.
void finalize_launch_mpi();

}  // namespace mori::capi
