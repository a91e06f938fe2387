// SPDX-License-Identifier: MIT
// The engine's state shared by its parts (peers, lanes, listener, direct copies).
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "mori/core/rate_limited_log.h"
#include "mori/io/engine.h"
#include "src/direct_copy.h"
#include "src/gpu_memory.h"
#include "src/listener.h"
#include "src/peer.h"
#include "src/registry.h"
#include "src/ucx_backend.h"

namespace mori::io {

// MORI_IO_* settings, read when the engine is made.
struct IoSettings {
  double timeout_s;          // a peer silent this long with work pending is dead
  double connect_timeout_s;  // dialling + authentication
  int lanes;                 // tcp connections per peer
  size_t chunk_bytes;        // striping unit of large transfers over the lanes
  bool direct;               // same-host CPU memory by process_vm_readv/writev
  int direct_threads;        // workers of large same-host copies
  size_t inline_bytes;       // posts up to this size are sent from the caller's thread
  std::string rdma_transport;  // MORI_IO_RDMA_TRANSPORT: auto | tcp | ucx
  std::string node_id;         // MORI_NODE_ID ("" = this boot's id)
  int notify_override;         // MORI_IO_ENABLE_NOTIFICATION: -1 unset, else 0/1 (every backend)
  size_t max_notifications;    // inbound notifications kept; the oldest go beyond it
  size_t max_connections;      // authenticated connections served at once
  size_t max_connections_per_peer;
};
IoSettings read_settings();

enum class Route { kNone, kTcp, kDirect, kCudaIpc, kUcx };
const char* route_name(Route r);

class EngineImpl {
 public:
  EngineImpl(std::string key, IOEngineConfig config);
  ~EngineImpl();

  const std::string& key() const { return desc_.key; }
  const EngineDesc& desc() const { return desc_; }
  const IoSettings& settings() const { return settings_; }
  Registry& registry() { return registry_; }
  DirectCopier& direct() { return *direct_; }
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
  Route route(const MemoryDesc& local, const MemoryDesc& remote, std::shared_ptr<Peer>* peer);
  TransferStatus transfer(bool read, const MemoryDesc& local, const MemoryDesc& remote, const Segments& segs,
                          uint64_t uid);
  std::shared_ptr<Peer> peer(const std::string& key);
  bool session_alive(const MemoryDesc& local, const MemoryDesc& remote);
  // The UCX backend when BackendType.RDMA runs on UCX, else nullptr.
  UcxBackend* ucx() const {
    std::lock_guard<std::mutex> lock(mu_);
    return ucx_.get();
  }
  // backend_for's text: the route's name, for UCX with the transports it uses.
  std::string route_text(Route r, Peer* peer);

 private:
  struct Piece {
    uint64_t local_offset, remote_offset, size;
  };
  // Validates and merges a batch; "" or the error (naming the entry).
  std::string plan(const Region& local, const MemoryDesc& remote, const Segments& segs, std::vector<Piece>* out);
  void post_tcp(bool read, Peer& peer, const std::shared_ptr<Transfer>& t, Region& local, const MemoryDesc& remote,
                const std::vector<Piece>& pieces);
  void post_direct(bool read, const std::shared_ptr<Grant>& g, const std::shared_ptr<Transfer>& t, Region& local,
                   const MemoryDesc& remote, const std::vector<Piece>& pieces);
  void post_ucx(bool read, Peer& peer, const std::shared_ptr<Transfer>& t, Region& local, const MemoryDesc& remote,
                const std::vector<Piece>& pieces);
  // BackendType.RDMA: UCX when MORI_IO_RDMA_TRANSPORT and the machine say so (mu_ held).
  void select_rdma_transport();
  void post_cuda_ipc(bool read, const std::shared_ptr<Transfer>& t, Region& local, const MemoryDesc& remote,
                     const std::vector<Piece>& pieces);

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
  std::map<std::string, EngineDesc> remotes_;
  std::unique_ptr<DirectCopier> direct_;
  std::unique_ptr<gpu::IpcCopier> ipc_;
  std::unique_ptr<UcxBackend> ucx_;  // BackendType.RDMA on UCX (kept until the engine goes)
  bool ucx_active_ = false;           // the network backend is the RDMA one on UCX

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
