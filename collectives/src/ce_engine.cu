// SPDX-License-Identifier: MIT
#include <cuda.h>  // driver types and flags only: the entry points come through the runtime
#include <cuda_runtime.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>

#include "mori/collectives/ce_engine.h"
#include "mori/core/env.h"
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

// Symmetric addresses (this PE's heap) of the window's words (kernel signalling).
struct Flags {
  uint64_t* data;   // [n] data[p]: PE p's pieces of call e landed here (e*S + piece mark)
  uint64_t* ready;  // [n] ready[p]: PE p's stream reached call e (e + 1)
  uint64_t* epoch;  // local: the next call's epoch
  uint64_t* cur;    // local: the running call's epoch
};

// Memop signalling's words, apart from Flags so the two protocols never share a word. They
// toggle: the peer sets them (kReadySet / a piece mark), their owner resets them to 0.
struct Toggles {
  uint64_t* data;   // [n] data[p]: PE p's pieces of this call landed (piece mark; 0 between calls)
  uint64_t* ready;  // [n] ready[p]: PE p's stream reached this call (kReadySet; 0 once waited for)
};
constexpr uint64_t kReadySet = 1;

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

// ------------------------------------------------------------------ stream memory operations

constexpr const char* kSignalEnv = "MORI_CCL_GPU_SIGNAL";

// The driver's 64-bit stream memory operations, resolved through the runtime: libmori does not
// link libcuda (it must load where there is no driver).
struct MemOps {
  using ValueFn = CUresult(CUDAAPI*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
  using ErrorNameFn = CUresult(CUDAAPI*)(CUresult, const char**);
  ValueFn write = nullptr, wait = nullptr;
  ErrorNameFn error_name = nullptr;
  // Waits for data add FLUSH where the device offers it (remote writes visible to the work after
  // the wait even if the device reordered them); NVLink peers' writes need no flush (see docs).
  unsigned data_wait = CU_STREAM_WAIT_VALUE_GEQ;
};

// Whether this PE can use MemOps; exchanged between PEs.
enum MemOpSupport : int32_t { kMemOpsOk = 0, kNoEntryPoint = 1, kNoDeviceSupport = 2 };

const char* support_text(int32_t support) {
  switch (support) {
    case kNoEntryPoint: return "the driver lacks cuStreamWriteValue64/cuStreamWaitValue64";
    case kNoDeviceSupport: return "CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS is 0";
    default: return "available";
  }
}

template <typename Fn>
Fn driver_entry(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  cudaError_t err = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found);
  if (err != cudaSuccess) cudaGetLastError();  // not sticky: keep it from surfacing at a later launch check
  return err == cudaSuccess && found == cudaDriverEntryPointSuccess ? reinterpret_cast<Fn>(fn) : nullptr;
}

int32_t probe_memops(int device, MemOps& ops) {
  using DeviceGetFn = CUresult(CUDAAPI*)(CUdevice*, int);
  using AttributeFn = CUresult(CUDAAPI*)(int*, CUdevice_attribute, CUdevice);
  ops.write = driver_entry<MemOps::ValueFn>("cuStreamWriteValue64");
  ops.wait = driver_entry<MemOps::ValueFn>("cuStreamWaitValue64");
  ops.error_name = driver_entry<MemOps::ErrorNameFn>("cuGetErrorName");
  auto device_get = driver_entry<DeviceGetFn>("cuDeviceGet");
  auto attribute = driver_entry<AttributeFn>("cuDeviceGetAttribute");
  if (!ops.write || !ops.wait || !device_get || !attribute) return kNoEntryPoint;
  CUdevice dev = 0;
  int can = 0, flush = 0;
  if (device_get(&dev, device) != CUDA_SUCCESS ||
      attribute(&can, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev) != CUDA_SUCCESS || !can)
    return kNoDeviceSupport;
  if (attribute(&flush, CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, dev) == CUDA_SUCCESS && flush)
    ops.data_wait |= CU_STREAM_WAIT_VALUE_FLUSH;
  return kMemOpsOk;
}

// MORI_CCL_GPU_SIGNAL as set on one PE.
enum SignalWish : int32_t { kWishBad = -1, kWishAuto = 0, kWishMemop = 1, kWishKernel = 2 };

SignalWish parse_wish(const std::string& raw) {
  std::string v;
  for (char c : raw)
    if (!std::isspace(static_cast<unsigned char>(c))) v += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v.empty() || v == "auto") return kWishAuto;
  if (v == "memop") return kWishMemop;
  if (v == "kernel") return kWishKernel;
  return kWishBad;
}

