// SPDX-License-Identifier: MIT
// Which transport reaches each peer. An ordered table per kind of memory, as NCCL's transport
// table: host memory shm, ucx, tcp; device memory cuda. Every PE walks the table in order; each
// entry first sees the peers no earlier entry took (its collective setup runs on every PE,
// peers or not), then is asked once per such peer whether it can connect, and the first that
// says yes reaches that peer. Adding a transport = one Candidate in its own file + one row.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mori/core/bootstrap.h"
#include "mori/core/env.h"
#include "mori/core/topology.h"
#include "mori/transports/transport.h"

namespace mori {

// What a transport may need to decide and to be built; filled by its user (the shmem runtime).
struct TransportContext {
  Bootstrap& bootstrap;
  const Topology& topology;
  const env::Settings& settings;  // MORI_NET_TRANSPORT, MORI_DISABLE_P2P, MORI_BOOTSTRAP_TIMEOUT
  int cuda_device = -1;           // this PE's GPU (device memory), or -1
  // A peer's write landed in [offset, offset + length) of `region` here (tcp's target thread).
  std::function<void(uint32_t region, uint64_t offset, uint64_t length)> on_delivery;
  // Something may have landed anywhere here (ucx progress: a NIC or peer wrote behind the CPU).
  std::function<void()> on_progress;

  int my_pe() const { return topology.my_pe(); }
  int n_pes() const { return topology.n_pes(); }
};

// One row of the table, made afresh for each job (what it decides collectively, it keeps).
class TransportCandidate {
 public:
  virtual ~TransportCandidate() = default;
  virtual const char* name() const = 0;
  // Whether this transport reaches `pe` (this PE included). Asked once per peer that no
  // earlier row took; the first yes wins.
  virtual bool can_connect(int pe) const = 0;
  // Builds the transport for `peers` (those it said yes to, maybe none). Called on every PE,
  // so it may be collective; null when no PE of the job uses it.
  virtual std::unique_ptr<Transport> create(const std::vector<int>& peers) = 0;
};

// The rows' makers: `untaken` are the peers (this PE included) no earlier row took. Collective:
// every PE calls each maker of the table in order.
using MakeCandidate = std::unique_ptr<TransportCandidate> (*)(const TransportContext&, const std::vector<int>& untaken);

struct TransportRow {
  const char* name;
  MakeCandidate make;
};

// The ordered tables (cuda is absent from a build without CUDA).
const std::vector<TransportRow>& host_transport_table();
const std::vector<TransportRow>& device_transport_table();

// The transports chosen for one kind of memory: the ones built, and per PE the one reaching it
// (null: none can).
struct TransportChoice {
  std::vector<std::unique_ptr<Transport>> transports;
  std::vector<Transport*> per_peer;
};

// Walks `table` for every PE of the job. Collective over ctx.bootstrap.
TransportChoice choose_transports(const TransportContext& ctx, const std::vector<TransportRow>& table);

}  // namespace mori
