// SPDX-License-Identifier: MIT
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "mori/collectives/ce_engine.h"
#include "mori/core/cuda_check.h"
#include "mori/core/status.h"
#include "mori/shmem/device.cuh"
#include "mori/shmem/gpu_heap.h"
#include "mori/shmem/runtime.h"

namespace mori::collectives {
namespace {

namespace dev = mori::shmem::dev;
using shmem::DeviceState;

// Flag values are epoch * kEpochStride + x: they only grow, so waits are ">=" and nothing is
// ever reset (a replayed CUDA graph reads the next epoch from device memory).
constexpr uint64_t kEpochStride = uint64_t(1) << 20;
// A transfer's last piece is signalled as kLastPiece, so "all of it landed" needs no piece count.
constexpr uint64_t kLastPiece = kEpochStride - 1;
constexpr int kMaxChunks = 16;
constexpr size_t kChunkTarget = size_t(16) << 20;  // pipelining unit of staged receives
constexpr size_t kChunkAlign = size_t(64) << 10;
constexpr int kMaxPes = 256;   // width of PeSet
constexpr int kCopyBatch = 8;  // copies per copy-kernel launch

__host__ __device__ constexpr uint64_t piece_mark(int c, int c_n) {
  return c + 1 == c_n ? kLastPiece : static_cast<uint64_t>(c + 1);
}

// Symmetric addresses (this PE's heap) of the window's words.
struct Flags {
  uint64_t* data;   // [n] data[p]: PE p's pieces of call e landed here (e*S + piece mark)
  uint64_t* ready;  // [n] ready[p]: PE p's stream reached call e (e + 1)
  uint64_t* epoch;  // local: the next call's epoch
  uint64_t* cur;    // local: the running call's epoch
};

// A set of PEs, passed to kernels by value (one thread per PE tests its bit).
struct PeSet {
  uint64_t w[kMaxPes / 64] = {};
  void add(int pe) { w[pe >> 6] |= uint64_t(1) << (pe & 63); }
  __host__ __device__ bool has(int pe) const { return pe < kMaxPes && ((w[pe >> 6] >> (pe & 63)) & 1); }
  bool any() const {
    for (uint64_t x : w)
      if (x) return true;
    return false;
  }
};

// Starts call e: ready(e) to the peers we receive from (this stream is past everything it did
// with their earlier pushes), then wait for the ready of the peers we push to. Every signal goes
// out before any thread spins.
__global__ void enter_kernel(const DeviceState* st, Flags f, int me, PeSet ready_to, PeSet wait_ready) {
  __shared__ uint64_t e;
  if (threadIdx.x == 0) {
    e = *f.epoch;
    *f.cur = e;
    *f.epoch = e + 1;
  }
  __syncthreads();
  const int p = threadIdx.x;
  if (ready_to.has(p)) dev::signal_op(*st, f.ready + me, e + 1, dev::kSignalSet, p);
  __syncthreads();
  if (wait_ready.has(p)) dev::signal_wait_until(*st, f.ready + p, dev::kCmpGe, e + 1);
}

// Runs after this PE's one-piece pushes completed (stream order): publishes them, then waits for
// everything this PE receives in one piece or does not copy out.
__global__ void arrive_kernel(const DeviceState* st, Flags f, int me, PeSet data_to, PeSet data_from) {
  const int p = threadIdx.x;
  const uint64_t done = *f.cur * kEpochStride + kLastPiece;
  if (data_to.has(p)) {
    dev::fence();  // the copy engine's writes are visible before the flag
    dev::signal_op(*st, f.data + me, done, dev::kSignalSet, p);
  }
  __syncthreads();
  if (data_from.has(p)) dev::signal_wait_until(*st, f.data + p, dev::kCmpGe, done);
}

// Piece `mark` of a multi-piece push to p landed (stream order after its copy).
__global__ void signal_kernel(const DeviceState* st, Flags f, int p, int me, uint64_t mark) {
  dev::fence();
  dev::signal_op(*st, f.data + me, *f.cur * kEpochStride + mark, dev::kSignalSet, p);
}

__global__ void wait_kernel(const DeviceState* st, Flags f, int p, uint64_t mark) {
  dev::signal_wait_until(*st, f.data + p, dev::kCmpGe, *f.cur * kEpochStride + mark);
}

struct CopyJob {
  const void* src;
  void* dst;
  size_t bytes;
};
struct CopyBatch {
  CopyJob job[kCopyBatch];
};

// blockIdx.y picks the job; widest access both pointers allow, any length.
__global__ void copy_kernel(CopyBatch b) {
  const CopyJob j = b.job[blockIdx.y];
  dev::detail::copy_bytes(j.dst, j.src, j.bytes, blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x,
                          static_cast<size_t>(gridDim.x) * blockDim.x);
}

// Local copies run on SMs: a copy-engine copy within one GPU is far slower than HBM allows.
// Several jobs share a launch (max_blocks split between them).
void launch_copies(const CopyJob* jobs, size_t n, int max_blocks, cudaStream_t s) {
  const int threads = 512;
  CopyBatch b{};
  int m = 0;
  size_t units = 0;  // most vectors of one job
  auto flush = [&] {
    if (m == 0) return;
    size_t per_job = static_cast<size_t>(std::max(1, max_blocks / m));
    unsigned blocks = static_cast<unsigned>(std::clamp<size_t>((units + threads - 1) / threads, 1, per_job));
    copy_kernel<<<dim3(blocks, m), threads, 0, s>>>(b);
    check_cuda(cudaGetLastError(), "copy kernel launch");
    b = CopyBatch{};
    m = 0;
    units = 0;
  };
  for (size_t k = 0; k < n; ++k) {
    const CopyJob& j = jobs[k];
    if (j.bytes == 0 || j.dst == j.src) continue;
    bool a16 = ((reinterpret_cast<uintptr_t>(j.dst) | reinterpret_cast<uintptr_t>(j.src)) & 15) == 0;
    units = std::max(units, a16 ? j.bytes / 16 : j.bytes);
    b.job[m++] = j;
    if (m == kCopyBatch) flush();
  }
  flush();
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
  int threads = 32;        // enter/arrive kernels: one thread per PE
  char* window = nullptr;  // symmetric: flags, then (n - 1) staging slots
  char* staging = nullptr;
  Flags flags{};
  const DeviceState* state = nullptr;
  std::vector<char*> peer_slot;  // [pe]: pe's slot that receives from this PE, as mapped here
  // Per peer: the pushing stream, the stream that signals a multi-piece push's pieces, the
  // stream that copies a multi-piece receive out.
  std::vector<cudaStream_t> push, sig, recv;
  std::vector<cudaEvent_t> chunk_done;  // [pe * kMaxChunks + c]
  std::vector<cudaEvent_t> push_done, recv_done;
  cudaStream_t local = nullptr;
  cudaEvent_t start = nullptr, fork = nullptr, local_done = nullptr;

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
  if (d.n > kMaxPes) raise(Status::kUnavailable, "%s: %d PEs; the GPU engine handles at most %d", caller, d.n, kMaxPes);
  d.threads = (d.n + 31) / 32 * 32;
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
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  check_cuda(cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, device_), "cudaDeviceGetAttribute");
  d.state = heap->device_state_ptr();

