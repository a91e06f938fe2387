// SPDX-License-Identifier: MIT
// The same-host backend: CPU memory of an engine on this host, copied by the kernel straight
// between the two processes (process_vm_readv/writev) once the peer granted access to the
// region (Peer::grant). Small batches are copied on the caller's thread, large ones split
// over the copier's workers and the caller (MORI_IO_DIRECT_THREADS).
#pragma once

#include <memory>

#include "mori/core/job_threads.h"
#include "mori/io/direct_copy.h"
#include "src/backends/backend.h"

namespace mori::io {

class EngineImpl;

class DirectBackend : public Backend {
 public:
  // `fallback` moves a batch whose grant was revoked between the choice and the post (tcp).
  DirectBackend(EngineImpl& engine, Backend& fallback);
  const char* name() const override { return "cma"; }
  bool can_move(const MemoryDesc& local, const MemoryDesc& remote, Peer& peer, bool same_node) override;
  void post(bool read, Peer& peer, const std::shared_ptr<Transfer>& t, Region& local, const MemoryDesc& remote,
            const std::vector<Extent>& extents) override;

 private:
  EngineImpl& engine_;
  Backend& fallback_;
  JobThreads copier_;  // copies the parts of a large transfer beside the caller
};

}  // namespace mori::io
