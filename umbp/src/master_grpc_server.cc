// SPDX-License-Identifier: MIT
// The UMBP master's grpc++ server (master_grpc_server.h). Built when CMake finds grpc++
// (MORI_UMBP_HAVE_GRPCPP); without it the class exists and start() says what is missing, so
// the bindings and the Python side are the same in every build.
#include "src/master_grpc_server.h"

#include <algorithm>
#include <chrono>

#include "mori/core/status.h"

#if MORI_UMBP_HAVE_GRPCPP
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/byte_buffer.h>
#endif

namespace mori::umbp {

#if MORI_UMBP_HAVE_GRPCPP

bool grpc_server_available() { return true; }

namespace {

// One call: a unary RPC read as the first message of a generic bidi stream (its client sends one
// message and half-closes). The read completes on grpc's callback thread, which must not block:
// the handler (which takes the interpreter lock and may wait on Redis or a peer) runs on one of
// the server's workers, and the reply is written from there.
class CallReactor final : public grpc::ServerGenericBidiReactor {
 public:
  CallReactor(MasterGrpcServer::Impl* server, grpc::GenericCallbackServerContext* ctx) : server_(server), ctx_(ctx) {
    StartRead(&request_);
  }
  void OnReadDone(bool ok) override;
  void OnWriteDone(bool) override {}
  void OnDone() override { delete this; }
  void OnCancel() override {}
  void run(const GrpcHandler& handler);

 private:
  MasterGrpcServer::Impl* server_;
  grpc::GenericCallbackServerContext* ctx_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer reply_;
};

}  // namespace

struct MasterGrpcServer::Impl : grpc::CallbackGenericService {
  std::string listen_address;
  GrpcHandler handler;
  int n_workers = 1;
  bool reuse_port = false;
  int max_message_bytes = 0;
  std::unique_ptr<grpc::Server> server;
  std::vector<std::thread> workers;
  std::mutex mu;
  std::condition_variable work_cv, stopped_cv;
  std::deque<CallReactor*> queue;
  bool quitting = false;  // workers leave once the queue is empty
  bool stopped = false;

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
    return new CallReactor(this, ctx);
  }

  void enqueue(CallReactor* call) {
    {
      std::lock_guard<std::mutex> lk(mu);
      queue.push_back(call);
    }
    work_cv.notify_one();
  }

  void work() {
    for (;;) {
      CallReactor* call = nullptr;
      {
        std::unique_lock<std::mutex> lk(mu);
        work_cv.wait(lk, [&] { return quitting || !queue.empty(); });
        if (queue.empty()) return;
        call = queue.front();
        queue.pop_front();
      }
      call->run(handler);
    }
  }
};

