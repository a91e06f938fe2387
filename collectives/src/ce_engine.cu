// SPDX-License-Identifier: MIT
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "mori/collectives/ce_engine.h"
#include "mori/core/status.h"
#include "mori/shmem/device.cuh"
#include "mori/shmem/gpu_heap.h"
#include "mori/shmem/runtime.h"

namespace mori::collectives {
namespace {

namespace dev = mori::shmem::dev;
using shmem::DeviceState;

void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    raise(Status::kSystem, "mori.ccl GPU engine: %s failed: %s (%s)", what, cudaGetErrorName(err),
          cudaGetErrorString(err));
}

// Flag values are epoch * kEpochStride + x: they only grow, so waits are ">=" and nothing is
// ever reset (a replayed CUDA graph reads the next epoch from device memory).
constexpr uint64_t kEpochStride = uint64_t(1) << 20;
constexpr int kMaxChunks = 16;
constexpr size_t kChunkTarget = size_t(16) << 20;  // pipelining unit of staged receives
constexpr size_t kChunkAlign = size_t(64) << 10;

// Symmetric addresses (this PE's heap) of the window's words.
struct Flags {
  uint64_t* data;   // [n] data[p]: PE p's chunks of this epoch that landed here (e*S + count)
  uint64_t* ready;  // [n] ready[p]: PE p entered call e (e + 1): its destination may be written
  uint64_t* ack;    // [n] ack[p]: PE p released the staging this PE filled in call e ((e+1)*S)
  uint64_t* epoch;  // local: the next call's epoch
  uint64_t* cur;    // local: the running call's epoch
};

__global__ void begin_kernel(const DeviceState* st, Flags f, int n, int me) {
  uint64_t e = *f.epoch;
  *f.cur = e;
  *f.epoch = e + 1;
  for (int p = 0; p < n; ++p)
    if (p != me) dev::signal_op(*st, f.ready + me, e + 1, dev::kSignalSet, p);
}

// Before pushing to p: p released the staging of our previous call, and (direct pushes) p has
// entered this call, so its destination is no longer in use by earlier work on its stream.
__global__ void gate_kernel(const DeviceState* st, Flags f, int p, int need_ready) {
  uint64_t e = *f.cur;
  dev::signal_wait_until(*st, f.ack + p, dev::kCmpGe, e * kEpochStride);
  if (need_ready) dev::signal_wait_until(*st, f.ready + p, dev::kCmpGe, e + 1);
}

// After the copy engine finished chunk c (stream order): p may read it.
__global__ void signal_kernel(const DeviceState* st, Flags f, int p, int me, uint64_t count) {
  dev::fence();
  dev::signal_op(*st, f.data + me, *f.cur * kEpochStride + count, dev::kSignalSet, p);
}

__global__ void wait_kernel(const DeviceState* st, Flags f, int p, uint64_t count) {
  dev::signal_wait_until(*st, f.data + p, dev::kCmpGe, *f.cur * kEpochStride + count);
}

__global__ void release_kernel(const DeviceState* st, Flags f, int n, int me) {
  uint64_t v = (*f.cur + 1) * kEpochStride;
  for (int p = 0; p < n; ++p)
    if (p != me) dev::signal_op(*st, f.ack + me, v, dev::kSignalSet, p);
}

__global__ void copy16_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n16) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n16;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

__global__ void copy1_kernel(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

// Local copies run on SMs: a copy-engine copy within one GPU is far slower than HBM allows.
void launch_copy(void* dst, const void* src, size_t bytes, int max_blocks, cudaStream_t s) {
  if (bytes == 0 || dst == src) return;
  const int threads = 512;
  auto a16 = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  if (a16(dst) && a16(src) && bytes % 16 == 0) {
    size_t n16 = bytes / 16;
    int blocks = static_cast<int>(std::min<size_t>((n16 + threads - 1) / threads, max_blocks));
    copy16_kernel<<<blocks, threads, 0, s>>>(static_cast<const uint4*>(src), static_cast<uint4*>(dst), n16);
  } else {
    int blocks = static_cast<int>(std::min<size_t>((bytes + threads - 1) / threads, max_blocks));
    copy1_kernel<<<blocks, threads, 0, s>>>(static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), bytes);
  }
  cuda_check(cudaGetLastError(), "copy kernel launch");
}

