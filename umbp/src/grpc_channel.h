// SPDX-License-Identifier: MIT
// A gRPC client channel in C++ (grpc++) for UMBP's control plane: unary calls of any method of
// the master's or a peer's service, the messages taken and answered as bytes (the caller
// serializes them), signed in C++ with the job secret (master_grpc_auth.h's scheme), each run
// to completion on the calling thread through a completion queue of that thread's own (no thread
// hand-off, no callback thread). The binding releases the interpreter lock for the call. What it
// replaces is grpcio's Python client, whose per-call cost (its channel's polling thread, the
// lock taken and dropped around each step, the Python signing) is most of a small value's first
// read and put (docs/umbp-distributed.md). Built into mori.umbp._master_server, beside the
// server, so only processes that speak UMBP's gRPC load grpc++.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/generic/generic_stub.h>

#include <memory>
#include <string>
#include <string_view>

namespace mori::umbp {

// One call's outcome: code 0 (OK) with the reply's bytes, or a gRPC status code and details.
struct GrpcCallResult {
  int code = 0;
  std::string details;
  std::string body;
};

class GrpcChannel {
 public:
  // target: host:port; max_message_bytes: the largest request or reply; secret: the job secret's
  // bytes (empty: calls go unsigned).
  GrpcChannel(std::string target, int max_message_bytes, std::string secret);
  ~GrpcChannel();
  GrpcChannel(const GrpcChannel&) = delete;
  GrpcChannel& operator=(const GrpcChannel&) = delete;

  // One unary call of `method` ("/umbp.UMBPMaster/BatchRouteGet") with the serialized request,
  // within timeout_s (<= 0: no deadline). Never throws for a failed call: the status says why
  // (UNAVAILABLE for a dead server, DEADLINE_EXCEEDED past the deadline). Safe from any thread.
  GrpcCallResult call(const std::string& method, std::string_view request, double timeout_s) const;

  const std::string& target() const { return target_; }

 private:
  std::string target_;
  std::string secret_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> stub_;
};

}  // namespace mori::umbp
