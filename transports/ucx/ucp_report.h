// SPDX-License-Identifier: MIT
// What UCX actually chose, in words. The common complaint about UCX-based stacks is
// a silent fall to TCP or to the wrong NIC, so MORI reads UCX's own report: the
// resources of a context (ucp_context_print_info) and the lanes of an endpoint
// (ucp_ep_print_info; UCX 1.13 has no transport list in ucp_ep_query).
#pragma once

#if MORI_HAVE_UCX_HEADERS

#include <string>
#include <vector>

#include "transports/ucx/ucp_library.h"

namespace mori::ucx {

// "transport/device" of every resource the context may use, e.g. "tcp/eth0", "rc_mlx5/mlx5_0:1".
std::vector<std::string> context_resources(const Ucp& api, ucp_context_h context);
// Whether a resource is an RDMA transport (InfiniBand/RoCE verbs: rc, dc, ud; EFA's srd).
bool is_rdma_resource(const std::string& resource);
// The lanes of an endpoint, one "transport/device: roles" entry per distinct
// transport/device, joined by "; " (e.g. "tcp/lo: am am_bw keepalive wireup").
std::string endpoint_lanes(const Ucp& api, ucp_ep_h ep);

// Parsers of the printed reports (separate for tests of the text formats).
std::vector<std::string> parse_context_resources(const std::string& report);
std::string parse_endpoint_lanes(const std::string& report);

}  // namespace mori::ucx

#endif  // MORI_HAVE_UCX_HEADERS
