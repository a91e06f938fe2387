// SPDX-License-Identifier: MIT
// A gRPC client channel in C++ (grpc++) for UMBP's control plane: calls of any method of the
// master's or a peer's service, the messages taken and answered as bytes (the caller serializes
// them), signed in C++ with the job secret (master_grpc_auth.h's scheme), each run to completion
// on the calling thread (no thread hand-off, no callback thread). A call goes as one message of
// a call stream (UMBPCallStream, umbp_admin.proto) taken from the channel's pool, which spares
// it opening and closing a gRPC call of its own; where the server has no call streams, as a
// unary call through a completion queue of the calling thread's own. The binding releases the interpreter lock for the
// call. What it replaces is grpcio's Python client, whose per-call cost (its channel's polling thread, the lock taken
// and dropped around each step, the Python signing) is most of a small value's first read and put
// (docs/umbp-distributed.md). Built into mori.umbp._master_server, beside the server, so only processes that speak
// UMBP's gRPC load grpc++.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/generic/generic_stub.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

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
  // bytes (empty: calls go unsigned); streams: carry the calls as the messages of call streams
  // (UMBPCallStream, umbp_admin.proto) where the server answers them, unary calls otherwise.
  GrpcChannel(std::string target, int max_message_bytes, std::string secret, bool streams = true);
  ~GrpcChannel();
  GrpcChannel(const GrpcChannel&) = delete;
  GrpcChannel& operator=(const GrpcChannel&) = delete;

  // One call of `method` ("/umbp.UMBPMaster/BatchRouteGet") with the serialized request,
  // within timeout_s (<= 0: no deadline). Never throws for a failed call: the status says why
  // (UNAVAILABLE for a dead server, DEADLINE_EXCEEDED past the deadline). Safe from any thread.
  GrpcCallResult call(const std::string& method, std::string_view request, double timeout_s) const;

  const std::string& target() const { return target_; }

  // Whether calls go on call streams: asked for, built with protobuf, and the server has not
  // answered UNIMPLEMENTED to one.
  bool streams() const { return streams_.load(std::memory_order_relaxed); }

  struct CallStream;

 private:
  GrpcCallResult unary(const std::string& method, std::string_view request, double timeout_s) const;
  // The call on a stream of the pool; false when it must go unary instead (no stream answers).
  bool streamed(const std::string& method, std::string_view request, double timeout_s, GrpcCallResult& out) const;

  std::string target_;
  std::string secret_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> stub_;
  // Streams between calls: a caller takes one for its call and gives it back after (a stream
  // carries one call at a time). Up to kMaxStreams are kept; more callers at once open more.
  mutable std::atomic<bool> streams_;
  mutable std::mutex idle_mu_;
  mutable std::vector<std::unique_ptr<CallStream>> idle_;
};

}  // namespace mori::umbp
