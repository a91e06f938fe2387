// SPDX-License-Identifier: MIT
// The engine's state shared by its parts (peers, lanes, listener, backends).
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "mori/core/rate_limited_log.h"
#include "mori/io/engine.h"
#include "src/backends/backend.h"
#include "src/backends/cuda_ipc_backend.h"
#include "src/backends/direct_backend.h"
#include "src/backends/tcp_backend.h"
#include "src/backends/ucx_backend.h"
#include "src/gpu_memory.h"
#include "src/listener.h"
#include "src/peer.h"
#include "src/registry.h"

namespace mori::io {

// MORI_IO_* settings, read when the engine is made.
struct IoSettings {
  double timeout_s;            // a peer silent this long with work pending is dead
  double connect_timeout_s;    // dialling + authentication
  int lanes;                   // tcp connections per peer
  size_t chunk_bytes;          // striping unit of large transfers over the lanes
  size_t stripe_from;          // transfers larger than this are striped (auto: 192 KiB on 8+ CPUs, else the chunk)
  bool direct;                 // same-host CPU memory by process_vm_readv/writev
  int direct_threads;          // workers of large same-host copies
  size_t inline_bytes;         // posts up to this size are sent from the caller's thread
  size_t send_halves_upto;     // tcp messages above 64 KiB up to this go as two sends (send_message.h)
  int poll_us;                 // MORI_IO_TCP_POLL_US resolved ("auto" decided): 0 never busy-polls
  std::string rdma_transport;  // MORI_IO_RDMA_TRANSPORT: auto | tcp | ucx
  std::string node_id;         // MORI_NODE_ID ("" = this boot's id)
  int notify_override;         // MORI_IO_ENABLE_NOTIFICATION: -1 unset, else 0/1 (every backend)
  size_t max_notifications;    // inbound notifications kept; the oldest go beyond it
  size_t max_connections;      // authenticated connections served at once
  size_t max_connections_per_peer;
};
IoSettings read_settings();

class EngineImpl {
 public:
  EngineImpl(std::string key, IOEngineConfig config);
  ~EngineImpl();

  const std::string& key() const { return desc_.key; }
  const EngineDesc& desc() const { return desc_; }
  const IoSettings& settings() const { return settings_; }
  Registry& registry() { return registry_; }
  const uint8_t* token() const { return token_; }

  // Inbound notifications (target side), from the authenticated sender `from`; at most
  // settings().max_notifications kept, the oldest dropped beyond it.
  void note_inbound(const std::string& from, uint64_t uid);
  bool pop_inbound(const std::string& from, uint64_t uid);
  uint64_t dropped_notifications() const { return inbound_dropped_.load(); }
  bool notifications_on() const {
    std::lock_guard<std::mutex> lock(mu_);
    return notify_;
  }
  // The secret of the engine `key` if this engine holds its descriptor (itself included).
  bool secret_of(const std::string& key, std::string* secret) const;

  // Everything the public Engine does.
  void ensure_listener();
  void create_net_backend(BackendType type, int lanes, bool notify, bool direct);
  void create_xgmi_backend(const XgmiBackendConfig& config);
  void remove_backend(BackendType type);
  bool has_backend(BackendType type) const;
  void register_remote(const EngineDesc& desc);
  void deregister_remote(const EngineDesc& desc);
  MemoryDesc register_memory(uint64_t ptr, uint64_t size, int device_id, MemoryLocationType loc);
  void deregister_memory(const MemoryDesc& desc);
  uint64_t next_uid() { return next_uid_.fetch_add(1); }
  uint64_t next_request_id() { return next_request_.fetch_add(1); }
  // The chooser: the first enabled backend (cuda_ipc, direct, ucx, tcp) that moves between
  // `local` and `remote`, or nullptr; *peer is the remote engine (nullptr: not registered).
  Backend* choose(const MemoryDesc& local, const MemoryDesc& remote, std::shared_ptr<Peer>* peer);
  TransferStatus transfer(bool read, const MemoryDesc& local, const MemoryDesc& remote, const Segments& segs,
                          uint64_t uid, std::shared_ptr<ArrivalObserver> observer = nullptr);
  std::shared_ptr<Peer> peer(const std::string& key);
  bool session_alive(const MemoryDesc& local, const MemoryDesc& remote);
  // The peer `peer_key` deregisters its `region`: waits (bounded) until no backend has an
  // operation on it in flight. False on timeout.
  bool quiesce(const std::string& peer_key, uint32_t region, double timeout_s);

 private:
  // Validates and merges a batch; "" or the error (naming the entry).
  std::string plan(const Region& local, const MemoryDesc& remote, const Segments& segs, std::vector<Extent>* out);
  // BackendType.RDMA: UCX when MORI_IO_RDMA_TRANSPORT and the machine say so (mu_ held).
  void select_rdma_transport();
  // The enabled backends in the chooser's order, from the flags below (mu_ held).
  void update_enabled();
  // Every backend made so far (they live as long as the engine), for the register hooks.
  std::vector<Backend*> made_backends() const;

  EngineDesc desc_;
  IOEngineConfig config_;
  IoSettings settings_;
  Registry registry_;
  std::atomic<uint32_t> next_id_{0};
  std::atomic<uint64_t> next_uid_{0};
  std::atomic<uint64_t> next_request_{1};

  mutable std::mutex mu_;
  bool net_backend_ = false, xgmi_backend_ = false;
  BackendType net_type_ = BackendType::Unknown;
  int lanes_ = 1;
  bool notify_ = true;
  bool direct_allowed_ = true;
  std::unique_ptr<Listener> listener_;
  std::map<std::string, std::shared_ptr<Peer>> peers_;
  // The backends, each made on first need and kept until the engine goes (transfers in
  // flight use them); enabled_ lists those the configuration uses now, in the chooser's order.
  std::unique_ptr<TcpBackend> tcp_;
  std::unique_ptr<DirectBackend> direct_;
  std::unique_ptr<CudaIpcBackend> cuda_ipc_;
  std::unique_ptr<UcxBackend> ucx_;  // BackendType.RDMA on UCX
  bool ucx_active_ = false;          // the network backend is the RDMA one on UCX
  std::vector<Backend*> enabled_;

  uint8_t token_[16] = {};  // read by same-host peers to prove they see our memory
  // Unpopped notifications: by arrival (the oldest is dropped first) and by (sender, uid),
  // each entry naming its arrival number, so a pop and a drop find each other's entries.
  std::mutex inbound_mu_;
  uint64_t inbound_seq_ = 0;
  std::map<uint64_t, std::pair<std::string, uint64_t>> inbound_by_arrival_;
  std::map<std::pair<std::string, uint64_t>, std::deque<uint64_t>> inbound_;
  std::atomic<uint64_t> inbound_dropped_{0};
  log::RateLimit inbound_drop_log_{1, 10};

  friend class Peer;
  friend class Engine;
};

}  // namespace mori::io
