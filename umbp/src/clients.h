// SPDX-License-Identifier: MIT
// The client of each deployment mode; create_client() (client_factory.cc) picks one.
#pragma once

#include <memory>

#include "mori/umbp/client.h"

namespace mori::umbp {

// In-process DRAM + SSD store (MORI's StandaloneClient; DeploymentMode::Local).
std::unique_ptr<Client> make_local_client(const Config& config);
// A client of the per-host server named by config.standalone_process (StandaloneProcess).
std::unique_ptr<Client> make_standalone_process_client(const Config& config);
// Distributed mode: the local store of the pages this worker owns (a LocalClient whose DRAM
// values carry checksums and whose peer_pages() the UMBPPeer service drives).
std::unique_ptr<Client> make_owned_pages_store(const Config& config);

}  // namespace mori::umbp