size_t piece_bytes(size_t bytes, int chunks) {
  size_t piece = (bytes + chunks - 1) / chunks;
  return (piece + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
}

}  // namespace

struct CeEngine::Impl {
  shmem::Runtime* rt = nullptr;
  uint64_t generation = 0;
  int me = 0, n = 1;
  int sm_count = 0;
  char* window = nullptr;  // symmetric: flags, then (n - 1) staging slots
  char* staging = nullptr;
  Flags flags{};
  const DeviceState* state = nullptr;
  std::vector<char*> peer_slot;  // [pe]: pe's slot that receives from this PE, as mapped here
  // Per peer: the pushing stream, the stream that signals landed chunks, the receiving stream.
  std::vector<cudaStream_t> push, sig, recv;
  std::vector<cudaEvent_t> chunk_done;  // [pe * kMaxChunks + c]
  std::vector<cudaEvent_t> push_done, recv_done;
  cudaStream_t local = nullptr;
  cudaEvent_t fork = nullptr, local_done = nullptr;

  int slot_index(int src, int dst) const { return (src - dst - 1 + n) % n; }
};

int CeEngine::chunks(size_t bytes, bool direct) {
  if (direct) return 1;
  size_t c = (bytes + kChunkTarget - 1) / kChunkTarget;
  return static_cast<int>(std::clamp<size_t>(c, 1, kMaxChunks));
}

CeEngine::CeEngine(size_t staging_bytes) : impl_(std::make_unique<Impl>()) {
  const char* caller = "mori.ccl GPU engine";
  auto& rt = shmem::Runtime::get(caller);
  Impl& d = *impl_;
  d.rt = &rt;
  d.generation = shmem::Runtime::generation();
  d.me = rt.my_pe();
  d.n = rt.n_pes();
  shmem::GpuHeap* heap = rt.gpu();
  if (!heap)
    raise(Status::kUnavailable,
          "%s: PE %d has no GPU symmetric heap; CUDA collectives need every PE bound to a GPU "
          "(torch.cuda.set_device(local_rank) before mori.shmem init, or MORI_DEVICE)",
          caller, d.me);
  for (int pe = 0; pe < d.n; ++pe)
    if (!heap->reachable(pe))
      raise(Status::kUnavailable, "%s: PE %d's GPU is not P2P-reachable from PE %d (other node or MORI_DISABLE_P2P)",
            caller, pe, d.me);
  device_ = heap->device();
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  cuda_check(cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, device_), "cudaDeviceGetAttribute");
  d.state = heap->device_state_ptr();

  size_t flag_bytes = (3 * d.n * sizeof(uint64_t) + 2 * sizeof(uint64_t) + 4095) / 4096 * 4096;
  slot_bytes_ = d.n > 1 ? staging_bytes / (d.n - 1) / 4096 * 4096 : 0;
  size_t total = flag_bytes + slot_bytes_ * (d.n - 1);
  d.window = static_cast<char*>(rt.gpu_malloc(total, 256, caller));
  d.staging = d.window + flag_bytes;
  auto* w = reinterpret_cast<uint64_t*>(d.window);
  d.flags = Flags{w, w + d.n, w + 2 * d.n, w + 3 * d.n, w + 3 * d.n + 1};
  cuda_check(cudaMemset(d.window, 0, flag_bytes), "cudaMemset");
  d.peer_slot.assign(d.n, nullptr);
  for (int pe = 0; pe < d.n; ++pe) {
    if (pe == d.me) continue;
    char* sym = d.staging + static_cast<size_t>(d.slot_index(d.me, pe)) * slot_bytes_;
    d.peer_slot[pe] = static_cast<char*>(rt.ptr(sym, pe));
    if (!d.peer_slot[pe]) raise(Status::kUnavailable, "%s: no direct pointer to PE %d's GPU heap", caller, pe);
  }
  auto stream = [](cudaStream_t* s) { cuda_check(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking), "cudaStreamCreate"); };
  auto event = [](cudaEvent_t* e) { cuda_check(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "cudaEventCreate"); };
  d.push.assign(d.n, nullptr);
  d.sig.assign(d.n, nullptr);
  d.recv.assign(d.n, nullptr);
  d.push_done.assign(d.n, nullptr);
  d.recv_done.assign(d.n, nullptr);
  d.chunk_done.assign(static_cast<size_t>(d.n) * kMaxChunks, nullptr);
  for (int pe = 0; pe < d.n; ++pe) {
    if (pe == d.me) continue;
    stream(&d.push[pe]);
    stream(&d.sig[pe]);
    stream(&d.recv[pe]);
    event(&d.push_done[pe]);
    event(&d.recv_done[pe]);
    for (int c = 0; c < kMaxChunks; ++c) event(&d.chunk_done[pe * kMaxChunks + c]);
  }
  stream(&d.local);
  event(&d.fork);
  event(&d.local_done);
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  // Nobody signals into a window whose flags a peer has not cleared yet.
  rt.bootstrap().barrier();
}

