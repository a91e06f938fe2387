// SPDX-License-Identifier: MIT
#include "mori/transports/cuda_transport.h"

#include <cuda_runtime_api.h>

#include <cstring>

#include "cuda/cuda_kernels.h"
#include "mori/core/cuda_check.h"
#include "mori/core/log.h"
#include "mori/transports/registry.h"

namespace mori {
namespace {

// The region handle travels as a C string through the bootstrap: base64 of the 64-byte IPC handle.
constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64(const unsigned char* p, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = uint32_t(p[i]) << 16 | (i + 1 < n ? uint32_t(p[i + 1]) << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
    out += kB64[v >> 18 & 63];
    out += kB64[v >> 12 & 63];
    out += i + 1 < n ? kB64[v >> 6 & 63] : '=';
    out += i + 2 < n ? kB64[v & 63] : '=';
  }
  return out;
}

std::string unbase64(const std::string& s) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    if (c == '=') break;
    const char* pos = std::strchr(kB64, c);
    if (!pos || !c) raise(Status::kInvalidArgument, "malformed CUDA IPC handle string");
    acc = acc << 6 | uint32_t(pos - kB64);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>(acc >> bits & 0xff);
    }
  }
  return out;
}

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

}  // namespace

CudaTransport::CudaTransport(int my_pe, int n_pes, int device) : my_pe_(my_pe), device_(device) {
  CudaDeviceGuard guard(device_);
  cudaStream_t s;
  MORI_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
  void* word = nullptr;
  MORI_CUDA_CHECK(cudaHostAlloc(&word, sizeof(uint64_t), cudaHostAllocMapped | cudaHostAllocPortable));
  amo_result_ = static_cast<uint64_t*>(word);
}

CudaTransport::~CudaTransport() {
  CudaDeviceGuard guard(device_, std::nothrow);
  if (stream_) cudaStreamSynchronize(as_stream(stream_));
  for (auto& [key, mapping] : opened_) cudaIpcCloseMemHandle(mapping);
  opened_.clear();
  if (amo_result_) cudaFreeHost(amo_result_);
  if (stream_) cudaStreamDestroy(as_stream(stream_));
}

std::string CudaTransport::export_handle(void* base) {
  cudaIpcMemHandle_t h;
  MORI_CUDA_CHECK(cudaIpcGetMemHandle(&h, base));
  return base64(reinterpret_cast<const unsigned char*>(&h), sizeof(h));
}

void CudaTransport::connect_region(MemRegion& region, int pe) {
  if (region.kind != MemKind::kDevice)
    raise(Status::kUnavailable, "cuda transport maps device regions only (region %d)", region.id);
  if (region.mapped.size() < region.remote_bases.size()) region.mapped.resize(region.remote_bases.size(), nullptr);
  if (pe == my_pe_) {
    region.mapped[pe] = region.local_base;
    return;
  }
  std::string raw = unbase64(region.handles.at(pe));
  if (raw.size() != sizeof(cudaIpcMemHandle_t))
    raise(Status::kInvalidUsage, "PE %d shared no CUDA IPC handle for region %d", pe, region.id);
  cudaIpcMemHandle_t h;
  std::memcpy(&h, raw.data(), sizeof(h));
  CudaDeviceGuard guard(device_);
  void* mapping = nullptr;
  cudaError_t err = cudaIpcOpenMemHandle(&mapping, h, cudaIpcMemLazyEnablePeerAccess);
  if (err != cudaSuccess)
    raise(Status::kDevice, "PE %d could not map PE %d's GPU memory (region %d) with cudaIpcOpenMemHandle: %s", my_pe_,
          pe, region.id, cudaGetErrorString(err));
  region.mapped[pe] = mapping;
  opened_[{region.id, pe}] = mapping;
  MORI_LOG(kDebug, "CUDA", "mapped PE %d's region %d (%zu bytes) at %p", pe, region.id, region.size, mapping);
}

void CudaTransport::disconnect_region(MemRegion& region, int pe) {
  auto it = opened_.find({region.id, pe});
  if (it != opened_.end()) {
    CudaDeviceGuard guard(device_);
    cudaStreamSynchronize(as_stream(stream_));
    cudaIpcCloseMemHandle(it->second);
    opened_.erase(it);
  }
  if (pe < static_cast<int>(region.mapped.size())) region.mapped[pe] = nullptr;
}

char* CudaTransport::at(int pe, RemoteRef r) const {
  void* base = pe < static_cast<int>(r.region->mapped.size()) ? r.region->mapped[pe] : nullptr;
  if (!base) raise(Status::kInternal, "GPU region %d of PE %d is not mapped on PE %d", r.region->id, pe, my_pe_);
  return static_cast<char*>(base) + r.offset;
}

void* CudaTransport::direct_ptr(int pe, RemoteRef r) {
  void* base = pe < static_cast<int>(r.region->mapped.size()) ? r.region->mapped[pe] : nullptr;
  return base ? static_cast<char*>(base) + r.offset : nullptr;
}

void CudaTransport::put(int pe, RemoteRef dst, const void* src, size_t n, bool nbi) {
  CudaDeviceGuard guard(device_);
  MORI_CUDA_CHECK(cudaMemcpyAsync(at(pe, dst), src, n, cudaMemcpyDefault, as_stream(stream_)));
  if (!nbi) MORI_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_)));
}

