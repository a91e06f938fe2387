// SPDX-License-Identifier: MIT
#include "src/gpu_memory.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <thread>
#include <tuple>
#include <cstring>
#include <map>
#include <mutex>
#include <shared_mutex>

#include "mori/core/log.h"
#include "mori/core/status.h"

#if MORI_WITH_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "mori/core/cuda_check.h"
#endif

namespace mori::io::gpu {

#if MORI_WITH_CUDA

namespace {

// The calling thread's stream on `device` (the current device) for synchronous staging copies.
cudaStream_t thread_stream(int device) {
  thread_local std::map<int, cudaStream_t> streams;
  auto it = streams.find(device);
  if (it != streams.end()) return it->second;
  cudaStream_t s = nullptr;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) s = nullptr;
  streams[device] = s;
  return s;
}

using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

GetAddressRange address_range_fn() {
  static GetAddressRange fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPoint("cuMemGetAddressRange", &p, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      return static_cast<GetAddressRange>(nullptr);
    return reinterpret_cast<GetAddressRange>(p);
  }();
  return fn;
}

}  // namespace

bool available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::string bus_id(int device) {
  char buf[32] = {};
  if (cudaDeviceGetPCIBusId(buf, sizeof(buf), device) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  std::string s = buf;
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool export_ipc(const void* ptr, IpcHandle* handle, uint64_t* offset) {
  static_assert(sizeof(cudaIpcMemHandle_t) <= kIpcHandleBytes);
  GetAddressRange range = address_range_fn();
  CUdeviceptr base = 0;
  size_t size = 0;
  if (!range || range(&base, &size, reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS) return false;
  cudaIpcMemHandle_t h;
  if (cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base)) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  handle->fill(0);
  std::memcpy(handle->data(), &h, sizeof(h));
  *offset = reinterpret_cast<uint64_t>(ptr) - static_cast<uint64_t>(base);
  return true;
}

HostBuffer::HostBuffer(size_t n) : size_(n) {
  if (available() && cudaHostAlloc(reinterpret_cast<void**>(&data_), n, cudaHostAllocPortable) == cudaSuccess) {
    pinned_ = true;
    return;
  }
  cudaGetLastError();
  data_ = static_cast<char*>(std::malloc(n));
  if (!data_) raise(Status::kOutOfMemory, "cannot allocate a %zu-byte staging buffer", n);
}

HostBuffer::~HostBuffer() {
  if (pinned_)
    cudaFreeHost(data_);
  else
    std::free(data_);
}

// Reported, not thrown: a failed copy fails its transfer.
std::string enter_device(const CudaDeviceGuard& guard, int device) {
  if (guard.error() == cudaSuccess) return "";
  return cuda_error_text(format("cudaSetDevice(%d)", device).c_str(), guard.error());
}

std::string copy_to_host(void* host, const void* device_ptr, size_t n, int device) {
  CudaDeviceGuard guard(device, std::nothrow);
  if (std::string why = enter_device(guard, device); !why.empty()) return why;
  cudaStream_t s = thread_stream(device);
  cudaError_t err = cudaMemcpyAsync(host, device_ptr, n, cudaMemcpyDeviceToHost, s);
  if (err == cudaSuccess) err = cudaStreamSynchronize(s);
  return err == cudaSuccess ? "" : cuda_error_text("cudaMemcpyAsync (device to host)", err);
}

std::string copy_to_device(void* device_ptr, const void* host, size_t n, int device) {
  CudaDeviceGuard guard(device, std::nothrow);
  if (std::string why = enter_device(guard, device); !why.empty()) return why;
  cudaStream_t s = thread_stream(device);
  cudaError_t err = cudaMemcpyAsync(device_ptr, host, n, cudaMemcpyHostToDevice, s);
  if (err == cudaSuccess) err = cudaStreamSynchronize(s);
  return err == cudaSuccess ? "" : cuda_error_text("cudaMemcpyAsync (host to device)", err);
}

// One copy's completion, claimed once: by the thread that waits for the transfer (drive) or
// by the copier's completion thread, whichever comes first. The claimer synchronizes the
// copy's event, recycles it and reports; a waiter thus wakes from the event itself, not from
// the completion thread's report. The gate (held shared while driving) closes when the copier
// goes, so a status waited for after that does not touch it.
struct CopierGate {
  std::shared_mutex mu;
  bool open = true;
};

class IpcCompletion : public StatusDriver {
 public:
  IpcCompletion(std::shared_ptr<CopierGate> gate, cudaEvent_t event, int device,
                std::function<void(cudaEvent_t)> recycle, std::function<void(const std::string&)> done)
      : gate_(std::move(gate)), event_(event), device_(device), recycle_(std::move(recycle)), done_(std::move(done)) {}

  bool drive(const StatusState&, std::chrono::steady_clock::time_point deadline) override {
    std::shared_lock<std::shared_mutex> lock(gate_->mu);
    if (!gate_->open || claimed_.load()) return false;
    if (deadline != std::chrono::steady_clock::time_point::max()) {
      // A bounded wait polls without claiming: a waiter that gives up leaves it to the thread.
      CudaDeviceGuard guard(device_, std::nothrow);  // a failure shows in finish()
      cudaError_t q;
      while ((q = cudaEventQuery(event_)) == cudaErrorNotReady) {
        if (std::chrono::steady_clock::now() >= deadline) return true;
        std::this_thread::yield();
      }
      if (q != cudaSuccess) cudaGetLastError();  // reported by finish()'s synchronize
    }
    finish();
    return true;
  }

  // Claims, synchronizes and reports; false when claimed already.
  bool finish() {
    if (claimed_.exchange(true)) return false;
    CudaDeviceGuard guard(device_, std::nothrow);
    std::string why = enter_device(guard, device_);
    cudaError_t err = cudaEventSynchronize(event_);
    if (err != cudaSuccess) cudaGetLastError();
    recycle_(event_);
    if (why.empty() && err != cudaSuccess) why = cuda_error_text("cudaEventSynchronize (CUDA IPC copy)", err);
    auto done = std::move(done_);
    done(why);
    return true;
  }

 private:
  std::shared_ptr<CopierGate> gate_;
  cudaEvent_t event_;
  int device_;
  std::function<void(cudaEvent_t)> recycle_;
  std::function<void(const std::string&)> done_;
  std::atomic<bool> claimed_{false};
};

struct IpcCopier::Impl {
  int num_streams;
  std::mutex mu;
  std::map<int, std::vector<cudaStream_t>> streams;  // per device
  std::map<int, size_t> next;
  std::map<std::tuple<std::string, uint32_t, int>, char*> opened;  // (engine, region, local device) -> base
  std::vector<cudaEvent_t> free_events;
  std::shared_ptr<CopierGate> gate = std::make_shared<CopierGate>();

  // Completions nobody waits for: one thread synchronizes each copy's event in submission
  // order (a blocking event wait answers in microseconds; a host callback takes tens of them)
  // and skips those a waiter claimed.
  std::mutex done_mu;
  std::condition_variable done_cv;
  std::deque<std::shared_ptr<IpcCompletion>> pending;
  bool stopping = false;
  std::thread completer;

  cudaStream_t stream(int device) {
    auto& v = streams[device];
    if (v.empty()) {
      CudaDeviceGuard guard(device, std::nothrow);
      if (guard.error() != cudaSuccess) return nullptr;
      for (int i = 0; i < num_streams; ++i) {
        cudaStream_t s;
        if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess) v.push_back(s);
      }
      if (v.empty()) return nullptr;
    }
    return v[next[device]++ % v.size()];
  }

  cudaEvent_t event() {
    if (!free_events.empty()) {
      cudaEvent_t e = free_events.back();
      free_events.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) return nullptr;
    return e;
  }

  void recycle(cudaEvent_t e) {
    std::lock_guard<std::mutex> lock(mu);
    free_events.push_back(e);
  }

  void complete_loop() {
    while (true) {
      std::shared_ptr<IpcCompletion> c;
      {
        std::unique_lock<std::mutex> lock(done_mu);
        done_cv.wait(lock, [&] { return stopping || !pending.empty(); });
        if (pending.empty()) return;
        c = std::move(pending.front());
        pending.pop_front();
      }
      c->finish();  // false: its waiter finished it
    }
  }
};

IpcCopier::IpcCopier(int num_streams) : impl_(std::make_unique<Impl>()) {
  impl_->num_streams = num_streams;
  impl_->completer = std::thread([this] { impl_->complete_loop(); });
}

IpcCopier::~IpcCopier() {
  {
    std::lock_guard<std::mutex> lock(impl_->done_mu);
    impl_->stopping = true;
  }
  impl_->done_cv.notify_all();
  impl_->completer.join();  // runs what is still pending
  {
    std::unique_lock<std::shared_mutex> lock(impl_->gate->mu);  // waiters driving now finish first
    impl_->gate->open = false;
  }
  for (auto e : impl_->free_events) cudaEventDestroy(e);
  for (auto& [device, v] : impl_->streams) {
    CudaDeviceGuard guard(device, std::nothrow);
    for (auto s : v) {
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
  }
  for (auto& [key, base] : impl_->opened)
    if (base) {
      CudaDeviceGuard guard(std::get<2>(key), std::nothrow);
      cudaIpcCloseMemHandle(base);
    }
}

char* IpcCopier::open(const MemoryDesc& remote, int local_device, bool same_process, std::string* why) {
  if (same_process) return reinterpret_cast<char*>(remote.data);
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto key = std::make_tuple(remote.engine_key, remote.id, local_device);
  auto it = impl_->opened.find(key);
  if (it != impl_->opened.end()) return it->second + remote.ipc_offset;
  bool empty = true;
  for (auto b : remote.ipc_handle) empty = empty && b == 0;
  if (empty) {
    *why = format(
        "remote GPU memory region %u of engine '%s' carries no CUDA IPC handle (register it after "
        "create_backend(XGMI))",
        remote.id, remote.engine_key.c_str());
    return nullptr;
  }
  cudaIpcMemHandle_t h;
  std::memcpy(&h, remote.ipc_handle.data(), sizeof(h));
  CudaDeviceGuard guard(local_device, std::nothrow);
  if (std::string failed = enter_device(guard, local_device); !failed.empty()) {
    *why = failed;
    return nullptr;
  }
  void* base = nullptr;
  cudaError_t err = cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess);
  if (err != cudaSuccess) {
    cudaGetLastError();
    *why = cuda_error_text("cudaIpcOpenMemHandle", err);
    return nullptr;
  }
  impl_->opened[key] = static_cast<char*>(base);
  return static_cast<char*>(base) + remote.ipc_offset;
}

std::shared_ptr<StatusDriver> IpcCopier::copy(int device, const std::vector<std::pair<char*, const char*>>& dst_src,
                                              const std::vector<size_t>& sizes,
                                              std::function<void(const std::string&)> done) {
  cudaStream_t s;
  cudaEvent_t ev;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    s = impl_->stream(device);
    ev = impl_->event();
  }
  if (!s || !ev) {
    if (ev) impl_->recycle(ev);
    done("no CUDA stream or event for the copy");
    return nullptr;
  }
  CudaDeviceGuard guard(device, std::nothrow);
  if (std::string why = enter_device(guard, device); !why.empty()) {
    impl_->recycle(ev);
    done(why);
    return nullptr;
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    cudaError_t err = cudaMemcpyAsync(dst_src[i].first, dst_src[i].second, sizes[i], cudaMemcpyDefault, s);
    if (err != cudaSuccess) {
      cudaGetLastError();
      cudaStreamSynchronize(s);
      impl_->recycle(ev);
      done(cuda_error_text("cudaMemcpyAsync (CUDA IPC)", err));
      return nullptr;
    }
  }
  cudaEventRecord(ev, s);
  auto c = std::make_shared<IpcCompletion>(
      impl_->gate, ev, device, [impl = impl_.get()](cudaEvent_t e) { impl->recycle(e); }, std::move(done));
  {
    std::lock_guard<std::mutex> lock(impl_->done_mu);
    impl_->pending.push_back(c);
  }
  impl_->done_cv.notify_one();
  return c;
}

