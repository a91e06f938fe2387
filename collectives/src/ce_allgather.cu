// SPDX-License-Identifier: MIT
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "mori/collectives/ce_allgather.h"
#include "mori/core/env.h"
#include "mori/core/status.h"
#include "mori/shmem/runtime.h"

namespace mori::collectives {
namespace {

void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    raise(Status::kSystem, "mori.ccl copy-engine allgather: %s failed: %s (%s)", what, cudaGetErrorName(err),
          cudaGetErrorString(err));
}

// Window layout: [ready flags: n u64][done flags: n u64] ... [staging @ kStagingOffset].
constexpr size_t kStagingOffset = 4096;

__device__ __forceinline__ void store_release_sys(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ uint64_t load_acquire_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// One block: thread t tells PE t "my side of epoch e is there", then waits until PE t said
// the same to us. `bump` = 1 starts a new epoch (the "ready" phase), 0 reuses it ("done").
__global__ void signal_wait_kernel(uint64_t* const* peer_flag, uint64_t* my_flags, uint64_t* epoch, int n, int me,
                                   int bump) {
  __shared__ uint64_t e;
  if (threadIdx.x == 0) e = *epoch + bump;
  __syncthreads();
  for (int t = threadIdx.x; t < n; t += blockDim.x) {
    if (t == me) continue;
    __threadfence_system();
    store_release_sys(peer_flag[t], e);
  }
  for (int t = threadIdx.x; t < n; t += blockDim.x) {
    if (t == me) continue;
    while (load_acquire_sys(&my_flags[t]) < e) {
    }
  }
  __syncthreads();
  if (threadIdx.x == 0 && bump) *epoch = e;
}

// Copies `bytes` from src to one or two destinations (staging and the local output shard).
__global__ void copy_kernel(const uint4* __restrict__ src, uint4* dst0, uint4* dst1, size_t n16) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n16;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint4 v = src[i];
    if (dst0) dst0[i] = v;
    if (dst1) dst1[i] = v;
  }
}

__global__ void copy_bytes_kernel(const uint8_t* __restrict__ src, uint8_t* dst0, uint8_t* dst1, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint8_t v = src[i];
    if (dst0) dst0[i] = v;
    if (dst1) dst1[i] = v;
  }
}

void launch_copy(const void* src, void* dst0, void* dst1, size_t bytes, cudaStream_t s) {
  if (bytes == 0 || (!dst0 && !dst1)) return;
  auto aligned = [](const void* p) { return p == nullptr || (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  const int threads = 512;
  if (aligned(src) && aligned(dst0) && aligned(dst1) && bytes % 16 == 0) {
    size_t n16 = bytes / 16;
    int blocks = static_cast<int>(std::min<size_t>((n16 + threads - 1) / threads, 264));
    copy_kernel<<<blocks, threads, 0, s>>>(static_cast<const uint4*>(src), static_cast<uint4*>(dst0),
                                           static_cast<uint4*>(dst1), n16);
  } else {
    int blocks = static_cast<int>(std::min<size_t>((bytes + threads - 1) / threads, 264));
    copy_bytes_kernel<<<blocks, threads, 0, s>>>(static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst0),
                                                 static_cast<uint8_t*>(dst1), bytes);
  }
  cuda_check(cudaGetLastError(), "copy kernel launch");
}

}  // namespace

struct CeAllgather::Impl {
  int me = 0, n = 1;
  DeviceWindow win;
  std::vector<void*> opened;            // peer windows opened through IPC (closed at the end)
  uint64_t* epoch = nullptr;            // device counter of this PE
  uint64_t** peer_ready = nullptr;      // device array: &ready[me] in every peer's window
  uint64_t** peer_done = nullptr;       // device array: &done[me] in every peer's window
  int splits = 1;                       // concurrent copies per peer shard
  std::vector<cudaStream_t> streams;    // splits per peer, index pe * splits + k
  cudaEvent_t fork = nullptr;
  std::vector<cudaEvent_t> joins;       // same indexing

  uint64_t* flags(int kind) const { return static_cast<uint64_t*>(win.local) + kind * n; }
};