  size_t flag_bytes = (2 * d.n * sizeof(uint64_t) + 2 * sizeof(uint64_t) + 4095) / 4096 * 4096;
  slot_bytes_ = d.n > 1 ? staging_bytes / (d.n - 1) / 4096 * 4096 : 0;
  size_t total = flag_bytes + slot_bytes_ * (d.n - 1);
  d.window = static_cast<char*>(rt.gpu_malloc(total, 256, caller));
  d.staging = d.window + flag_bytes;
  auto* w = reinterpret_cast<uint64_t*>(d.window);
  d.flags = Flags{w, w + d.n, w + 2 * d.n, w + 2 * d.n + 1};
  check_cuda(cudaMemset(d.window, 0, flag_bytes), "cudaMemset");
  d.peer_slot.assign(d.n, nullptr);
  for (int pe = 0; pe < d.n; ++pe) {
    if (pe == d.me) continue;
    char* sym = d.staging + static_cast<size_t>(d.slot_index(d.me, pe)) * slot_bytes_;
    d.peer_slot[pe] = static_cast<char*>(rt.ptr(sym, pe));
    if (!d.peer_slot[pe]) raise(Status::kUnavailable, "%s: no direct pointer to PE %d's GPU heap", caller, pe);
  }
  auto stream = [](cudaStream_t* s) {
    check_cuda(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking), "cudaStreamCreate");
  };
  auto event = [](cudaEvent_t* e) {
    check_cuda(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "cudaEventCreate");
  };
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
  event(&d.start);
  event(&d.fork);
  event(&d.local_done);
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
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
  for (cudaEvent_t e : {d.start, d.fork, d.local_done})
    if (e) cudaEventDestroy(e);
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
  CopyJob job{src, dst, bytes};
  launch_copies(&job, 1, 2 * impl_->sm_count, reinterpret_cast<cudaStream_t>(stream));
}