// The setting's value now (not at runtime init): like the collectives' other settings, a change
// of the environment is seen by the next engine.
std::string setting_now(const char* name) {
  for (const env::Entry& e : env::describe())
    if (e.name == name) return e.value;
  return {};
}

struct SignalAnnounce {
  int32_t wish, support;
};

// The two protocols use different flag words, so every PE must pick the same one: each decides
// from the same allgathered table, so all pick one or all raise the same error. An explicit
// choice on any PE wins over auto; auto is memop when every PE can use it.
CeSignal choose_signal(shmem::Runtime& rt, int32_t support, const char* caller) {
  const std::string mine = setting_now(kSignalEnv);
  auto all = rt.bootstrap().allgather_values(SignalAnnounce{parse_wish(mine), support});
  int memop_pe = -1, kernel_pe = -1;
  for (int pe = 0; pe < static_cast<int>(all.size()); ++pe) {
    if (all[pe].wish == kWishBad)
      raise(Status::kInvalidArgument, "%s: %s on PE %d%s is not auto, memop or kernel", caller, kSignalEnv, pe,
            pe == rt.my_pe() ? (" ('" + mine + "')").c_str() : "");
    if (all[pe].wish == kWishMemop && memop_pe < 0) memop_pe = pe;
    if (all[pe].wish == kWishKernel && kernel_pe < 0) kernel_pe = pe;
  }
  if (memop_pe >= 0 && kernel_pe >= 0)
    raise(Status::kInvalidArgument, "%s: %s is memop on PE %d but kernel on PE %d; set one value on every PE", caller,
          kSignalEnv, memop_pe, kernel_pe);
  if (kernel_pe >= 0) return CeSignal::kKernel;
  for (int pe = 0; pe < static_cast<int>(all.size()); ++pe) {
    if (all[pe].support == kMemOpsOk) continue;
    if (memop_pe >= 0)
      raise(Status::kUnavailable, "%s: %s=memop (set on PE %d), but PE %d cannot use CUDA stream memory operations "
            "(%s); use %s=kernel or auto", caller, kSignalEnv, memop_pe, pe, support_text(all[pe].support), kSignalEnv);
    return CeSignal::kKernel;
  }
  return CeSignal::kMemop;
}

// ------------------------------------------------------------------ copies

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
    cuda_check(cudaGetLastError(), "copy kernel launch");
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
  int threads = 32;  // enter/arrive kernels: one thread per PE
  char* window = nullptr;  // symmetric: flags, then (n - 1) staging slots
  char* staging = nullptr;
  Flags flags{};
  const DeviceState* state = nullptr;
  std::vector<char*> peer_slot;  // [pe]: pe's slot that receives from this PE, as mapped here
  CeSignal signal = CeSignal::kKernel;
  MemOps ops;  // memop signalling only
  Toggles toggles{};
  std::vector<uint64_t*> peer_ready, peer_data;  // [pe]: pe's toggles.ready[me] / .data[me], as mapped here
  // Per peer: the pushing stream, the stream that signals a multi-piece push's pieces, the
  // stream that copies a multi-piece receive out.
  std::vector<cudaStream_t> push, sig, recv;
  std::vector<cudaEvent_t> chunk_done;  // [pe * kMaxChunks + c]
  std::vector<cudaEvent_t> push_done, recv_done;
  cudaStream_t local = nullptr;
  cudaEvent_t start = nullptr, fork = nullptr, local_done = nullptr;

  int slot_index(int src, int dst) const { return (src - dst - 1 + n) % n; }

  // The handshake steps of one exchange, in either signalling.
  void enter(cudaStream_t s, const PeSet& ready_to, const PeSet& wait_ready);
  void arrive(cudaStream_t s, const PeSet& data_to, const PeSet& data_from);
  void signal_piece(cudaStream_t s, int pe, uint64_t mark);
  void wait_piece(cudaStream_t s, int pe, uint64_t mark);
  void rearm(cudaStream_t s, const PeSet& received_from);

  // One stream memory operation on a word (a local one, or a peer's as mapped here).
  void write(cudaStream_t s, uint64_t* word, uint64_t value);
  void wait(cudaStream_t s, uint64_t* word, uint64_t value, unsigned flags);
  void cu_check(CUresult r, const char* what) const;
};