void IpcCopier::forget(const std::string& engine_key, uint32_t region) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto it = impl_->opened.begin(); it != impl_->opened.end();) {
    if (std::get<0>(it->first) == engine_key && std::get<1>(it->first) == region) {
      CudaDeviceGuard guard(std::get<2>(it->first), std::nothrow);
      cudaIpcCloseMemHandle(it->second);
      it = impl_->opened.erase(it);
    } else {
      ++it;
    }
  }
}

#else  // no CUDA

static const char* kNoCuda = "this MORI was built without CUDA: GPU memory cannot be moved";

bool available() { return false; }
std::string bus_id(int) { return ""; }
bool export_ipc(const void*, IpcHandle*, uint64_t*) { return false; }
HostBuffer::HostBuffer(size_t n) : size_(n) {
  data_ = static_cast<char*>(std::malloc(n));
  if (!data_) raise(Status::kOutOfMemory, "cannot allocate a %zu-byte staging buffer", n);
}
HostBuffer::~HostBuffer() { std::free(data_); }
std::string copy_to_host(void*, const void*, size_t, int) { return kNoCuda; }
std::string copy_to_device(void*, const void*, size_t, int) { return kNoCuda; }
struct IpcCopier::Impl {};
IpcCopier::IpcCopier(int) {}
IpcCopier::~IpcCopier() = default;
char* IpcCopier::open(const MemoryDesc&, int, bool, std::string* why) {
  *why = kNoCuda;
  return nullptr;
}
std::shared_ptr<StatusDriver> IpcCopier::copy(int, const std::vector<std::pair<char*, const char*>>&,
                                              const std::vector<size_t>&,
                                              std::function<void(const std::string&)> done) {
  done(kNoCuda);
  return nullptr;
}
void IpcCopier::forget(const std::string&, uint32_t) {}

#endif

}  // namespace mori::io::gpu