void CeEngine::exchange(const std::vector<CeSend>& sends, const std::vector<CeRecv>& recvs, void* local_dst,
                        const void* local_src, size_t local_bytes, uintptr_t stream_id) {
  Impl& d = *impl_;
  const char* caller = "mori.ccl GPU exchange";
  auto s = reinterpret_cast<cudaStream_t>(stream_id);
  auto check_pe = [&](int pe, PeSet& seen, const char* what) {
    if (pe < 0 || pe >= d.n || pe == d.me)
      raise(Status::kInvalidArgument, "%s: %s PE %d is not a peer (PEs 0..%d, this is %d)", caller, what, pe, d.n - 1,
            d.me);
    if (seen.has(pe)) raise(Status::kInvalidArgument, "%s: two entries %s PE %d", caller, what, pe);
    seen.add(pe);
  };
  // Validate and plan everything before enqueuing anything.
  PeSet sent, got;
  PeSet ready_to, wait_ready;  // enter: peers we receive from / push to
  PeSet data_to, data_from;    // arrive: one-piece pushes to signal / receives to wait for
  std::vector<char*> remote(sends.size(), nullptr);
  std::vector<int> send_chunks(sends.size(), 0), recv_chunks(recvs.size(), 0);
  int s_send = -1, s_recv = -1;  // the push and the multi-piece copy-out that run on `s` itself
  bool fork = false;             // anything runs on a side stream
  for (size_t k = 0; k < sends.size(); ++k) {
    const CeSend& x = sends[k];
    check_pe(x.pe, sent, "send to");
    if (x.direct) {
      d.rt->resolve(x.dst, x.bytes, caller);  // throws unless the whole range is symmetric
      remote[k] = static_cast<char*>(d.rt->ptr(x.dst, x.pe));
      if (!remote[k]) raise(Status::kUnavailable, "%s: PE %d's copy of %p is not mapped here", caller, x.pe, x.dst);
    } else {
      if (x.staging_offset + x.bytes > slot_bytes_)
        raise(Status::kInvalidArgument,
              "%s: %zu bytes at staging offset %zu exceed the %zu-byte slot per peer "
              "(MORI_CCL_GPU_STAGING_SIZE)",
              caller, x.bytes, x.staging_offset, slot_bytes_);
      remote[k] = d.peer_slot[x.pe] + x.staging_offset;
    }
    if (x.bytes == 0) continue;
    send_chunks[k] = chunks(x.bytes, x.direct);
    wait_ready.add(x.pe);
    if (send_chunks[k] == 1) data_to.add(x.pe);
    if (send_chunks[k] == 1 && s_send < 0)
      s_send = static_cast<int>(k);
    else
      fork = true;
  }
  std::vector<CopyJob> copy_outs;  // one-piece staged receives, copied out after arrive
  for (size_t k = 0; k < recvs.size(); ++k) {
    const CeRecv& r = recvs[k];
    check_pe(r.pe, got, "receive from");
    if (r.copy_to && r.direct)
      raise(Status::kInvalidArgument, "%s: a direct receive from PE %d has nothing to copy out", caller, r.pe);
    if (r.copy_to && r.staging_offset + r.bytes > slot_bytes_)
      raise(Status::kInvalidArgument,
            "%s: %zu bytes at staging offset %zu exceed the %zu-byte slot per peer "
            "(MORI_CCL_GPU_STAGING_SIZE)",
            caller, r.bytes, r.staging_offset, slot_bytes_);
    if (r.bytes == 0) continue;
    recv_chunks[k] = chunks(r.bytes, r.direct);
    ready_to.add(r.pe);
    if (!r.copy_to || recv_chunks[k] == 1) {
      data_from.add(r.pe);
      if (r.copy_to)
        copy_outs.push_back(CopyJob{static_cast<char*>(slot(r.pe)) + r.staging_offset, r.copy_to, r.bytes});
    } else if (s_recv < 0) {
      s_recv = static_cast<int>(k);
    } else {
      fork = true;
    }
  }

  // Each piece of a multi-piece receive: wait for its signal, copy it out (while the next flies).
  auto copy_out_pieces = [&](const CeRecv& r, int c_n, cudaStream_t rs) {
    size_t piece = piece_bytes(r.bytes, c_n);
    const char* from = static_cast<const char*>(slot(r.pe)) + r.staging_offset;
    char* to = static_cast<char*>(r.copy_to);
    for (int c = 0; c < c_n; ++c) {
      size_t lo = std::min(r.bytes, c * piece), len = std::min(piece, r.bytes - lo);
      wait_kernel<<<1, 1, 0, rs>>>(d.state, d.flags, r.pe, piece_mark(c, c_n));
      check_cuda(cudaGetLastError(), "wait kernel launch");
      CopyJob job{from + lo, to + lo, len};
      launch_copies(&job, 1, d.sm_count, rs);
    }
  };
  auto push = [&](size_t k, cudaStream_t ps) {
    check_cuda(cudaMemcpyAsync(remote[k], sends[k].src, sends[k].bytes, cudaMemcpyDeviceToDevice, ps),
               "cudaMemcpyAsync (push to peer)");
  };

  ++stats_.calls;
  // The local shard needs no peer: it overlaps the whole exchange.
  const bool local = local_bytes && local_dst != local_src;
  if (local) {
    check_cuda(cudaEventRecord(d.start, s), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(d.local, d.start, 0), "cudaStreamWaitEvent");
    CopyJob job{local_src, local_dst, local_bytes};
    launch_copies(&job, 1, 2 * d.sm_count, d.local);
    check_cuda(cudaEventRecord(d.local_done, d.local), "cudaEventRecord");
  }
  enter_kernel<<<1, d.threads, 0, s>>>(d.state, d.flags, d.me, ready_to, wait_ready);
  check_cuda(cudaGetLastError(), "enter kernel launch");
  if (fork) check_cuda(cudaEventRecord(d.fork, s), "cudaEventRecord");
  if (s_send >= 0) push(s_send, s);

  std::vector<cudaEvent_t> before_arrive, at_end;
  for (size_t k = 0; k < sends.size(); ++k) {
    const CeSend& x = sends[k];
    if (x.bytes == 0 || static_cast<int>(k) == s_send) continue;
    cudaStream_t ps = d.push[x.pe];
    check_cuda(cudaStreamWaitEvent(ps, d.fork, 0), "cudaStreamWaitEvent");
    int c_n = send_chunks[k];
    if (c_n == 1) {  // signalled by the arrive kernel
      push(k, ps);
      check_cuda(cudaEventRecord(d.push_done[x.pe], ps), "cudaEventRecord");
      before_arrive.push_back(d.push_done[x.pe]);
      continue;
    }
    // Piece c is signalled from the sig stream while piece c + 1 is copied.
    cudaStream_t ss = d.sig[x.pe];
    size_t piece = piece_bytes(x.bytes, c_n);
    const char* src = static_cast<const char*>(x.src);
    for (int c = 0; c < c_n; ++c) {
      size_t lo = std::min(x.bytes, c * piece), len = std::min(piece, x.bytes - lo);
      if (len)
        check_cuda(cudaMemcpyAsync(remote[k] + lo, src + lo, len, cudaMemcpyDeviceToDevice, ps),
                   "cudaMemcpyAsync (push to peer)");
      cudaEvent_t ev = d.chunk_done[x.pe * kMaxChunks + c];
      check_cuda(cudaEventRecord(ev, ps), "cudaEventRecord");
      check_cuda(cudaStreamWaitEvent(ss, ev, 0), "cudaStreamWaitEvent");
      signal_kernel<<<1, 1, 0, ss>>>(d.state, d.flags, x.pe, d.me, piece_mark(c, c_n));
      check_cuda(cudaGetLastError(), "signal kernel launch");
    }
    check_cuda(cudaEventRecord(d.push_done[x.pe], ss), "cudaEventRecord");
    at_end.push_back(d.push_done[x.pe]);
  }
  for (size_t k = 0; k < recvs.size(); ++k) {
    const CeRecv& r = recvs[k];
    if (r.bytes == 0 || !r.copy_to || recv_chunks[k] == 1 || static_cast<int>(k) == s_recv) continue;
    cudaStream_t rs = d.recv[r.pe];
    check_cuda(cudaStreamWaitEvent(rs, d.fork, 0), "cudaStreamWaitEvent");
    copy_out_pieces(r, recv_chunks[k], rs);
    check_cuda(cudaEventRecord(d.recv_done[r.pe], rs), "cudaEventRecord");
    at_end.push_back(d.recv_done[r.pe]);
  }
  for (cudaEvent_t ev : before_arrive) check_cuda(cudaStreamWaitEvent(s, ev, 0), "cudaStreamWaitEvent");
  if (data_to.any() || data_from.any()) {
    arrive_kernel<<<1, d.threads, 0, s>>>(d.state, d.flags, d.me, data_to, data_from);
    check_cuda(cudaGetLastError(), "arrive kernel launch");
  }
  launch_copies(copy_outs.data(), copy_outs.size(), 2 * d.sm_count, s);
  // After arrive: its signals must not wait for this copy-out, whose sender signals from a side stream.
  if (s_recv >= 0) copy_out_pieces(recvs[s_recv], recv_chunks[s_recv], s);
  for (cudaEvent_t ev : at_end) check_cuda(cudaStreamWaitEvent(s, ev, 0), "cudaStreamWaitEvent");
  if (local) check_cuda(cudaStreamWaitEvent(s, d.local_done, 0), "cudaStreamWaitEvent");
  for (size_t k = 0; k < sends.size(); ++k)
    (sends[k].direct ? stats_.direct_bytes : stats_.staged_bytes) += sends[k].bytes;
}

}  // namespace mori::collectives
