// SPDX-License-Identifier: MIT
#include "mori/core/status.h"
#include "src/clients.h"

namespace mori::umbp {

std::unique_ptr<Client> create_client(const Config& config) {
  config.validate();
  // The distributed client's control plane (master and peer RPCs over gRPC, heartbeats) is
  // Python: mori.umbp.UMBPClient builds it over make_owned_pages_store().
  if (config.distributed)
    raise(Status::kUnavailable,
          "UMBPConfig.distributed: the distributed client is mori.umbp.UMBPClient (Python: its gRPC "
          "control plane lives there); the C++ factory builds the local and per-host-server clients only");
  if (config.standalone_process) return make_standalone_process_client(config);
  return make_local_client(config);
}

std::unique_ptr<Client> make_owned_pages_store(const Config& config) {
  config.validate();
  if (!config.distributed) raise(Status::kInvalidArgument, "make_owned_pages_store: config.distributed is not set");
  if (config.standalone_process)
    raise(Status::kInvalidArgument, "UMBPConfig: distributed and standalone_process are exclusive");
  if (config.resolved_role() != Role::Standalone)
    raise(Status::kInvalidArgument,
          "UMBPConfig.role: distributed mode needs role Standalone (each worker owns its pages)");
  return make_local_client(config);
}

}  // namespace mori::umbp
