// SPDX-License-Identifier: MIT
// MORI-IO's engine: registers memory, meets other engines through descriptors and moves
// bytes between registered regions with one-sided reads and writes. Not SPMD: no
// bootstrap; every backend shares the engine's listener, peers and ordering.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mori/io/arrival_observer.h"
#include "mori/io/transfer_status.h"
#include "mori/io/types.h"

namespace mori::io {

class EngineImpl;

// Offsets/sizes of one (local, remote) pair of a batch.
struct Segments {
  std::vector<uint64_t> local_offsets, remote_offsets, sizes;
};

class Session;

class Engine : public std::enable_shared_from_this<Engine> {
 public:
  Engine(std::string key, IOEngineConfig config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  EngineDesc engine_desc() const;
  // Idempotent: creating an existing type again only logs.
  void create_rdma_backend(const RdmaBackendConfig& config);
  void create_tcp_backend(const TcpBackendConfig& config);
  void create_xgmi_backend(const XgmiBackendConfig& config);
  void remove_backend(BackendType type);
  bool has_backend(BackendType type) const;

  void register_remote_engine(const EngineDesc& desc);
  void deregister_remote_engine(const EngineDesc& desc);

  MemoryDesc register_memory(uint64_t ptr, uint64_t size, int device_id, MemoryLocationType loc);
  // Waits (bounded by MORI_IO_TIMEOUT_MS) until no transfer uses the region, and until
  // every peer granted direct access has dropped it; later requests for it fail.
  void deregister_memory(const MemoryDesc& desc);

  uint64_t allocate_transfer_uid();

  // One (local, remote) pair: read = remote -> local, write = local -> remote. `observer`
  // (reads only) is told of the bytes as they land, where the backend sees them land.
  TransferStatus transfer(bool read, const MemoryDesc& local, const MemoryDesc& remote, const Segments& segs,
                          uint64_t uid, std::shared_ptr<ArrivalObserver> observer = nullptr);
  // MORI's multi-pair batch: one status per pair; a pair no backend can take fails with
  // ERR_BAD_STATE and the rest are not attempted (they stay INIT), as in MORI.
  std::vector<TransferStatus> batch(bool read, const std::vector<MemoryDesc>& locals,
                                    const std::vector<MemoryDesc>& remotes, const std::vector<Segments>& segs,
                                    const std::vector<uint64_t>& uids,
                                    const std::shared_ptr<ArrivalObserver>& observer = nullptr);

  // nullopt when no backend can take the pair. Throws (RuntimeError) if the peer cannot be reached.
  std::optional<Session> create_session(const MemoryDesc& local, const MemoryDesc& remote);
  // "tcp", "cma" (same host, process_vm_readv/writev), "cuda_ipc", or "" (none).
  std::string backend_for(const MemoryDesc& local, const MemoryDesc& remote);

  // Target side: SUCCESS once the transfer `uid` of engine `remote_key` has arrived; the
  // entry is erased by the pop, so a second pop returns nullopt.
  std::optional<TransferStatus> pop_inbound_transfer_status(const std::string& remote_key, uint64_t uid);
  // Notifications dropped unpopped because MORI_IO_MAX_NOTIFICATIONS were kept already.
  uint64_t dropped_notifications() const;

  EngineImpl& impl() { return *impl_; }

 private:
  std::unique_ptr<EngineImpl> impl_;
};

// A pre-resolved (local, remote) pair.
class Session {
 public:
  Session(std::shared_ptr<Engine> engine, MemoryDesc local, MemoryDesc remote)
      : engine_(std::move(engine)), local_(std::move(local)), remote_(std::move(remote)) {}
  TransferStatus transfer(bool read, const Segments& segs, uint64_t uid) {
    return engine_->transfer(read, local_, remote_, segs, uid);
  }
  uint64_t allocate_transfer_uid() { return engine_->allocate_transfer_uid(); }
  // False once either region was deregistered.
  bool alive() const;
  const MemoryDesc& local() const { return local_; }
  const MemoryDesc& remote() const { return remote_; }

 private:
  std::shared_ptr<Engine> engine_;
  MemoryDesc local_, remote_;
};

void set_log_level(const std::string& level);

}  // namespace mori::io