CeAllgather::CeAllgather(size_t staging_bytes) : impl_(std::make_unique<Impl>()), staging_bytes_(staging_bytes) {
  auto& rt = shmem::Runtime::get("mori.ccl CeAllgather");
  Impl& d = *impl_;
  d.me = rt.my_pe();
  d.n = rt.n_pes();
  cuda_check(cudaGetDevice(&device_), "cudaGetDevice");
  if (2 * d.n * sizeof(uint64_t) > kStagingOffset)
    raise(Status::kInvalidArgument, "mori.ccl CeAllgather: %d PEs is too many for one node", d.n);
  for (int pe = 0; pe < d.n; ++pe)
    if (!rt.topology().same_node(pe, d.me))
      raise(Status::kUnavailable,
            "mori.ccl CeAllgather: PE %d is on another node; the copy-engine allgather needs every PE on this node",
            pe);

  // The window: flags + staging, mapped by every peer through CUDA IPC.
  d.win.bytes = kStagingOffset + staging_bytes;
  cuda_check(cudaMalloc(&d.win.local, d.win.bytes), "cudaMalloc (window; lower MORI_CCL_GPU_STAGING_SIZE?)");
  cuda_check(cudaMemset(d.win.local, 0, kStagingOffset), "cudaMemset");
  cudaIpcMemHandle_t mine;
  cuda_check(cudaIpcGetMemHandle(&mine, d.win.local), "cudaIpcGetMemHandle");
  std::vector<cudaIpcMemHandle_t> all(d.n);
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  rt.bootstrap().allgather(&mine, all.data(), sizeof(mine));
  d.win.peers.assign(d.n, nullptr);
  for (int pe = 0; pe < d.n; ++pe) {
    if (pe == d.me) {
      d.win.peers[pe] = d.win.local;
      continue;
    }
    void* p = nullptr;
    cuda_check(cudaIpcOpenMemHandle(&p, all[pe], cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
    d.win.peers[pe] = p;
    d.opened.push_back(p);
  }

  std::vector<uint64_t*> ready(d.n), done(d.n);
  for (int pe = 0; pe < d.n; ++pe) {
    ready[pe] = static_cast<uint64_t*>(d.win.peers[pe]) + d.me;
    done[pe] = static_cast<uint64_t*>(d.win.peers[pe]) + d.n + d.me;
  }
  cuda_check(cudaMalloc(&d.epoch, sizeof(uint64_t)), "cudaMalloc");
  cuda_check(cudaMemset(d.epoch, 0, sizeof(uint64_t)), "cudaMemset");
  cuda_check(cudaMalloc(&d.peer_ready, d.n * sizeof(uint64_t*)), "cudaMalloc");
  cuda_check(cudaMalloc(&d.peer_done, d.n * sizeof(uint64_t*)), "cudaMalloc");
  cuda_check(cudaMemcpy(d.peer_ready, ready.data(), d.n * sizeof(uint64_t*), cudaMemcpyHostToDevice), "cudaMemcpy");
  cuda_check(cudaMemcpy(d.peer_done, done.data(), d.n * sizeof(uint64_t*), cudaMemcpyHostToDevice), "cudaMemcpy");
  d.splits = static_cast<int>(std::min<int64_t>(std::max<int64_t>(env::get().ccl_ce_splits, 1), 16));
  d.streams.assign(d.n * d.splits, nullptr);
  d.joins.assign(d.n * d.splits, nullptr);
  for (int pe = 0; pe < d.n; ++pe) {
    if (pe == d.me) continue;
    for (int k = 0; k < d.splits; ++k) {
      cuda_check(cudaStreamCreateWithFlags(&d.streams[pe * d.splits + k], cudaStreamNonBlocking), "cudaStreamCreate");
      cuda_check(cudaEventCreateWithFlags(&d.joins[pe * d.splits + k], cudaEventDisableTiming), "cudaEventCreate");
    }
  }
  cuda_check(cudaEventCreateWithFlags(&d.fork, cudaEventDisableTiming), "cudaEventCreate");
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  // Nobody may signal into a window a peer has not mapped yet.
  rt.bootstrap().barrier();
}

CeAllgather::~CeAllgather() {
  Impl& d = *impl_;
  cudaDeviceSynchronize();
  // Peers may still read our window until they are done: unmap and free after everyone is.
  if (shmem::Runtime::initialized()) {
    try {
      shmem::Runtime::get("mori.ccl CeAllgather").bootstrap().barrier();
    } catch (...) {
    }
  }
  for (auto* s : d.streams)
    if (s) cudaStreamDestroy(s);
  for (auto* e : d.joins)
    if (e) cudaEventDestroy(e);
  if (d.fork) cudaEventDestroy(d.fork);
  for (void* p : d.opened) cudaIpcCloseMemHandle(p);
  cudaFree(d.peer_ready);
  cudaFree(d.peer_done);
  cudaFree(d.epoch);
  cudaFree(d.win.local);
}

void* CeAllgather::staging() const { return static_cast<char*>(impl_->win.local) + kStagingOffset; }

void CeAllgather::run(void* out, const void* in, size_t bytes, uintptr_t stream_id) {
  Impl& d = *impl_;
  auto s = reinterpret_cast<cudaStream_t>(stream_id);
  ++stats_.calls;
  if (bytes == 0) return;
  char* o = static_cast<char*>(out);
  const char* i = static_cast<const char*>(in);
  char* stage = static_cast<char*>(staging());
  // Symmetric input: it lies in our window, and each peer's at the same offset in theirs.
  bool in_place = i >= stage && i + bytes <= stage + staging_bytes_;
  if (!in_place && bytes > staging_bytes_)
    raise(Status::kInvalidArgument,
          "mori.ccl copy-engine allgather: shard of %zu bytes exceeds the %zu-byte staging buffer "
          "(MORI_CCL_GPU_STAGING_SIZE)",
          bytes, staging_bytes_);
  size_t off = in_place ? static_cast<size_t>(i - stage) : 0;
  if (in_place) ++stats_.zero_copy;
  // Local work on SMs: publish the shard (unless it is already symmetric) and place our own.
  char* mine_out = o + static_cast<size_t>(d.me) * bytes;
  launch_copy(i, in_place ? nullptr : stage, mine_out == i ? nullptr : mine_out, bytes, s);
  int threads = d.n <= 32 ? 32 : 64;
  signal_wait_kernel<<<1, threads, 0, s>>>(d.peer_ready, d.flags(0), d.epoch, d.n, d.me, 1);
  cuda_check(cudaGetLastError(), "ready kernel launch");
  // Remote shards on the copy engines, one stream per peer, forked from and joined to `s`.
  cuda_check(cudaEventRecord(d.fork, s), "cudaEventRecord");
  for (int step = 1; step < d.n; ++step) {
    int pe = (d.me + step) % d.n;
    const char* src = static_cast<const char*>(d.win.peers[pe]) + kStagingOffset + off;
    char* dst = o + static_cast<size_t>(pe) * bytes;
    // Several concurrent copies of >= 1 MiB each can keep more copy engines busy on one link.
    size_t pieces = std::max<size_t>(1, std::min<size_t>(d.splits, bytes >> 20));
    size_t piece = (bytes + pieces - 1) / pieces;
    piece = (piece + 4095) / 4096 * 4096;
    for (size_t k = 0, lo = 0; lo < bytes; ++k, lo += piece) {
      size_t len = std::min(piece, bytes - lo);
      cudaStream_t cs = d.streams[pe * d.splits + k];
      cuda_check(cudaStreamWaitEvent(cs, d.fork, 0), "cudaStreamWaitEvent");
      cuda_check(cudaMemcpyAsync(dst + lo, src + lo, len, cudaMemcpyDeviceToDevice, cs), "cudaMemcpyAsync (peer pull)");
      cuda_check(cudaEventRecord(d.joins[pe * d.splits + k], cs), "cudaEventRecord");
      cuda_check(cudaStreamWaitEvent(s, d.joins[pe * d.splits + k], 0), "cudaStreamWaitEvent");
    }
    stats_.bytes_pulled += bytes;
  }
  // Everyone has read everyone's window: it may be reused (and a symmetric input rewritten).
  signal_wait_kernel<<<1, threads, 0, s>>>(d.peer_done, d.flags(1), d.epoch, d.n, d.me, 0);
  cuda_check(cudaGetLastError(), "done kernel launch");
}

}  // namespace mori::collectives