// ------------------------------------------------------------------ signalling
//
// Kernel signalling: the kernels above, values e * kEpochStride + mark with the epoch read from
// device memory (flags only grow).
//
// Memop signalling: a stream memory operation's value is fixed when it is enqueued (a captured
// graph replays it unchanged), so instead of growing values every word toggles between 0 and a
// constant:
//   ready: PE p writes kReadySet into my toggles.ready[p] at the start of each call in which it
//          receives from me; I wait for it before pushing to p, then reset it to 0 on my stream.
//   data:  p writes each piece's mark (1 .. c_n - 1, then kLastPiece) into my toggles.data[p]
//          after that piece's copy; the write's default memory barrier makes the copy visible
//          first. I wait >= the mark before using the piece, and reset the word to 0 on the
//          caller's stream once every wait on it is done (side streams joined), before the call
//          returns. Every receive waits for kLastPiece and p's marks only rise, so no write of
//          this call is still on its way when the reset runs.
// Why no reset races with the peer's next set: p sets a word again only after waiting for
// something I sent after my reset. (ready) I wait on ready[p] only in a call e where I push to
// p; p's call e waits for my data, which my streams send after the reset, and p's next ready
// follows its call e in p's stream order. (data) p's next data write, in a call e' > e, follows
// its wait for my ready of e', which my stream sends after call e, hence after the reset (the
// write's memory barrier publishes the reset first). So each word goes 0 -> set -> waited ->
// 0 once per call that uses it. A CUDA-graph replay enqueues the same operations with the same
// values, which is all this protocol needs.

void CeEngine::Impl::cu_check(CUresult r, const char* what) const {
  if (r == CUDA_SUCCESS) return;
  const char* name = nullptr;
  if (!ops.error_name || ops.error_name(r, &name) != CUDA_SUCCESS || !name) name = "CUresult";
  raise(Status::kSystem, "mori.ccl GPU engine: %s failed: %s (%d); %s=kernel signals with kernels instead", what, name,
        static_cast<int>(r), kSignalEnv);
}

void CeEngine::Impl::write(cudaStream_t s, uint64_t* word, uint64_t value) {
  // CU_STREAM_WRITE_VALUE_DEFAULT keeps the memory barrier: earlier work of this stream (a copy
  // into the peer) is visible before the value.
  cu_check(ops.write(s, static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(word)), value,
                     CU_STREAM_WRITE_VALUE_DEFAULT),
           "cuStreamWriteValue64");
}

void CeEngine::Impl::wait(cudaStream_t s, uint64_t* word, uint64_t value, unsigned flags) {
  cu_check(ops.wait(s, static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(word)), value, flags),
           "cuStreamWaitValue64");
}

// Starts the call: ready to the peers we receive from, then wait for the ready of the peers we
// push to. All signals are enqueued before any wait.
void CeEngine::Impl::enter(cudaStream_t s, const PeSet& ready_to, const PeSet& wait_ready) {
  if (signal == CeSignal::kKernel) {
    enter_kernel<<<1, threads, 0, s>>>(state, flags, me, ready_to, wait_ready);
    cuda_check(cudaGetLastError(), "enter kernel launch");
    return;
  }
  for (int p = 0; p < n; ++p)
    if (ready_to.has(p)) write(s, peer_ready[p], kReadySet);
  for (int p = 0; p < n; ++p) {
    if (!wait_ready.has(p)) continue;
    wait(s, toggles.ready + p, kReadySet, CU_STREAM_WAIT_VALUE_GEQ);
    write(s, toggles.ready + p, 0);  // the only wait on it this call is done
  }
}

// After this PE's one-piece pushes (stream order): publish them, then wait for everything this
// PE receives in one piece or does not copy out.
void CeEngine::Impl::arrive(cudaStream_t s, const PeSet& data_to, const PeSet& data_from) {
  if (signal == CeSignal::kKernel) {
    arrive_kernel<<<1, threads, 0, s>>>(state, flags, me, data_to, data_from);
    cuda_check(cudaGetLastError(), "arrive kernel launch");
    return;
  }
  for (int p = 0; p < n; ++p)
    if (data_to.has(p)) write(s, peer_data[p], kLastPiece);
  for (int p = 0; p < n; ++p)
    if (data_from.has(p)) wait(s, toggles.data + p, kLastPiece, ops.data_wait);
}

// Piece `mark` of a multi-piece push to `pe` landed (stream order after its copy).
void CeEngine::Impl::signal_piece(cudaStream_t s, int pe, uint64_t mark) {
  if (signal == CeSignal::kMemop) return write(s, peer_data[pe], mark);
  signal_kernel<<<1, 1, 0, s>>>(state, flags, pe, me, mark);
  cuda_check(cudaGetLastError(), "signal kernel launch");
}