namespace {

void CallReactor::OnReadDone(bool ok) {
  if (!ok) {  // the client went away, or sent no message
    Finish(grpc::Status(grpc::StatusCode::INTERNAL, "umbp master: no request message"));
    return;
  }
  server_->enqueue(this);
}

void CallReactor::run(const GrpcHandler& handler) {
  GrpcCall call;
  call.method = ctx_->method();
  std::vector<grpc::Slice> slices;
  if (request_.Dump(&slices).ok()) {
    size_t n = 0;
    for (const auto& s : slices) n += s.size();
    call.request.reserve(n);
    for (const auto& s : slices) call.request.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  for (const auto& [k, v] : ctx_->client_metadata()) call.metadata.emplace_back(std::string(k.data(), k.size()),
                                                                                 std::string(v.data(), v.size()));
  call.peer = ctx_->peer();
  const auto deadline = ctx_->deadline();
  if (deadline != std::chrono::system_clock::time_point::max())
    call.time_remaining_s = std::chrono::duration<double>(deadline - std::chrono::system_clock::now()).count();
  GrpcReply reply;
  try {
    handler(call, reply);
  } catch (const std::exception& e) {  // a handler bug must not take the server down
    reply.code = static_cast<int>(grpc::StatusCode::UNKNOWN);
    reply.details = std::string("umbp master: handler failed: ") + e.what();
  }
  if (reply.code != 0) {
    Finish(grpc::Status(static_cast<grpc::StatusCode>(reply.code), reply.details));
    return;
  }
  grpc::Slice slice(reply.body);
  reply_ = grpc::ByteBuffer(&slice, 1);
  StartWriteAndFinish(&reply_, grpc::WriteOptions(), grpc::Status::OK);
}

}  // namespace

MasterGrpcServer::MasterGrpcServer(std::string listen_address, GrpcHandler handler, int workers, bool reuse_port,
                                   int max_message_bytes)
    : impl_(std::make_unique<Impl>()) {
  MORI_CHECK_ARG(workers >= 1, "workers must be >= 1, got %d", workers);
  MORI_CHECK_ARG(max_message_bytes > 0, "max_message_bytes must be > 0, got %d", max_message_bytes);
  impl_->listen_address = std::move(listen_address);
  impl_->handler = std::move(handler);
  impl_->n_workers = workers;
  impl_->reuse_port = reuse_port;
  impl_->max_message_bytes = max_message_bytes;
}

MasterGrpcServer::~MasterGrpcServer() { stop(0); }

int MasterGrpcServer::start() {
  Impl& s = *impl_;
  MORI_CHECK_ARG(!s.server, "the master's gRPC server on %s is already started", s.listen_address.c_str());
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(s.listen_address, grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(s.max_message_bytes);
  builder.SetMaxSendMessageSize(s.max_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, s.reuse_port ? 1 : 0);
  builder.RegisterCallbackGenericService(&s);
  s.server = builder.BuildAndStart();
  if (!s.server || port == 0) {
    s.server.reset();
    raise(Status::kUnavailable, "umbp master: cannot listen on %s", s.listen_address.c_str());
  }
  for (int i = 0; i < s.n_workers; ++i) s.workers.emplace_back([&s] { s.work(); });
  return port;
}

void MasterGrpcServer::stop(double grace_s) {
  Impl& s = *impl_;
  if (!s.server) return;
  // Calls still queued keep their workers until they are answered: Shutdown waits for them.
  s.server->Shutdown(std::chrono::system_clock::now() +
                     std::chrono::microseconds(static_cast<int64_t>(std::max(grace_s, 0.0) * 1e6)));
  {
    std::lock_guard<std::mutex> lk(s.mu);
    s.quitting = true;
  }
  s.work_cv.notify_all();
  for (auto& t : s.workers) t.join();
  s.workers.clear();
  s.server->Wait();
  s.server.reset();
  {
    std::lock_guard<std::mutex> lk(s.mu);
    s.stopped = true;
  }
  s.stopped_cv.notify_all();
}

void MasterGrpcServer::wait() {
  Impl& s = *impl_;
  std::unique_lock<std::mutex> lk(s.mu);
  s.stopped_cv.wait(lk, [&] { return s.stopped; });
}

#else  // no grpc++ in this build

bool grpc_server_available() { return false; }

struct MasterGrpcServer::Impl {
  std::string listen_address;
};

MasterGrpcServer::MasterGrpcServer(std::string listen_address, GrpcHandler, int, bool, int)
    : impl_(std::make_unique<Impl>()) {
  impl_->listen_address = std::move(listen_address);
}
MasterGrpcServer::~MasterGrpcServer() = default;

int MasterGrpcServer::start() {
  raise(Status::kUnavailable,
        "umbp master: this build of mori has no grpc++ (install libgrpc++-dev, protobuf-compiler-grpc and "
        "rebuild), so it cannot serve %s from C++; UMBP_MASTER_SERVER=python serves it with grpcio",
        impl_->listen_address.c_str());
}
void MasterGrpcServer::stop(double) {}
void MasterGrpcServer::wait() {}

#endif

}  // namespace mori::umbp
