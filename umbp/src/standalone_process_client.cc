// SPDX-License-Identifier: MIT
// Placeholder until the per-host server lands (same series of commits).
#include "mori/core/status.h"
#include "umbp/src/clients.h"

namespace mori::umbp {

std::unique_ptr<Client> make_standalone_process_client(const Config&) {
  raise(Status::kUnavailable, "UMBP per-host server client: not built yet");
}

}  // namespace mori::umbp
