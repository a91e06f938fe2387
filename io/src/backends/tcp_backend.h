// SPDX-License-Identifier: MIT
// The tcp backend: requests over the peer's authenticated connections (lanes), large
// batches striped over them in chunks (MORI_IO_TCP_LANES, MORI_IO_TCP_CHUNK). Reaches any
// peer and any memory (GPU memory through a host staging buffer).
#pragma once

#include "src/backends/backend.h"

namespace mori::io {

class EngineImpl;

class TcpBackend : public Backend {
 public:
  explicit TcpBackend(EngineImpl& engine) : engine_(engine) {}
  const char* name() const override { return "tcp"; }
  bool can_move(const MemoryDesc&, const MemoryDesc&, Peer&, bool) override { return true; }
  void post(bool read, Peer& peer, const std::shared_ptr<Transfer>& t, Region& local, const MemoryDesc& remote,
            const std::vector<Extent>& extents) override;
  void connect(Peer& peer) override;

 private:
  EngineImpl& engine_;
};

}  // namespace mori::io
