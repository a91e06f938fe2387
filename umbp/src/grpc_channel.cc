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
#include "src/master_grpc_server.h"
#if MORI_UMBP_HAVE_PROTOBUF
#include "umbp_admin.pb.h"
#endif

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

// A reply's bytes in one string.
bool reply_bytes(grpc::ByteBuffer& reply, std::string& out) {
  std::vector<grpc::Slice> slices;
  if (!reply.Dump(&slices).ok()) return false;
  size_t n = 0;
  for (const auto& s : slices) n += s.size();
  out.reserve(n);
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return true;
}

#if MORI_UMBP_HAVE_PROTOBUF
constexpr bool kHaveMessages = true;
#else
constexpr bool kHaveMessages = false;  // no StreamedCall to carry calls in
#endif

// Streams kept between calls: one per thread that calls at once, up to this many.
constexpr size_t kMaxIdleStreams = 64;

// A stream's operations, as tags on its own completion queue.
enum StreamOp : uintptr_t { kStarted = 1, kWritten = 2, kRead = 4, kFinished = 8 };
void* tag_of(StreamOp op) { return reinterpret_cast<void*>(static_cast<uintptr_t>(op)); }

}  // namespace

// One call stream (umbp_admin.proto's UMBPCallStream.Calls) and the completion queue of its
// operations, its own: whichever thread holds the stream waits on it, and nothing else arrives.
struct GrpcChannel::CallStream {
  grpc::ClientContext ctx;
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> rw;
  grpc::ByteBuffer out, in;
  grpc::Status status;
  uintptr_t pending = 0;  // operations started and not yet completed
  bool started = false, finished = false;
  bool used = false;  // a call came back on it: its server answers call streams

  // Waits for the pending operations until `deadline`; false on the deadline (then the stream
  // is cancelled and its operations drained: it is not used again). `failed` collects the ops
  // that completed not ok.
  bool wait(std::chrono::system_clock::time_point deadline, uintptr_t& failed) {
    while (pending != 0) {
      void* tag = nullptr;
      bool ok = false;
      const auto r = cq.AsyncNext(&tag, &ok, deadline);
      if (r == grpc::CompletionQueue::TIMEOUT) {
        ctx.TryCancel();
        drain();
        return false;
      }
      if (r != grpc::CompletionQueue::GOT_EVENT) return false;
      const auto op = reinterpret_cast<uintptr_t>(tag);
      pending &= ~op;
      if (op == kStarted && ok) started = true;
      if (op == kFinished) finished = true;
      if (!ok) failed |= op;
    }
    return true;
  }
  void drain() {
    while (pending != 0) {
      void* tag = nullptr;
      bool ok = false;
      if (!cq.Next(&tag, &ok)) break;
      pending &= ~reinterpret_cast<uintptr_t>(tag);
      if (reinterpret_cast<uintptr_t>(tag) == kFinished) finished = true;
    }
  }
  // The stream's final status (after an operation failed: the server ended it, or it broke).
  const grpc::Status& finish(std::chrono::system_clock::time_point deadline) {
    if (!finished && (pending & kFinished) == 0) {
      pending |= kFinished;
      rw->Finish(&status, tag_of(kFinished));
    }
    uintptr_t failed = 0;
    if (!wait(deadline, failed)) status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded");
    return status;
  }
  ~CallStream() {
    if (rw) {
      if (!finished) {
        ctx.TryCancel();
        if ((pending & kFinished) == 0) {
          pending |= kFinished;
          rw->Finish(&status, tag_of(kFinished));
        }
      }
      drain();
    }
    cq.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (cq.Next(&tag, &ok)) {
    }
  }
};

GrpcChannel::GrpcChannel(std::string target, int max_message_bytes, std::string secret, bool streams)
    : target_(std::move(target)), secret_(std::move(secret)), streams_(streams && kHaveMessages) {
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
  GrpcCallResult out;
  if (streams() && streamed(method, request, timeout_s, out)) return out;
  return unary(method, request, timeout_s);
}