void CudaTransport::get(int pe, void* dst, RemoteRef src, size_t n, bool nbi) {
  CudaDeviceGuard guard(device_);
  MORI_CUDA_CHECK(cudaMemcpyAsync(dst, at(pe, src), n, cudaMemcpyDefault, as_stream(stream_)));
  if (!nbi) MORI_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_)));
}

uint64_t CudaTransport::atomic(int pe, RemoteRef target, AmoOp op, int width, uint64_t operand, uint64_t compare) {
  CudaDeviceGuard guard(device_);
  uint64_t* result_dev = nullptr;
  MORI_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&result_dev), amo_result_, 0));
  cuda_kernels::launch_amo(at(pe, target), op, width, operand, compare, result_dev, stream_);
  MORI_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_)));
  uint64_t old = *reinterpret_cast<volatile uint64_t*>(amo_result_);
  return width == 4 ? (old & 0xffffffffull) : old;
}

void CudaTransport::put_signal(int pe, RemoteRef dst, const void* src, size_t n, RemoteRef signal, uint64_t value,
                               SignalOp op, bool nbi) {
  CudaDeviceGuard guard(device_);
  if (n) MORI_CUDA_CHECK(cudaMemcpyAsync(at(pe, dst), src, n, cudaMemcpyDefault, as_stream(stream_)));
  // Stream order: the copy has completed before the signal kernel starts.
  cuda_kernels::launch_signal(reinterpret_cast<uint64_t*>(at(pe, signal)), value, op, stream_);
  if (!nbi) MORI_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_)));
}

void CudaTransport::quiet() {
  CudaDeviceGuard guard(device_);
  MORI_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_)));
}

void CudaTransport::put_on_stream(int pe, RemoteRef dst, const void* src, size_t n, void* stream) {
  if (!n) return;
  CudaDeviceGuard guard(device_);
  MORI_CUDA_CHECK(cudaMemcpyAsync(at(pe, dst), src, n, cudaMemcpyDefault, as_stream(stream)));
}

void CudaTransport::get_on_stream(int pe, void* dst, RemoteRef src, size_t n, void* stream) {
  if (!n) return;
  CudaDeviceGuard guard(device_);
  MORI_CUDA_CHECK(cudaMemcpyAsync(dst, at(pe, src), n, cudaMemcpyDefault, as_stream(stream)));
}

void CudaTransport::signal_on_stream(int pe, RemoteRef signal, uint64_t value, SignalOp op, void* stream) {
  CudaDeviceGuard guard(device_);
  cuda_kernels::launch_signal(reinterpret_cast<uint64_t*>(at(pe, signal)), value, op, stream);
}

namespace {

struct DeviceAnnounce {
  unsigned char uuid[16];
  int32_t device;
};

// The local ordinal of the device with `uuid`, or -1 when this process cannot see it.
int ordinal_of(const unsigned char* uuid, int count) {
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, d) == cudaSuccess && std::memcmp(prop.uuid.bytes, uuid, 16) == 0) return d;
  }
  return -1;
}

// This PE's GPU, and the GPUs of this node it can load from and store to: same node, visible
// here, peer access possible, MORI_DISABLE_P2P unset. Every PE announces its GPU (collective).
class CudaCandidate : public TransportCandidate {
 public:
  explicit CudaCandidate(const TransportContext& ctx) : ctx_(ctx) {
    if (ctx.cuda_device < 0) raise(Status::kInternal, "PE %d: the cuda transport needs a device", ctx.my_pe());
    cudaDeviceProp prop;
    MORI_CUDA_CHECK(cudaGetDeviceProperties(&prop, ctx.cuda_device));
    DeviceAnnounce mine{};
    std::memcpy(mine.uuid, prop.uuid.bytes, 16);
    mine.device = ctx.cuda_device;
    all_ = ctx.bootstrap.allgather_values(mine);
    if (cudaGetDeviceCount(&count_) != cudaSuccess) count_ = 0;
  }
  const char* name() const override { return "cuda"; }
  bool can_connect(int pe) const override {
    if (pe == ctx_.my_pe()) return true;
    if (!ctx_.topology.same_node(pe, ctx_.my_pe()) || ctx_.settings.disable_p2p) return false;
    int d = ordinal_of(all_[pe].uuid, count_);
    int can = 0;
    if (d == ctx_.cuda_device)
      can = 1;
    else if (d >= 0)
      MORI_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, ctx_.cuda_device, d));
    if (!can)
      MORI_LOG(kInfo, "CUDA", "PE %d's GPU (device %d there) is not P2P-reachable from device %d", pe, all_[pe].device,
               ctx_.cuda_device);
    return can != 0;
  }
  std::unique_ptr<Transport> create(const std::vector<int>&) override {
    return std::make_unique<CudaTransport>(ctx_.my_pe(), ctx_.n_pes(), ctx_.cuda_device);
  }

 private:
  const TransportContext& ctx_;
  std::vector<DeviceAnnounce> all_;
  int count_ = 0;
};

}  // namespace

std::unique_ptr<TransportCandidate> cuda_candidate(const TransportContext& ctx, const std::vector<int>&) {
  return std::make_unique<CudaCandidate>(ctx);
}

}  // namespace mori
