// SPDX-License-Identifier: MIT
#include "mori/transports/registry.h"

#include "mori/core/log.h"
#include "mori/core/status.h"

namespace mori {

// Each defined at the end of its transport's file.
std::unique_ptr<TransportCandidate> shm_candidate(const TransportContext&, const std::vector<int>&);
std::unique_ptr<TransportCandidate> ucx_candidate(const TransportContext&, const std::vector<int>&);
std::unique_ptr<TransportCandidate> tcp_candidate(const TransportContext&, const std::vector<int>&);
#if MORI_WITH_CUDA
std::unique_ptr<TransportCandidate> cuda_candidate(const TransportContext&, const std::vector<int>&);
#endif

const std::vector<TransportRow>& host_transport_table() {
  // shm first: same-host peers load and store directly; ucx when the job chose it for the
  // network (MORI_NET_TRANSPORT); tcp reaches whatever is left.
  static const std::vector<TransportRow> table{
      {"shm", shm_candidate},
      {"ucx", ucx_candidate},
      {"tcp", tcp_candidate},
  };
  return table;
}

const std::vector<TransportRow>& device_transport_table() {
  static const std::vector<TransportRow> table{
#if MORI_WITH_CUDA
      {"cuda", cuda_candidate},
#endif
  };
  return table;
}

TransportChoice choose_transports(const TransportContext& ctx, const std::vector<TransportRow>& table) {
  TransportChoice choice;
  choice.per_peer.assign(ctx.n_pes(), nullptr);
  std::vector<int> untaken;
  for (int pe = 0; pe < ctx.n_pes(); ++pe) untaken.push_back(pe);
  for (const TransportRow& row : table) {
    auto candidate = row.make(ctx, untaken);
    std::vector<int> mine, rest;
    for (int pe : untaken) (candidate->can_connect(pe) ? mine : rest).push_back(pe);
    auto transport = candidate->create(mine);
    if (!transport) {
      if (!mine.empty())
        raise(Status::kInternal, "transport %s took %zu peers on PE %d but built nothing", row.name, mine.size(),
              ctx.my_pe());
      continue;
    }
    for (int pe : mine) choice.per_peer[pe] = transport.get();
    MORI_LOG(kDebug, "TRANSPORT", "PE %d: %s reaches %zu PEs", ctx.my_pe(), row.name, mine.size());
    choice.transports.push_back(std::move(transport));
    untaken = std::move(rest);
  }
  return choice;
}

}  // namespace mori
