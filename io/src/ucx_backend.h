// SPDX-License-Identifier: MIT
// MORI-IO's RDMA backend over UCX's UCP: one context and worker per engine, driven by its
// own progress thread (woken through the worker's event fd), so statuses complete and
// software-emulated RMA (UCX over tcp/shared memory) is served with no caller action.
// The worker address travels in the EngineDesc and each region's packed rkey in its
// MemoryDesc: a transfer needs no control-plane round trip. Every UCP call runs on the
// progress thread (the worker is single-threaded); callers hand it work and return.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace mori::io {

class EngineImpl;
class Peer;
struct Transfer;
struct UcxState;  // the UCP objects, owned by the progress thread

// One contiguous piece of a transfer: local address, remote virtual address, bytes.
struct UcxSegment {
  char* local;
  uint64_t remote;
  uint64_t size;
};

// What UCX offers in this process, for the RDMA backend's selection and `mori info --io`.
struct UcxReport {
  bool loaded = false;
  std::string why;          // why not loaded
  std::string version;      // "1.13.1"
  std::vector<std::string> resources;  // "tcp/lo", "rc_mlx5/mlx5_0:1", ... (UCX_TLS applies)
  bool rdma = false;        // one of them is an RDMA transport (ib/rc/dc/ud, roce, efa)
};

class UcxBackend {
 public:
  // Throws (mori::Error) when UCX cannot be loaded or initialised.
  explicit UcxBackend(EngineImpl& engine);
  ~UcxBackend();
  UcxBackend(const UcxBackend&) = delete;
  UcxBackend& operator=(const UcxBackend&) = delete;

  // The worker's address (opaque bytes for the EngineDesc).
  const std::string& address() const { return address_; }
  const UcxReport& report() const { return report_; }

  // Maps a CPU region for remote access; returns its packed rkey.
  std::string map(uint32_t region, void* ptr, uint64_t size);
  // Unmaps it (the caller made sure no local transfer uses it any more).
  void unmap(uint32_t region);

  // Posts one get (read) or put (write) per segment to `peer`; the writes are followed by
  // an endpoint flush, so the transfer completes when the data is in the peer's memory.
  // Adds its pieces to the transfer; each ends in piece_done. Throws (nothing posted)
  // when the peer deregistered the remote region.
  void post(bool read, Peer& peer, const std::shared_ptr<Transfer>& t, uint32_t remote_region,
           uint64_t remote_key, const std::string& rkey, std::vector<UcxSegment> segs);
  // "tcp/lo, sysv/memory": the transports and devices the endpoint to `peer` uses.
  std::string transports_to(Peer& peer);
  // Initiator side of a deregistration at the peer: waits (bounded) until no operation
  // of ours on that remote region is in flight. False on timeout.
  bool quiesce(const std::string& peer_key, uint32_t region, double timeout_s);
  // In-flight accounting per remote region (also used by post's completions).
  void begin_remote_use(const std::string& peer_key, uint32_t region, int n);
  void end_remote_use(const std::string& peer_key, uint32_t region);

  // Runs fn on the progress thread and waits for it (exceptions travel back).
  void call(const std::function<void()>& fn);
  // Runs fn on the progress thread later.
  void submit(std::function<void()> fn);

 private:
  void loop();
  void check_stalls();

  EngineImpl& engine_;
  UcxReport report_;
  std::unique_ptr<UcxState> state_;
  std::string address_;

  std::mutex q_mu_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;

  std::mutex use_mu_;
  std::condition_variable use_cv_;
  std::map<std::pair<std::string, uint32_t>, int> remote_uses_;

  std::thread thread_;
};

// UCX as this process sees it (loads the library, makes a throwaway context; cached).
const UcxReport& ucx_report();
// Whether BackendType.RDMA should run on UCX in `auto` mode; if not, *why says why.
bool ucx_should_serve_rdma(std::string* why);

}  // namespace mori::io
