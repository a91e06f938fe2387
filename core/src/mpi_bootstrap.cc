// SPDX-License-Identifier: MIT
#include "capi/launch_bootstrap.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "mori/core/env.h"
#include "mori/core/launch_secret.h"
#include "mori/core/log.h"
#include "mori/core/status.h"
#include "mori/core/store.h"
#include "mori/core/unique_id.h"

namespace mori::capi {
namespace {

const char* env_str(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int env_int(std::initializer_list<const char*> names, int fallback) {
  for (const char* n : names)
    if (const char* v = env_str(n)) return std::atoi(v);
  return fallback;
}

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
    if (bytes > static_cast<size_t>(INT32_MAX)) raise(Status::kInvalidArgument, "MPI bootstrap: %zu-byte allgather", bytes);
    int n = static_cast<int>(bytes);
    check(api_.Allgather(send, n, api_.byte, recv, n, api_.byte, api_.comm_world), "MPI_Allgather");
  }
  void broadcast(void* buf, size_t bytes, int root) override {
    check(api_.Bcast(buf, static_cast<int>(bytes), api_.byte, root, api_.comm_world), "MPI_Bcast");
  }
  void barrier() override { check(api_.Barrier(api_.comm_world), "MPI_Barrier"); }
  std::string describe() const override { return g_mpi.openmpi ? "mpi (Open MPI, loaded at run time)" : "mpi (MPICH ABI)"; }

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

std::unique_ptr<Bootstrap> mpi_bootstrap(bool openmpi, bool* initialized) {
  if (!g_mpi.lib) {
    std::string chosen = env::get().mpi_library;
    std::vector<std::string> names;
    if (!chosen.empty()) names.push_back(chosen);
    else if (openmpi) names = {"libmpi.so.40", "libmpi.so"};
    else names = {"libmpich.so.12", "libmpi.so.12", "libmpich.so"};
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
  return g_mpi.openmpi ? init_mpi(g_mpi.ompi, initialized) : init_mpi(g_mpi.mpich, initialized);
}

}  // namespace

std::unique_ptr<Bootstrap> make_launch_bootstrap(bool* mpi_initialized) {
  *mpi_initialized = false;
  const auto& e = env::get();
  // 1. mori run (and oshrun, which uses it): a store hosted by the launcher.
  if (!e.store_addr.empty()) {
    auto colon = e.store_addr.rfind(':');
    if (colon == std::string::npos)
      raise(Status::kInvalidArgument, "MORI_STORE_ADDR=%s is not host:port", e.store_addr.c_str());
    if (e.rank < 0 || e.world_size < 1)
      raise(Status::kInvalidArgument, "MORI_STORE_ADDR is set but MORI_RANK/MORI_WORLD_SIZE are not");
    return bootstrap_from_store(e.store_addr.substr(0, colon), std::atoi(e.store_addr.c_str() + colon + 1),
                                secret_from_hex(e.job_secret), static_cast<int>(e.rank),
                                static_cast<int>(e.world_size), false);
  }
  // 2. mpirun (Open MPI, or an MPICH-style PMI launcher).
  int mpi_size = env_int({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"}, -1);
  int mpi_rank = env_int({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}, -1);
  if (mpi_size > 0 && mpi_rank >= 0) return mpi_bootstrap(env_str("OMPI_COMM_WORLD_SIZE") != nullptr, mpi_initialized);
  // 3. torchrun-style variables: rank 0 hosts the store on MORI_MASTER_PORT or MASTER_PORT + 1.
  const char* addr = env_str("MASTER_ADDR");
  if (addr && env_str("RANK") && env_str("WORLD_SIZE")) {
    int port = e.master_port ? static_cast<int>(e.master_port) : env_int({"MASTER_PORT"}, 29500) + 1;
    int rank = env_int({"RANK"}, 0), size = env_int({"WORLD_SIZE"}, 1);
    const char* run_id = env_str("TORCHELASTIC_RUN_ID");
    // The same policy as mori.core.bootstrap.detect_launch (core/launch_secret.h).
    EnvLaunchSecret s = env_launch_secret(e.job_secret, addr, port, run_id ? run_id : "", size,
                                          env_int({"LOCAL_WORLD_SIZE"}, -1));
    if (s.derived && env_int({"LOCAL_RANK"}, 0) == 0)
      MORI_LOG(kWarn, "BOOTSTRAP",
               "MORI_JOB_SECRET is not set, so the job secret is derived from MASTER_ADDR and the port, and anyone "
               "on this host who knows them can join the job; set the same random MORI_JOB_SECRET (64 hex digits) "
               "on every rank");
    return bootstrap_from_store(s.store_host, port, secret_from_hex(s.secret_hex), rank, size, rank == 0, 0);
  }
  return make_single_bootstrap();
}

void finalize_launch_mpi() {
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

}  // namespace mori::capi
