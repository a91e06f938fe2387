// SPDX-License-Identifier: MIT
// UMBP's native gRPC client channel (grpc_channel.h). Built only with grpc++.
#include "src/grpc_channel.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/byte_buffer.h>

#include <chrono>
#include <vector>

#include "mori/core/status.h"
#include "src/master_grpc_auth.h"

namespace mori::umbp {

namespace {

// The calling thread's completion queue: only its own calls' tags arrive on it, one at a time,
// so the thread that waits is the one grpc wakes. Shut down and drained when the thread ends.
struct ThreadQueue {
  grpc::CompletionQueue cq;
  ~ThreadQueue() {
    cq.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (cq.Next(&tag, &ok)) {
    }
  }
};

grpc::CompletionQueue& thread_queue() {
  thread_local ThreadQueue q;
  return q.cq;
}

}  // namespace

GrpcChannel::GrpcChannel(std::string target, int max_message_bytes, std::string secret)
    : target_(std::move(target)), secret_(std::move(secret)) {
  MORI_CHECK_ARG(!target_.empty(), "target must not be empty");
  MORI_CHECK_ARG(max_message_bytes > 0, "max_message_bytes must be > 0, got %d", max_message_bytes);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_message_bytes);
  args.SetMaxSendMessageSize(max_message_bytes);
  // A restarted server is found again within about a second (grpcio's clients here: the same).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  channel_ = grpc::CreateCustomChannel(target_, grpc::InsecureChannelCredentials(), args);
  stub_ = std::make_unique<grpc::GenericStub>(channel_);
}

GrpcChannel::~GrpcChannel() = default;

GrpcCallResult GrpcChannel::call(const std::string& method, std::string_view request, double timeout_s) const {
  grpc::ClientContext ctx;
  if (timeout_s > 0)
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::microseconds(static_cast<int64_t>(timeout_s * 1e6)));
  if (!secret_.empty()) {
    const CallSignature s = sign_call(secret_, method, request, wall_clock_s());
    ctx.AddMetadata(CallVerifier::kTsKey, s.ts);
    ctx.AddMetadata(CallVerifier::kNonceKey, s.nonce);
    ctx.AddMetadata(CallVerifier::kSigKey, s.sig);
  }
  grpc::Slice slice(request.data(), request.size());
  grpc::ByteBuffer req(&slice, 1);
  grpc::CompletionQueue& cq = thread_queue();
  auto rpc = stub_->PrepareUnaryCall(&ctx, method, req, &cq);
  rpc->StartCall();
  grpc::ByteBuffer reply;
  grpc::Status status;
  rpc->Finish(&reply, &status, &ctx);
  void* tag = nullptr;
  bool ok = false;
  // The one tag on this thread's queue is this call's: Finish always completes (a dead server,
  // a deadline or a cancel end it with a status).
  while (cq.Next(&tag, &ok) && tag != &ctx) {
  }
  GrpcCallResult out;
  out.code = static_cast<int>(status.error_code());
  if (!status.ok()) {
    out.details = status.error_message();
    return out;
  }
  std::vector<grpc::Slice> slices;
  if (!reply.Dump(&slices).ok()) {
    out.code = static_cast<int>(grpc::StatusCode::INTERNAL);
    out.details = "umbp gRPC channel: unreadable reply";
    return out;
  }
  size_t n = 0;
  for (const auto& s : slices) n += s.size();
  out.body.reserve(n);
  for (const auto& s : slices) out.body.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

}  // namespace mori::umbp
