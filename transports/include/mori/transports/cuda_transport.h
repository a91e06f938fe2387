// SPDX-License-Identifier: MIT
// GPUs of one node: every reachable peer's device region is IPC-mapped into this
// process (cudaIpcOpenMemHandle), so kernels load/store it over NVLink and the copy
// engines move bulk data with cudaMemcpyAsync. Host-initiated RMA runs on one
// dedicated stream (blocking forms synchronize it, nbi forms complete at quiet);
// the stream-ordered forms take the caller's stream (capturable in CUDA graphs).
// Streams cross this header as void* (cudaStream_t) so it needs no CUDA headers.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "mori/transports/transport.h"

namespace mori {

class CudaTransport : public Transport {
 public:
  CudaTransport(int my_pe, int n_pes, int device);
  ~CudaTransport() override;
  CudaTransport(const CudaTransport&) = delete;
  CudaTransport& operator=(const CudaTransport&) = delete;

  const char* name() const override { return "cuda"; }
  int device() const { return device_; }

  // The sharing handle of a device allocation starting at `base` (what connect_region opens).
  static std::string export_handle(void* base);

  void connect_region(MemRegion& region, int pe) override;
  void disconnect_region(MemRegion& region, int pe) override;
  void* direct_ptr(int pe, RemoteRef r) override;

  void put(int pe, RemoteRef dst, const void* src, size_t n, bool nbi) override;
  void get(int pe, void* dst, RemoteRef src, size_t n, bool nbi) override;
  uint64_t atomic(int pe, RemoteRef target, AmoOp op, int width, uint64_t operand, uint64_t compare) override;
  void put_signal(int pe, RemoteRef dst, const void* src, size_t n, RemoteRef signal, uint64_t value, SignalOp op,
                  bool nbi) override;
  // Every operation of this transport runs in order on one stream: fence has nothing to do.
  void fence(int pe) override {}
  void quiet() override;

  // Stream-ordered forms: enqueued on `stream` (cudaStream_t; nullptr = the legacy default stream).
  void put_on_stream(int pe, RemoteRef dst, const void* src, size_t n, void* stream);
  void get_on_stream(int pe, void* dst, RemoteRef src, size_t n, void* stream);
  // A kernel of one thread updates the signal (release, system scope) after what precedes it on `stream`.
  void signal_on_stream(int pe, RemoteRef signal, uint64_t value, SignalOp op, void* stream);

 private:
  char* at(int pe, RemoteRef r) const;

  int my_pe_;
  int device_;
  void* stream_ = nullptr;                       // cudaStream_t for host-initiated RMA
  uint64_t* amo_result_ = nullptr;               // pinned, mapped host word the AMO kernel writes
  std::map<std::pair<int, int>, void*> opened_;  // (region id, pe) -> IPC mapping
};

}  // namespace mori
