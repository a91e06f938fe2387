// SPDX-License-Identifier: MIT
#include "mori/core/status.h"
#include "umbp/src/clients.h"

namespace mori::umbp {

std::unique_ptr<Client> create_client(const Config& config) {
  config.validate();
  if (config.distributed)
    raise(Status::kUnavailable,
          "UMBPConfig.distributed: the distributed pool (umbp_master, peers) is not in this build yet; "
          "use the local store or the per-host server (standalone_process)");
  if (config.standalone_process) return make_standalone_process_client(config);
  return make_local_client(config);
}

}  // namespace mori::umbp