bool GrpcChannel::streamed(const std::string& method, std::string_view request, double timeout_s,
                           GrpcCallResult& out) const {
#if MORI_UMBP_HAVE_PROTOBUF
  using Clock = std::chrono::system_clock;
  const auto deadline = timeout_s > 0 ? Clock::now() + std::chrono::microseconds(static_cast<int64_t>(timeout_s * 1e6))
                                      : Clock::time_point::max();
  ::umbp::StreamedCall msg;
  msg.set_method(method);
  msg.set_request(request.data(), request.size());
  if (timeout_s > 0) msg.set_timeout_s(timeout_s);
  if (!secret_.empty()) {
    CallSignature sig = sign_call(secret_, method, request, wall_clock_s());
    msg.set_ts(std::move(sig.ts));
    msg.set_nonce(std::move(sig.nonce));
    msg.set_sig(std::move(sig.sig));
  }
  std::string wire;
  msg.SerializeToString(&wire);
  // A stream from the pool may have ended since its last call (the server stopped or
  // restarted): a call that fails there before the server took it goes once more on a new one.
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::unique_ptr<CallStream> s;
    {
      std::lock_guard<std::mutex> lk(idle_mu_);
      if (!idle_.empty()) {
        s = std::move(idle_.back());
        idle_.pop_back();
      }
    }
    const bool fresh = !s;
    if (fresh) {
      s = std::make_unique<CallStream>();
      s->rw = stub_->PrepareCall(&s->ctx, kCallStreamMethod, &s->cq);
      s->pending |= kStarted;
      s->rw->StartCall(tag_of(kStarted));
      uintptr_t failed = 0;
      if (!s->wait(deadline, failed)) {
        out = {static_cast<int>(grpc::StatusCode::DEADLINE_EXCEEDED), "Deadline Exceeded", {}};
        return true;
      }
    }
    uintptr_t failed = 0;
    if (s->started) {
      grpc::Slice slice(wire.data(), wire.size());
      s->out = grpc::ByteBuffer(&slice, 1);
      s->pending |= kWritten | kRead;
      s->rw->Write(s->out, tag_of(kWritten));
      s->rw->Read(&s->in, tag_of(kRead));
      if (!s->wait(deadline, failed)) {
        out = {static_cast<int>(grpc::StatusCode::DEADLINE_EXCEEDED), "Deadline Exceeded", {}};
        return true;
      }
    } else {
      failed = kStarted;
    }
    if (failed == 0) {
      ::umbp::StreamedReply reply;
      std::string bytes;
      if (!reply_bytes(s->in, bytes) || !reply.ParseFromString(bytes)) {
        out = {static_cast<int>(grpc::StatusCode::INTERNAL), "umbp gRPC channel: unreadable reply", {}};
        return true;
      }
      out.code = reply.code();
      out.details = std::move(*reply.mutable_details());
      out.body = std::move(*reply.mutable_body());
      s->used = true;
      s->in.Clear();
      std::lock_guard<std::mutex> lk(idle_mu_);
      if (idle_.size() < kMaxIdleStreams) idle_.push_back(std::move(s));
      return true;
    }
    // No reply: the stream ended. Its status says why.
    const grpc::Status& st = s->finish(deadline);
    if (st.error_code() == grpc::StatusCode::UNIMPLEMENTED && !s->used) {
      streams_.store(false, std::memory_order_relaxed);  // this server has no call streams
      return false;
    }
    // Sent again only where the server cannot have taken it: the request never left, or the
    // server ended this idle stream itself (a stopping server cancels the streams waiting for a
    // message, or finishes one after its last reply). A stream that broke after the request
    // left (a server killed mid-call) reports it, as a unary call would: at most once.
    const bool unsent = (failed & (kStarted | kWritten)) != 0;
    const bool ended_idle =
        st.error_code() == grpc::StatusCode::CANCELLED ||
        (st.error_code() == grpc::StatusCode::UNAVAILABLE && st.error_message() == kCallStreamStopping);
    if (!fresh && (unsent || ended_idle) && attempt == 0) continue;
    out.code = static_cast<int>(st.ok() ? grpc::StatusCode::UNAVAILABLE : st.error_code());
    out.details = st.ok() ? "umbp gRPC channel: the call stream ended without a reply" : st.error_message();
    return true;
  }
  return false;
#else
  (void)method, (void)request, (void)timeout_s, (void)out;
  return false;
#endif
}

GrpcCallResult GrpcChannel::unary(const std::string& method, std::string_view request, double timeout_s) const {
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
  if (!reply_bytes(reply, out.body)) {
    out.code = static_cast<int>(grpc::StatusCode::INTERNAL);
    out.details = "umbp gRPC channel: unreadable reply";
  }
  return out;
}

}  // namespace mori::umbp
