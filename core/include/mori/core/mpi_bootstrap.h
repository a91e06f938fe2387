// SPDX-License-Identifier: MIT
// A bootstrap over MPI_COMM_WORLD with libmpi loaded at run time (dlopen + function pointers),
// so libmori needs no MPI at link time: Open MPI (handles are addresses of exported objects)
// or the MPICH ABI (integer handles). MORI_MPI_LIBRARY names the library when the default
// names do not find it.
#pragma once

#include <memory>

#include "mori/core/bootstrap.h"

namespace mori {

// Loads libmpi (once per process) and calls MPI_Init unless MPI is initialized already, in
// which case *we_initialized stays false. `openmpi`: the launcher is Open MPI's mpirun.
std::unique_ptr<Bootstrap> make_mpi_bootstrap(bool openmpi, bool* we_initialized);

// Calls MPI_Finalize when make_mpi_bootstrap initialized MPI (and nobody finalized it since).
void finalize_mpi_bootstrap();

}  // namespace mori
