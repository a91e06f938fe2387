// SPDX-License-Identifier: MIT
// Which transport reaches the PEs of other hosts: MORI_NET_TRANSPORT.
//   auto    (default) ucx when UCX loads and reports an RDMA transport on every PE, tcp otherwise
//   tcp     MORI's own tcp transport
//   ucx     UCX; fails naming why when UCX cannot be loaded
//   ucx-all UCX for every pair of distinct PEs, same host included (testing UCX's
//           shared-memory and tcp paths on one machine)
// Compiled with or without UCX's headers (without them only auto and tcp can work).
#pragma once

#include <string>
#include <vector>

#include "mori/core/bootstrap.h"

namespace mori::ucx {

struct Ucp;

struct NetChoice {
  bool use_ucx = false;      // ucx for the network pairs
  bool all_pairs = false;    // ucx-all: same-host pairs too
  const Ucp* api = nullptr;  // set when use_ucx
  std::string reason;        // why this choice, for the log and `mori info`
};

// Collective over `bootstrap`: every PE passes the setting and whether it has
// network peers (other hosts, or MORI_DISABLE_P2P) and same-host peers; every PE
// gets the same choice. Throws when the setting is invalid, differs between PEs,
// or asks for ucx where UCX cannot be loaded.
NetChoice choose_net_transport(Bootstrap& bootstrap, const std::string& setting, bool has_net_peers,
                               bool has_local_peers);

}  // namespace mori::ucx
