// SPDX-License-Identifier: MIT
// Placeholder until the local store lands (same series of commits).
#include "mori/core/status.h"
#include "umbp/src/clients.h"

namespace mori::umbp {

std::unique_ptr<Client> make_local_client(const Config&) {
  raise(Status::kUnavailable, "UMBP local store: not built yet");
}

}  // namespace mori::umbp
