// SPDX-License-Identifier: MIT
// MORI-UMBP's per-host server (StandaloneProcess mode): one process per host wraps one local
// store (DRAM + SSD tiers) that every rank of the host shares through a Unix socket.
//
//   - One server per address: a lock file beside the socket (flock) decides; a second server
//     started for the same address (two ranks auto-starting at once) finds it held and is not
//     started (start() returns null), so its process exits cleanly.
//   - The socket is created 0600 and every connection's SO_PEERCRED uid must be the server's:
//     other users are refused before any request is read.
//   - A worker hands each host buffer over once (memfd, SCM_RIGHTS); the server maps it shared
//     and copies between that mapping and its store (one copy, as in-process). Every
//     (offset, size) is checked against the region before anything is touched. Memory the worker
//     did not register is reached with process_vm_readv/writev (io's direct_copy), where the
//     kernel allows it.
//   - A key becomes visible only once its bytes were copied whole: a request is served only
//     after its frame arrived whole, the source mapping belongs to the server (a worker that dies
//     cannot pull it away), and the store's put is atomic.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "mori/umbp/client.h"
#include "src/standalone_wire.h"

namespace mori::net {
class Acceptor;
class Connection;
}  // namespace mori::net

namespace mori::umbp {

// unix://$XDG_RUNTIME_DIR/mori-umbp/<node>.sock, else unix:///tmp/mori-umbp-<uid>/<node>.sock;
// <node> is `node_id` if given, else the host name.
std::string default_server_address(const std::string& node_id = "");

class LocalClient;
class SsdSharedIndex;

struct ServerOptions {
  std::string address;               // unix:///path.sock ("" -> default_server_address())
  Config config;                     // the store's (standalone_process must be unset)
  int64_t idle_exit_timeout_ms = 0;  // exit after this long without a worker (0: never)
};

struct ServerCounters {
  uint64_t connections = 0;   // workers accepted, ever
  uint64_t active = 0;        // workers connected now (gauge)
  uint64_t refused = 0;       // connections of other users, refused
  uint64_t requests = 0;      // requests served (ok or error reply)
  uint64_t errors = 0;        // requests answered with an error
  uint64_t bad_frames = 0;    // connections ended for breaking the framing
  uint64_t regions = 0;       // worker regions mapped now (gauge)
  uint64_t direct_reads = 0;  // values workers read from the SSD themselves (UMBP_SERVER_DIRECT_READS)
};

class StandaloneServer {
 public:
  // Claims the address and starts serving; null when another live server holds it.
  static std::unique_ptr<StandaloneServer> start(ServerOptions options);
  ~StandaloneServer();
  StandaloneServer(const StandaloneServer&) = delete;
  StandaloneServer& operator=(const StandaloneServer&) = delete;

  const std::string& address() const { return address_; }
  // Blocks until stop() or the idle timeout ends the server, or `timeout_s` (< 0: no limit)
  // passes; true once stopped.
  bool wait(double timeout_s);
  // Stops accepting, ends every connection, unmaps every region, removes the socket. Idempotent.
  void stop();
  ServerCounters counters() const;
  ClientStats store_stats() const;

 private:
  struct Session;
  StandaloneServer() = default;
  void serve(net::Connection& conn);
  // Serves one request into `reply`; *reply_fd: a descriptor of ours to hand over with it.
  void dispatch(Session& s, uint16_t op, const char* payload, size_t length, int passed_fd, wire::Writer& reply,
                int* reply_fd);
  void connection_ended();

  std::string address_, path_;
  int lock_fd_ = -1;
  int64_t idle_exit_timeout_ms_ = 0;
  Config config_;
  std::unique_ptr<LocalClient> store_;
  std::unique_ptr<SsdSharedIndex> ssd_index_;  // null: ranks ask for every value
  std::unique_ptr<net::Acceptor> acceptor_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
  double idle_since_ = 0;
  ServerCounters counters_;  // guarded by mu_
};

}  // namespace mori::umbp
