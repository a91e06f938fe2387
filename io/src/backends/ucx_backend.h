// SPDX-License-Identifier: MIT
// MORI-IO's RDMA backend over UCX's UCP, on transports/ucx's UcpWorker: one context and
// worker per engine, progressed by the worker's thread (woken through its event fd), so
// statuses complete and software-emulated RMA (UCX over tcp/shared memory) is served with no
// caller action. The worker address travels in the EngineDesc and each region's packed rkey
// in its MemoryDesc: a transfer needs no control-plane round trip. The backend's UCP objects
// are touched only on the worker's thread: callers hand it work (UcpWorker::submit/call).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "src/backends/backend.h"

namespace mori::io {

class EngineImpl;
struct UcxState;  // the UCP objects, owned by the worker's thread

// What UCX offers in this process, for the RDMA backend's selection and `mori info --io`.
struct UcxReport {
  bool loaded = false;
  std::string why;                     // why not loaded
  std::string version;                 // "1.13.1"
  std::vector<std::string> resources;  // "tcp/lo", "rc_mlx5/mlx5_0:1", ... (UCX_TLS applies)
  bool rdma = false;                   // one of them is an RDMA transport (ib/rc/dc/ud, roce, efa)
};

class UcxBackend : public Backend {
 public:
  // Throws (mori::Error) when UCX cannot be loaded or initialised.
  explicit UcxBackend(EngineImpl& engine);
  ~UcxBackend() override;
  UcxBackend(const UcxBackend&) = delete;
  UcxBackend& operator=(const UcxBackend&) = delete;

  // The worker's address (opaque bytes for the EngineDesc).
  const std::string& address() const { return address_; }
  const UcxReport& report() const { return report_; }

  const char* name() const override { return "ucx"; }
  // CPU memory on both sides, when the peer runs UCX too: it published a worker address,
  // the region an rkey.
  bool can_move(const MemoryDesc& local, const MemoryDesc& remote, Peer& peer, bool same_node) override;
  // One get (read) or put (write) per extent; the writes are followed by an endpoint flush,
  // so the transfer completes when the data is in the peer's memory. Throws (nothing posted)
  // when the peer deregistered the remote region.
  void post(bool read, Peer& peer, const std::shared_ptr<Transfer>& t, Region& local, const MemoryDesc& remote,
            const std::vector<Extent>& extents) override;
  // The authenticated control connection (it also carries deregistrations), then the
  // endpoint's wireup.
  void connect(Peer& peer) override;
  // "ucx (tcp/lo, sysv/memory)": the transports and devices the endpoint to `peer` uses.
  std::string describe(Peer& peer) override;
  // CPU memory is mapped for UCX RMA; its packed rkey travels in the descriptor.
  void on_register(MemoryDesc& desc) override;
  void on_deregister(uint32_t region) override;
  bool quiesce(const std::string& peer_key, uint32_t region, double timeout_s) override;

  // In-flight accounting per remote region (post's completions end their uses).
  void begin_remote_use(const std::string& peer_key, uint32_t region, int n);
  void end_remote_use(const std::string& peer_key, uint32_t region);

 private:
  // Runs on the worker's thread every kStallCheckS: endpoints silent for MORI_IO_TIMEOUT_MS fail.
  void check_stalls();
  // How long the worker's thread may sleep (UcpWorker::Options::max_sleep_s).
  double max_sleep_s() const;
  // The transports and devices of the endpoint to `peer` (wires it up first).
  std::string transports_to(Peer& peer);

  EngineImpl& engine_;
  UcxReport report_;
  std::unique_ptr<UcxState> state_;  // with the worker, whose thread alone touches the rest
  std::string address_;

  std::mutex use_mu_;
  std::condition_variable use_cv_;
  std::map<std::pair<std::string, uint32_t>, int> remote_uses_;
};

// UCX as this process sees it (loads the library, probes a throwaway context; cached).
const UcxReport& ucx_report();
// Whether BackendType.RDMA should run on UCX in `auto` mode; if not, *why says why.
bool ucx_should_serve_rdma(std::string* why);

}  // namespace mori::io
