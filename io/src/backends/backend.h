// SPDX-License-Identifier: MIT
// One way of moving bytes between a local region and a peer engine's: tcp (connections to the
// peer's listener), direct (same-host CPU memory, process_vm_readv/writev), cuda_ipc (GPU
// memory of one node, IPC-mapped, copy engines) and ucx (BackendType.RDMA on UCX). The engine
// asks the backends its configuration enabled, in that order (cuda_ipc, direct, ucx, tcp):
// the first whose can_move() says yes moves the batch (EngineImpl::choose).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mori/io/types.h"

namespace mori::io {

class Peer;
struct Region;
struct Transfer;

// A validated piece of a batch, after merging: byte offsets into the local and remote regions.
struct Extent {
  uint64_t local_offset, remote_offset, size;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // What backend_for() says and errors name: "tcp", "cma", "cuda_ipc", "ucx".
  virtual const char* name() const = 0;

  // Whether this backend moves between `local` and `remote` of `peer` (`same_node`: the
  // peer's engine runs on this node). May ask the peer (a same-host grant); may throw.
  virtual bool can_move(const MemoryDesc& local, const MemoryDesc& remote, Peer& peer, bool same_node) = 0;
  // Posts a batch. Adds its pieces to `t` (Transfer::add_pieces) and ends each in
  // Transfer::piece_done, from any thread: the transfer settles when its last piece has.
  // Throws (mori::Error) when it could post nothing.
  virtual void post(bool read, Peer& peer, const std::shared_ptr<Transfer>& t, Region& local, const MemoryDesc& remote,
                    const std::vector<Extent>& extents) = 0;

  // Connects what transfers to `peer` will need (create_session: an unreachable peer is an
  // error there, not at the first transfer). Throws.
  virtual void connect(Peer& peer) {}
  // backend_for()'s text (ucx: with the UCX transports the endpoint uses).
  virtual std::string describe(Peer& peer) { return name(); }

  // A local region was registered: fill what its descriptor carries for this backend.
  virtual void on_register(MemoryDesc& desc) {}
  // A local region is gone: no transfer of this engine uses it any more.
  virtual void on_deregister(uint32_t region) {}
  // The peer `peer_key` deregisters its `region`: waits (bounded) until none of this
  // backend's operations on it is in flight. False on timeout.
  virtual bool quiesce(const std::string& peer_key, uint32_t region, double timeout_s) { return true; }
};

}  // namespace mori::io