// Work after this on `s` may use piece `mark` of what `pe` pushes here.
void CeEngine::Impl::wait_piece(cudaStream_t s, int pe, uint64_t mark) {
  if (signal == CeSignal::kMemop) return wait(s, toggles.data + pe, mark, ops.data_wait);
  wait_kernel<<<1, 1, 0, s>>>(state, flags, pe, mark);
  cuda_check(cudaGetLastError(), "wait kernel launch");
}

// Ends the call on the caller's stream, every side stream joined: memop data words back to 0
// (kernel flags only grow; nothing to do).
void CeEngine::Impl::rearm(cudaStream_t s, const PeSet& received_from) {
  if (signal == CeSignal::kKernel) return;
  for (int p = 0; p < n; ++p)
    if (received_from.has(p)) write(s, toggles.data + p, 0);
}

const char* signal_name(CeSignal s) { return s == CeSignal::kMemop ? "memop" : "kernel"; }

CeSignal CeEngine::signal() const { return impl_->signal; }

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
  if (d.n > kMaxPes)
    raise(Status::kUnavailable, "%s: %d PEs; the GPU engine handles at most %d", caller, d.n, kMaxPes);
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
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  cuda_check(cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, device_), "cudaDeviceGetAttribute");
  d.state = heap->device_state_ptr();
  // Before allocating anything: a raise here leaves nothing behind.
  MemOps ops;
  int32_t support = probe_memops(device_, ops);
  d.signal = choose_signal(rt, support, caller);
  if (d.signal == CeSignal::kMemop) d.ops = ops;

  // Words: Flags (2n + 2), then Toggles (2n); then the staging slots.
  size_t flag_bytes = ((4 * d.n + 2) * sizeof(uint64_t) + 4095) / 4096 * 4096;
  slot_bytes_ = d.n > 1 ? staging_bytes / (d.n - 1) / 4096 * 4096 : 0;
  size_t total = flag_bytes + slot_bytes_ * (d.n - 1);
  d.window = static_cast<char*>(rt.gpu_malloc(total, 256, caller));
  d.staging = d.window + flag_bytes;
  auto* w = reinterpret_cast<uint64_t*>(d.window);
  d.flags = Flags{w, w + d.n, w + 2 * d.n, w + 2 * d.n + 1};
  d.toggles = Toggles{w + 2 * d.n + 2, w + 3 * d.n + 2};
  cuda_check(cudaMemset(d.window, 0, flag_bytes), "cudaMemset");
  d.peer_slot.assign(d.n, nullptr);
  d.peer_ready.assign(d.n, nullptr);
  d.peer_data.assign(d.n, nullptr);
  for (int pe = 0; pe < d.n; ++pe) {
    if (pe == d.me) continue;
    char* sym = d.staging + static_cast<size_t>(d.slot_index(d.me, pe)) * slot_bytes_;
    d.peer_slot[pe] = static_cast<char*>(rt.ptr(sym, pe));
    // The host-side counterpart of dev::signal_op's address translation, for the memop writes.
    d.peer_ready[pe] = static_cast<uint64_t*>(rt.ptr(d.toggles.ready + d.me, pe));
    d.peer_data[pe] = static_cast<uint64_t*>(rt.ptr(d.toggles.data + d.me, pe));
    if (!d.peer_slot[pe] || !d.peer_ready[pe] || !d.peer_data[pe])
      raise(Status::kUnavailable, "%s: no direct pointer to PE %d's GPU heap", caller, pe);
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
  event(&d.start);
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
        raise(Status::kInvalidArgument, "%s: %zu bytes at staging offset %zu exceed the %zu-byte slot per peer "
              "(MORI_CCL_GPU_STAGING_SIZE)", caller, x.bytes, x.staging_offset, slot_bytes_);
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
      raise(Status::kInvalidArgument, "%s: %zu bytes at staging offset %zu exceed the %zu-byte slot per peer "
            "(MORI_CCL_GPU_STAGING_SIZE)", caller, r.bytes, r.staging_offset, slot_bytes_);
    if (r.bytes == 0) continue;
    recv_chunks[k] = chunks(r.bytes, r.direct);
    ready_to.add(r.pe);
    if (!r.copy_to || recv_chunks[k] == 1) {
      data_from.add(r.pe);
      if (r.copy_to) copy_outs.push_back(CopyJob{static_cast<char*>(slot(r.pe)) + r.staging_offset, r.copy_to, r.bytes});
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
      d.wait_piece(rs, r.pe, piece_mark(c, c_n));
      CopyJob job{from + lo, to + lo, len};
      launch_copies(&job, 1, d.sm_count, rs);
    }
  };
  auto push = [&](size_t k, cudaStream_t ps) {
    cuda_check(cudaMemcpyAsync(remote[k], sends[k].src, sends[k].bytes, cudaMemcpyDeviceToDevice, ps),
               "cudaMemcpyAsync (push to peer)");
  };

  ++stats_.calls;
  // The local shard needs no peer: it overlaps the whole exchange.
  const bool local = local_bytes && local_dst != local_src;
  if (local) {
    cuda_check(cudaEventRecord(d.start, s), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(d.local, d.start, 0), "cudaStreamWaitEvent");
    CopyJob job{local_src, local_dst, local_bytes};
    launch_copies(&job, 1, 2 * d.sm_count, d.local);
    cuda_check(cudaEventRecord(d.local_done, d.local), "cudaEventRecord");
  }
  d.enter(s, ready_to, wait_ready);
  if (fork) cuda_check(cudaEventRecord(d.fork, s), "cudaEventRecord");
  if (s_send >= 0) push(s_send, s);

  std::vector<cudaEvent_t> before_arrive, at_end;
  for (size_t k = 0; k < sends.size(); ++k) {
    const CeSend& x = sends[k];
    if (x.bytes == 0 || static_cast<int>(k) == s_send) continue;
    cudaStream_t ps = d.push[x.pe];
    cuda_check(cudaStreamWaitEvent(ps, d.fork, 0), "cudaStreamWaitEvent");
    int c_n = send_chunks[k];
    if (c_n == 1) {  // signalled by the arrive kernel
      push(k, ps);
      cuda_check(cudaEventRecord(d.push_done[x.pe], ps), "cudaEventRecord");
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
        cuda_check(cudaMemcpyAsync(remote[k] + lo, src + lo, len, cudaMemcpyDeviceToDevice, ps),
                   "cudaMemcpyAsync (push to peer)");
      cudaEvent_t ev = d.chunk_done[x.pe * kMaxChunks + c];
      cuda_check(cudaEventRecord(ev, ps), "cudaEventRecord");
      cuda_check(cudaStreamWaitEvent(ss, ev, 0), "cudaStreamWaitEvent");
      d.signal_piece(ss, x.pe, piece_mark(c, c_n));
    }
    cuda_check(cudaEventRecord(d.push_done[x.pe], ss), "cudaEventRecord");
    at_end.push_back(d.push_done[x.pe]);
  }
  for (size_t k = 0; k < recvs.size(); ++k) {
    const CeRecv& r = recvs[k];
    if (r.bytes == 0 || !r.copy_to || recv_chunks[k] == 1 || static_cast<int>(k) == s_recv) continue;
    cudaStream_t rs = d.recv[r.pe];
    cuda_check(cudaStreamWaitEvent(rs, d.fork, 0), "cudaStreamWaitEvent");
    copy_out_pieces(r, recv_chunks[k], rs);
    cuda_check(cudaEventRecord(d.recv_done[r.pe], rs), "cudaEventRecord");
    at_end.push_back(d.recv_done[r.pe]);
  }
  for (cudaEvent_t ev : before_arrive) cuda_check(cudaStreamWaitEvent(s, ev, 0), "cudaStreamWaitEvent");
  if (data_to.any() || data_from.any()) d.arrive(s, data_to, data_from);
  launch_copies(copy_outs.data(), copy_outs.size(), 2 * d.sm_count, s);
  // After arrive: its signals must not wait for this copy-out, whose sender signals from a side stream.
  if (s_recv >= 0) copy_out_pieces(recvs[s_recv], recv_chunks[s_recv], s);
  for (cudaEvent_t ev : at_end) cuda_check(cudaStreamWaitEvent(s, ev, 0), "cudaStreamWaitEvent");
  d.rearm(s, ready_to);  // after the joins: every wait of this call on the data words is done
  if (local) cuda_check(cudaStreamWaitEvent(s, d.local_done, 0), "cudaStreamWaitEvent");
  for (size_t k = 0; k < sends.size(); ++k) (sends[k].direct ? stats_.direct_bytes : stats_.staged_bytes) += sends[k].bytes;
}

}  // namespace mori::collectives
