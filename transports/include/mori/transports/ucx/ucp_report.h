// SPDX-License-Identifier: MIT
// What UCX actually chose, in words. The common complaint about UCX-based stacks is
// a silent fall to TCP or to the wrong NIC, so MORI reads UCX's own report: the
// resources of a context (ucp_context_print_info) and the lanes of an endpoint
// (ucp_ep_print_info; UCX 1.13 has no transport list in ucp_ep_query).
// The parsers of the printed text need no UCX headers; only the readers that take a
// UCP handle do. Used by transports/ucx and by io/'s RDMA backend.
#pragma once

#include <string>
#include <vector>

#include "mori/transports/ucx/ucp_library.h"

namespace mori::ucx {

// The lanes of one endpoint that share a transport/device, e.g. {"tcp/lo", {"am", "am_bw",
// "keepalive", "wireup"}}.
struct Lane {
  std::string resource;            // "transport/device", e.g. "tcp/eth0", "rc_mlx5/mlx5_0:1"
  std::vector<std::string> roles;  // what UCX uses it for, in first-seen order, no repeats
};

// "transport/device" of every resource line of a context report.
std::vector<std::string> parse_context_resources(const std::string& report);
// One Lane per distinct transport/device of an endpoint report's lane lines, in lane order.
std::vector<Lane> parse_endpoint_lanes(const std::string& report);
// "tcp/lo: am am_bw keepalive wireup; rc_mlx5/mlx5_0:1: rma_bw" ("" for no lanes).
std::string describe_lanes(const std::vector<Lane>& lanes);
// Whether a resource is an RDMA transport (InfiniBand/RoCE verbs: rc, dc, ud; EFA's srd).
bool is_rdma_resource(const std::string& resource);

#if MORI_HAVE_UCX_HEADERS
// The resources the context may use (its report, parsed).
std::vector<std::string> context_resources(const Ucp& api, ucp_context_h context);
// The lanes of a wired-up endpoint (its report, parsed).
std::vector<Lane> endpoint_lanes(const Ucp& api, ucp_ep_h ep);
// The resources a context with `features` (UCP_FEATURE_*) would use here: a throwaway context
// is made, read and cleaned up. Throws mori::Error naming the UCP call that failed.
std::vector<std::string> probe_resources(const Ucp& api, uint64_t features);
#endif

}  // namespace mori::ucx