CeEngine::~CeEngine() {
  Impl& d = *impl_;
  cudaDeviceSynchronize();
  for (auto* v : {&d.push, &d.sig, &d.recv})
    for (auto s : *v)
      if (s) cudaStreamDestroy(s);
  for (auto* v : {&d.push_done, &d.recv_done, &d.chunk_done})
    for (auto e : *v)
      if (e) cudaEventDestroy(e);
  if (d.local) cudaStreamDestroy(d.local);
  if (d.fork) cudaEventDestroy(d.fork);
  if (d.local_done) cudaEventDestroy(d.local_done);
  // The window goes back to the heap (collective) only if that heap is still the live one.
  if (d.window && shmem::Runtime::initialized() && shmem::Runtime::generation() == d.generation) {
    try {
      d.rt->gpu_free(d.window, "mori.ccl GPU engine");
    } catch (...) {
    }
  }
}

void* CeEngine::slot(int pe) const {
  const Impl& d = *impl_;
  if (pe < 0 || pe >= d.n || pe == d.me) return nullptr;
  return d.staging + static_cast<size_t>(d.slot_index(pe, d.me)) * slot_bytes_;
}

void CeEngine::local_copy(void* dst, const void* src, size_t bytes, uintptr_t stream) {
  launch_copy(dst, src, bytes, 2 * impl_->sm_count, reinterpret_cast<cudaStream_t>(stream));
}

