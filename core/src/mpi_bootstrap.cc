// SPDX-License-Identifier: MIT
#include "mori/core/mpi_bootstrap.h"

#include <dlfcn.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mori/core/env.h"
#include "mori/core/status.h"

namespace mori {
namespace {

// ---- MPI loaded at run time. Open MPI's handles are addresses of exported objects;
// MPICH's are integer constants. H is the handle type of the flavour.
template <typename H>
struct MpiApi {
  int (*Initialized)(int*) = nullptr;
  int (*Finalized)(int*) = nullptr;
  int (*Init)(int*, char***) = nullptr;
  int (*Finalize)() = nullptr;
  int (*Comm_rank)(H, int*) = nullptr;
  int (*Comm_size)(H, int*) = nullptr;
  int (*Allgather)(const void*, int, H, void*, int, H, H) = nullptr;
  int (*Bcast)(void*, int, H, int, H) = nullptr;
  int (*Barrier)(H) = nullptr;
  H comm_world{};
  H byte{};

  void load(void* lib, const char* libname) {
    auto sym = [&](const char* name) {
      void* p = dlsym(lib, name);
      if (!p) raise(Status::kUnavailable, "%s has no symbol %s", libname, name);
      return p;
    };
    Initialized = reinterpret_cast<decltype(Initialized)>(sym("MPI_Initialized"));
    Finalized = reinterpret_cast<decltype(Finalized)>(sym("MPI_Finalized"));
    Init = reinterpret_cast<decltype(Init)>(sym("MPI_Init"));
    Finalize = reinterpret_cast<decltype(Finalize)>(sym("MPI_Finalize"));
    Comm_rank = reinterpret_cast<decltype(Comm_rank)>(sym("MPI_Comm_rank"));
    Comm_size = reinterpret_cast<decltype(Comm_size)>(sym("MPI_Comm_size"));
    Allgather = reinterpret_cast<decltype(Allgather)>(sym("MPI_Allgather"));
    Bcast = reinterpret_cast<decltype(Bcast)>(sym("MPI_Bcast"));
    Barrier = reinterpret_cast<decltype(Barrier)>(sym("MPI_Barrier"));
  }
};

// The process-wide MPI library: loaded once, finalized at shmem_finalize when we initialized it.
struct LoadedMpi {
  void* lib = nullptr;
  bool openmpi = true;
  MpiApi<void*> ompi;  // Open MPI: MPI_Comm / MPI_Datatype are pointers
  MpiApi<int> mpich;   // MPICH ABI: they are ints
  bool we_initialized = false;
};
LoadedMpi g_mpi;

template <typename H>
class MpiBootstrap : public Bootstrap {
 public:
  explicit MpiBootstrap(MpiApi<H>& api) : api_(api) {
    check(api_.Comm_rank(api_.comm_world, &rank_), "MPI_Comm_rank");
    check(api_.Comm_size(api_.comm_world, &size_), "MPI_Comm_size");
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allgather(const void* send, void* recv, size_t bytes) override {
    if (bytes > static_cast<size_t>(INT32_MAX))
      raise(Status::kInvalidArgument, "MPI bootstrap: %zu-byte allgather", bytes);
    int n = static_cast<int>(bytes);
    check(api_.Allgather(send, n, api_.byte, recv, n, api_.byte, api_.comm_world), "MPI_Allgather");
  }
  void broadcast(void* buf, size_t bytes, int root) override {
    check(api_.Bcast(buf, static_cast<int>(bytes), api_.byte, root, api_.comm_world), "MPI_Bcast");
  }
  void barrier() override { check(api_.Barrier(api_.comm_world), "MPI_Barrier"); }
  std::string describe() const override {
    return g_mpi.openmpi ? "mpi (Open MPI, loaded at run time)" : "mpi (MPICH ABI)";
  }

 private:
  static void check(int rc, const char* what) {
    if (rc != 0) raise(Status::kRemote, "%s failed with MPI error %d", what, rc);
  }
  MpiApi<H>& api_;
  int rank_ = 0, size_ = 1;
};

template <typename H>
std::unique_ptr<Bootstrap> init_mpi(MpiApi<H>& api, bool* initialized) {
  int flag = 0;
  api.Initialized(&flag);
  if (!flag) {
    int argc = 0;
    char** argv = nullptr;
    if (api.Init(&argc, &argv) != 0) raise(Status::kRemote, "MPI_Init failed");
    g_mpi.we_initialized = true;
    *initialized = true;
  }
  return std::make_unique<MpiBootstrap<H>>(api);
}

}  // namespace

std::unique_ptr<Bootstrap> make_mpi_bootstrap(bool openmpi, bool* we_initialized) {
  *we_initialized = false;
  if (!g_mpi.lib) {
    std::string chosen = env::get().mpi_library;
    std::vector<std::string> names;
    if (!chosen.empty())
      names.push_back(chosen);
    else if (openmpi)
      names = {"libmpi.so.40", "libmpi.so"};
    else
      names = {"libmpich.so.12", "libmpi.so.12", "libmpich.so"};
    std::string tried;
    for (auto& n : names) {
      // RTLD_GLOBAL: Open MPI's plugins resolve libmpi's symbols from the global scope.
      g_mpi.lib = dlopen(n.c_str(), RTLD_NOW | RTLD_GLOBAL);
      if (g_mpi.lib) break;
      tried += (tried.empty() ? "" : ", ") + n + " (" + dlerror() + ")";
    }
    if (!g_mpi.lib)
      raise(Status::kUnavailable,
            "shmem_init: started by mpirun but no MPI library could be loaded: %s; set MORI_MPI_LIBRARY or launch "
            "with oshrun / mori run",
            tried.c_str());
    g_mpi.openmpi = dlsym(g_mpi.lib, "ompi_mpi_comm_world") != nullptr;
    if (g_mpi.openmpi) {
      g_mpi.ompi.load(g_mpi.lib, "libmpi");
      g_mpi.ompi.comm_world = dlsym(g_mpi.lib, "ompi_mpi_comm_world");
      g_mpi.ompi.byte = dlsym(g_mpi.lib, "ompi_mpi_byte");
      if (!g_mpi.ompi.byte) raise(Status::kUnavailable, "Open MPI library has no ompi_mpi_byte");
    } else {
      g_mpi.mpich.load(g_mpi.lib, "libmpich");
      g_mpi.mpich.comm_world = 0x44000000;  // MPICH ABI constants (mpi.h)
      g_mpi.mpich.byte = 0x4c00010d;
    }
  }
  return g_mpi.openmpi ? init_mpi(g_mpi.ompi, we_initialized) : init_mpi(g_mpi.mpich, we_initialized);
}

void finalize_mpi_bootstrap() {
  if (!g_mpi.we_initialized) return;
  g_mpi.we_initialized = false;
  int done = 0;
  if (g_mpi.openmpi) {
    g_mpi.ompi.Finalized(&done);
    if (!done) g_mpi.ompi.Finalize();
  } else {
    g_mpi.mpich.Finalized(&done);
    if (!done) g_mpi.mpich.Finalize();
  }
}

}  // namespace mori
