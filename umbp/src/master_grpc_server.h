// SPDX-License-Identifier: MIT
// The UMBP master's gRPC server in C++ (grpc++): it serves umbp.UMBPMaster and
// umbp.UMBPMasterAdmin (MORI's wire, umbp/proto/) from inside the master process. Every call is
// taken as raw bytes by one generic service and handed, on the worker thread that polled it in,
// to a handler (the binding's: the Python servicers, with the interpreter lock taken once per
// call); the handler's reply or status goes back as it gave it. What it replaces is
// grpcio's Python server, whose completion-queue thread and thread pool cost a call ~600 us of
// CPU (docs/umbp-master.md).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace mori::umbp {

// One call as the handler sees it.
struct GrpcCall {
  std::string method;                                         // "/umbp.UMBPMaster/BatchRouteGet"
  std::string request;                                        // the serialized request message
  std::vector<std::pair<std::string, std::string>> metadata;  // the client's metadata, in order
  std::string peer;                                           // "ipv4:127.0.0.1:40000"
  double time_remaining_s = -1;  // until the client's deadline when the handler starts; < 0: none
};

// What the handler answers: code 0 (OK) sends body; any other gRPC status code is sent with
// details and no body.
struct GrpcReply {
  int code = 0;
  std::string details;
  std::string body;
};

using GrpcHandler = std::function<void(const GrpcCall&, GrpcReply&)>;
// A method's answer without the handler (no interpreter lock): true with the reply body set, or
// false to leave the call to the handler.
using GrpcNativeMethod = std::function<bool(const std::string& request, std::string& reply)>;

// True when this build has grpc++ (libgrpc++-dev); otherwise a MasterGrpcServer cannot start.
bool grpc_server_available();

class MasterGrpcServer {
 public:
  // listen_address: host:port (port 0: any free one); workers: threads polling for calls and
  // running the handler (as many calls are handled at once);
  // reuse_port: share the port with sibling processes (SO_REUSEPORT); max_message_bytes: the
  // largest request or reply.
  MasterGrpcServer(std::string listen_address, GrpcHandler handler, int workers, bool reuse_port,
                   int max_message_bytes);
  ~MasterGrpcServer();
  MasterGrpcServer(const MasterGrpcServer&) = delete;
  MasterGrpcServer& operator=(const MasterGrpcServer&) = delete;

  // Calls of `method` ("/umbp.UMBPMaster/BatchRouteGet") are offered to `native` first (one per
  // method). Before start().
  void set_native(std::string method, GrpcNativeMethod native);

  // Binds and serves; the bound port. Raises mori::Error (kUnavailable) when the address cannot
  // be bound or the build has no grpc++.
  int start();
  // Stops accepting, lets calls in flight finish for up to grace_s (then cancels them), and
  // ends the worker threads. Idempotent.
  void stop(double grace_s);
  // Blocks until stop() has run.
  void wait();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mori::umbp