void CeEngine::exchange(const std::vector<CeSend>& sends, const std::vector<CeRecv>& recvs, void* local_dst,
                        const void* local_src, size_t local_bytes, bool defer_release, uintptr_t stream_id) {
  Impl& d = *impl_;
  const char* caller = "mori.ccl GPU exchange";
  auto s = reinterpret_cast<cudaStream_t>(stream_id);
  auto check_pe = [&](int pe, const char* what) {
    if (pe < 0 || pe >= d.n || pe == d.me)
      raise(Status::kInvalidArgument, "%s: %s PE %d is not a peer (PEs 0..%d, this is %d)", caller, what, pe, d.n - 1,
            d.me);
  };
  // Validate everything before enqueuing anything.
  std::vector<char*> remote(sends.size(), nullptr);
  for (size_t k = 0; k < sends.size(); ++k) {
    const CeSend& x = sends[k];
    check_pe(x.pe, "send to");
    if (x.direct) {
      d.rt->resolve(x.dst, x.bytes, caller);  // throws unless the whole range is symmetric
      remote[k] = static_cast<char*>(d.rt->ptr(x.dst, x.pe));
      if (!remote[k]) raise(Status::kUnavailable, "%s: PE %d's copy of %p is not mapped here", caller, x.pe, x.dst);
    } else {
      if (x.staging_offset + x.bytes > slot_bytes_)
        raise(Status::kInvalidArgument, "%s: %zu bytes at staging offset %zu exceed the %zu-byte slot per peer "
              "(MORI_CCL_GPU_STAGING_SIZE)", caller, x.bytes, x.staging_offset, slot_bytes_);
      remote[k] = d.peer_slot[x.pe] + x.staging_offset;
    }
  }
  for (const CeRecv& r : recvs) {
    check_pe(r.pe, "receive from");
    if (r.copy_to && r.direct)
      raise(Status::kInvalidArgument, "%s: a direct receive from PE %d has nothing to copy out", caller, r.pe);
    if (r.copy_to && r.staging_offset + r.bytes > slot_bytes_)
      raise(Status::kInvalidArgument, "%s: %zu bytes at staging offset %zu exceed the %zu-byte slot per peer "
            "(MORI_CCL_GPU_STAGING_SIZE)", caller, r.bytes, r.staging_offset, slot_bytes_);
  }

  ++stats_.calls;
  begin_kernel<<<1, 1, 0, s>>>(d.state, d.flags, d.n, d.me);
  cuda_check(cudaGetLastError(), "begin kernel launch");
  cuda_check(cudaEventRecord(d.fork, s), "cudaEventRecord");
  if (local_bytes && local_dst != local_src) {
    cuda_check(cudaStreamWaitEvent(d.local, d.fork, 0), "cudaStreamWaitEvent");
    launch_copy(local_dst, local_src, local_bytes, 2 * d.sm_count, d.local);
    cuda_check(cudaEventRecord(d.local_done, d.local), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(s, d.local_done, 0), "cudaStreamWaitEvent");
  }
  for (size_t k = 0; k < sends.size(); ++k) {
    const CeSend& x = sends[k];
    if (x.bytes == 0) continue;
    cudaStream_t ps = d.push[x.pe], ss = d.sig[x.pe];
    cuda_check(cudaStreamWaitEvent(ps, d.fork, 0), "cudaStreamWaitEvent");
    gate_kernel<<<1, 1, 0, ps>>>(d.state, d.flags, x.pe, x.direct ? 1 : 0);
    cuda_check(cudaGetLastError(), "gate kernel launch");
    int c_n = chunks(x.bytes, x.direct);
    size_t piece = piece_bytes(x.bytes, c_n);
    const char* src = static_cast<const char*>(x.src);
    for (int c = 0; c < c_n; ++c) {
      size_t lo = std::min(x.bytes, c * piece), len = std::min(piece, x.bytes - lo);
      if (len)
        cuda_check(cudaMemcpyAsync(remote[k] + lo, src + lo, len, cudaMemcpyDeviceToDevice, ps),
                   "cudaMemcpyAsync (push to peer)");
      cudaEvent_t ev = d.chunk_done[x.pe * kMaxChunks + c];
      cuda_check(cudaEventRecord(ev, ps), "cudaEventRecord");
      cuda_check(cudaStreamWaitEvent(ss, ev, 0), "cudaStreamWaitEvent");
      signal_kernel<<<1, 1, 0, ss>>>(d.state, d.flags, x.pe, d.me, static_cast<uint64_t>(c + 1));
      cuda_check(cudaGetLastError(), "signal kernel launch");
    }
    cuda_check(cudaEventRecord(d.push_done[x.pe], ss), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(s, d.push_done[x.pe], 0), "cudaStreamWaitEvent");
    (x.direct ? stats_.direct_bytes : stats_.staged_bytes) += x.bytes;
  }
  for (const CeRecv& r : recvs) {
    if (r.bytes == 0) continue;
    cudaStream_t rs = d.recv[r.pe];
    cuda_check(cudaStreamWaitEvent(rs, d.fork, 0), "cudaStreamWaitEvent");
    int c_n = chunks(r.bytes, r.direct);
    if (r.copy_to) {
      // Copy each chunk out while the next one is still on the wire.
      size_t piece = piece_bytes(r.bytes, c_n);
      const char* from = static_cast<const char*>(slot(r.pe)) + r.staging_offset;
      char* to = static_cast<char*>(r.copy_to);
      for (int c = 0; c < c_n; ++c) {
        size_t lo = std::min(r.bytes, c * piece), len = std::min(piece, r.bytes - lo);
        wait_kernel<<<1, 1, 0, rs>>>(d.state, d.flags, r.pe, static_cast<uint64_t>(c + 1));
        cuda_check(cudaGetLastError(), "wait kernel launch");
        launch_copy(to + lo, from + lo, len, d.sm_count, rs);
      }
    } else {
      wait_kernel<<<1, 1, 0, rs>>>(d.state, d.flags, r.pe, static_cast<uint64_t>(c_n));
      cuda_check(cudaGetLastError(), "wait kernel launch");
    }
    cuda_check(cudaEventRecord(d.recv_done[r.pe], rs), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(s, d.recv_done[r.pe], 0), "cudaStreamWaitEvent");
  }
  if (!defer_release) finish(stream_id);
}

void CeEngine::finish(uintptr_t stream_id) {
  Impl& d = *impl_;
  release_kernel<<<1, 1, 0, reinterpret_cast<cudaStream_t>(stream_id)>>>(d.state, d.flags, d.n, d.me);
  cuda_check(cudaGetLastError(), "release kernel launch");
}

}  // namespace mori::collectives
