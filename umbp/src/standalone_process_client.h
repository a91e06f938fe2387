// SPDX-License-Identifier: MIT
// The worker's side of StandaloneProcess mode: a Client whose calls go to the per-host server
// (standalone_server.h) over its Unix socket, one request per call or batch.
//
//   - Deadlines: every call finishes within UMBP_CALL_TIMEOUT_MS; a dead, stopped or missing
//     server is a mori::Error (kTimeout, kRemote) naming its address, never a hang. The
//     connection is then dropped; the next call connects afresh and hands the registered
//     regions over again, so a restarted server is picked up without the caller's help.
//   - register_memory(ptr, size) finds the memory file behind the range (memfd_lookup.h) and
//     sends its descriptor once; puts and gets inside a registered region travel as
//     (region, offset, size). Other memory is named by address and copied by the server with
//     process_vm_readv/writev where the kernel allows it.
//   - auto_start: when nobody answers at the address, the client starts the server program
//     (UMBP_STANDALONE_BIN, else the default command the Python package sets:
//     `python -m mori.umbp.server`) and waits up to startup_timeout_ms for it. Several workers
//     may do so at once: the servers' address lock keeps one, the others exit.
#pragma once

#include <string>
#include <vector>

namespace mori::umbp {

// The command auto_start runs when UMBP_STANDALONE_BIN is unset (argv; "--address ADDR" and the
// store's sizes are appended). mori.umbp sets [sys.executable, "-m", "mori.umbp.server"].
void set_default_server_command(std::vector<std::string> argv);
std::vector<std::string> default_server_command();

}  // namespace mori::umbp
