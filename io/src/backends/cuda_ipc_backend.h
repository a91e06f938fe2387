// SPDX-License-Identifier: MIT
// The CUDA IPC backend (BackendType.XGMI): GPU memory of engines on one node, the peer's
// allocation opened by its IPC handle (carried in the MemoryDesc) and copied by the copy
// engines on the copier's streams.
#pragma once

#include <memory>

#include "src/backends/backend.h"
#include "src/gpu_memory.h"

namespace mori::io {

class EngineImpl;

class CudaIpcBackend : public Backend {
 public:
  CudaIpcBackend(EngineImpl& engine, int num_streams) : engine_(engine), copier_(num_streams) {}
  const char* name() const override { return "cuda_ipc"; }
  bool can_move(const MemoryDesc& local, const MemoryDesc& remote, Peer& peer, bool same_node) override {
    return local.loc == MemoryLocationType::GPU && remote.loc == MemoryLocationType::GPU && same_node;
  }
  void post(bool read, Peer& peer, const std::shared_ptr<Transfer>& t, Region& local, const MemoryDesc& remote,
            const std::vector<Extent>& extents) override;
  // GPU memory: the IPC handle of its allocation travels in the descriptor.
  void on_register(MemoryDesc& desc) override;

 private:
  EngineImpl& engine_;
  gpu::IpcCopier copier_;
};

}  // namespace mori::io
