// SPDX-License-Identifier: MIT
// The UMBP master's grpc++ server (master_grpc_server.h). Built only when CMake finds grpc++
// (umbp/CMakeLists.txt builds mori.umbp._master_server then).
#include "src/master_grpc_server.h"

#include <absl/synchronization/mutex.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/byte_buffer.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <optional>
#include <shared_mutex>
#include <string_view>
#include <unordered_set>

#include "mori/core/job_threads.h"
#include "mori/core/status.h"
#include "src/master_grpc_auth.h"
#if MORI_UMBP_HAVE_PROTOBUF
#include "umbp_admin.pb.h"
#endif

namespace mori::umbp {

int grpc_worker_threads(int requested) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(std::min(requested, 2), std::min(requested, cores));
}

namespace {

// The last value of a metadata key (what Python's dict() of the metadata keeps), or "".
std::string_view metadata_value(const std::multimap<grpc::string_ref, grpc::string_ref>& md, std::string_view key) {
  std::string_view out;
  auto [lo, hi] = md.equal_range(grpc::string_ref(key.data(), key.size()));
  for (auto it = lo; it != hi; ++it) out = std::string_view(it->second.data(), it->second.size());
  return out;
}

// One call's state on the completion queue: a unary RPC read as the first message of a generic
// bidi stream (its client sends one message and half-closes), or a call stream
// (kCallStreamMethod), read and answered message by message. Its tag is the object itself;
// `stage` says which operation completed.
struct Call {
  enum Stage { kRequested, kRead, kStreamRead, kStreamWritten, kFinished } stage = kRequested;
  grpc::GenericServerContext ctx;
  grpc::GenericServerAsyncReaderWriter stream{&ctx};
  grpc::ByteBuffer request, reply;
  bool waiting = false;  // a call stream's Read is pending (under Impl::streams_mu)
};

// Who called, for the signature check and the handler: a unary call's metadata, or a streamed
// call's own fields (its stream's metadata besides).
struct CallSite {
  std::string_view method, ts, nonce, sig;
  double time_remaining_s = -1;
  bool streamed = false;
};

// A request's bytes in one piece: a view of grpc's own slice when it arrived in one (the usual
// case for the master's small requests: no copy), else joined into `joined`.
std::string_view request_bytes(grpc::ByteBuffer& buffer, std::vector<grpc::Slice>& slices, std::string& joined) {
  if (!buffer.Dump(&slices).ok()) return {};
  if (slices.size() == 1) return {reinterpret_cast<const char*>(slices[0].begin()), slices[0].size()};
  size_t n = 0;
  for (const auto& s : slices) n += s.size();
  joined.reserve(n);
  for (const auto& s : slices) joined.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return joined;
}

// The reply's bytes as a slice that owns them (no copy into grpc's memory).
grpc::Slice owned_slice(std::string&& body) {
  auto* owned = new std::string(std::move(body));
  return grpc::Slice(owned->data(), owned->size(), [](void* p) { delete static_cast<std::string*>(p); }, owned);
}

// Seconds until the client's deadline when the call is answered; < 0: none.
double time_remaining_s(const grpc::GenericServerContext& ctx) {
  const auto deadline = ctx.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return -1;
  return std::max(0.0, std::chrono::duration<double>(deadline - std::chrono::system_clock::now()).count());
}

GrpcCall call_of(Call& c, const CallSite& site, std::string request) {
  GrpcCall call;
  call.method = site.method;
  call.request = std::move(request);
  for (const auto& [k, v] : c.ctx.client_metadata())
    call.metadata.emplace_back(std::string(k.data(), k.size()), std::string(v.data(), v.size()));
  if (site.streamed && !site.sig.empty()) {
    call.metadata.emplace_back(CallVerifier::kTsKey, site.ts);
    call.metadata.emplace_back(CallVerifier::kNonceKey, site.nonce);
    call.metadata.emplace_back(CallVerifier::kSigKey, site.sig);
  }
  call.peer = c.ctx.peer();
  call.time_remaining_s = site.time_remaining_s;
  return call;
}

}  // namespace

// The workers are the completion queue's pollers (as in grpc++'s synchronous server): the thread
// that sees a request arrive runs its handler and writes the reply, so a call crosses no thread
// between the socket and the handler. A handler may block (on the interpreter lock, Redis, a
// peer): the other workers keep polling meanwhile. (grpc++'s callback API would run the
// handler on grpc's own few callback threads, where blocking is not allowed, or cost a hand-off
// to a pool.)
struct MasterGrpcServer::Impl {
  std::string listen_address;
  GrpcHandler handler;
  int n_workers = 1;
  bool handlers_wait = false;
  bool reuse_port = false;
  int max_message_bytes = 0;
  struct Job;
  // The calls of a batched native waiting for a handler thread (set_native_batch).
  struct BatchQueue {
    std::mutex mu;
    std::deque<std::shared_ptr<Job>> jobs;
    int in_flight = 0;       // batches scheduled or running
    bool scheduled = false;  // one is scheduled and has not started: it takes what arrives
    uint64_t batches = 0, calls = 0;
  };
  struct Native {
    std::string method;
    GrpcNativeMethod fn;
    bool may_wait = false;  // it waits on something outside the process (Redis)
    GrpcNativeBatchMethod batch;
    std::unique_ptr<BatchQueue> queue;  // with batch
  };
  std::vector<Native> natives;  // a few: a scan is cheapest
  CallVerifier* verifier = nullptr;
  std::unordered_set<std::string> verified_methods;
  GrpcRefusedHook on_refused;
  grpc::AsyncGenericService service;
  std::unique_ptr<grpc::ServerCompletionQueue> cq;
  std::unique_ptr<grpc::Server> server;
  std::vector<std::thread> workers;
  std::mutex mu;
  std::condition_variable stopped_cv;
  bool stopped = false;
  // A worker holds `ops` (shared) from taking a tag until it has started the operations that
  // tag leads to, its handler included; stop() takes it alone to set `draining` and shut the
  // queue down, so no operation starts on a queue already shut down (grpc aborts the process),
  // whatever a handler was doing when stop() came. Tags drained after that start nothing.
  std::shared_mutex ops;
  bool draining = false;

  // Offer the server one more slot for an incoming call.
  void request_call() {
    auto* c = new Call;
    service.RequestCall(&c->ctx, &c->stream, cq.get(), cq.get(), c);
  }

  void work() {
    void* tag = nullptr;
    bool ok = false;
    while (cq->Next(&tag, &ok)) {
      auto* c = static_cast<Call*>(tag);
      std::shared_lock<std::shared_mutex> starting(ops);
      if (draining) {  // the server and its calls are gone: nothing more to start
        delete c;
        continue;
      }
      switch (c->stage) {
        case Call::kRequested:
          if (!ok) {  // the server is shutting down: this slot was never used
            delete c;
            break;
          }
          request_call();
          c->stage = Call::kRead;
          c->stream.Read(&c->request, c);
          break;
        case Call::kRead:
          if (ok && streams_served && c->ctx.method() == kCallStreamMethod) {
            open_stream(c);
            answer_streamed(*c);
            break;
          }
          if (!ok) {  // the client went away, or sent no message
            c->stage = Call::kFinished;
            c->stream.Finish(grpc::Status(grpc::StatusCode::INTERNAL, "umbp master: no request message"), c);
            break;
          }
          answer(*c);
          break;
        case Call::kStreamRead:
          if (!read_done(c, ok)) {  // the client closed its side, or went away
            c->stage = Call::kFinished;
            c->stream.Finish(grpc::Status::OK, c);
            break;
          }
          answer_streamed(*c);
          break;
        case Call::kStreamWritten:
          if (!ok) {  // the stream broke: its Finish completes (not ok) and frees it
            close_stream(c);
            c->stage = Call::kFinished;
            c->stream.Finish(grpc::Status::OK, c);
            break;
          }
          read_next(c);
          break;
        case Call::kFinished: delete c; break;
      }
    }
  }

  // A signed call's refusal (its details), or nothing when it may go on.
  std::optional<std::string> refused(const CallSite& site, std::string_view request) {
    if (verifier == nullptr || verified_methods.count(std::string(site.method)) == 0) return std::nullopt;
    auto refusal = verifier->check(site.method, site.ts, site.nonce, site.sig, request, wall_clock_s());
    if (!refusal) return std::nullopt;
    if (on_refused) {
      try {
        on_refused(refusal->reason);
      } catch (const std::exception&) {  // a counter that failed must not keep the refusal back
      }
    }
    return refusal->details;
  }

  const Native* native_of(std::string_view method) const {
    for (const auto& n : natives)
      if (n.method == method) return &n;
    return nullptr;
  }

  // One call, unary or streamed, on the poller that took it in: the signature's check, then its
  // native method. What may wait (the handler, natives that wait on Redis) runs here too, or,
  // where the server has handler threads, is queued for them: false then, and the reply goes
  // out from there.
  bool run(Call& c, const CallSite& site, std::string_view request, GrpcReply& reply) {
    try {
      if (auto details = refused(site, request)) {
        reply.code = static_cast<int>(grpc::StatusCode::UNAUTHENTICATED);
        reply.details = std::move(*details);
        return true;
      }
      const Native* native = native_of(site.method);
      if (native != nullptr && (!native->may_wait || handler_threads == 0)) {
        if (handler_threads > 0 && request.size() > inline_bytes) {  // a batch: the worker goes on polling
          queue(c, site, request, native);
          return false;
        }
        if (native->fn(request, reply.body, site.time_remaining_s)) return true;
        reply.body.clear();
        native = nullptr;  // left to the handler
      }
      if (handler_threads > 0) {
        if (native != nullptr && native->batch)
          queue_batched(c, site, request, *native);
        else
          queue(c, site, request, native);
        return false;
      }
      handler(call_of(c, site, std::string(request)), reply);
    } catch (const std::exception& e) {  // a handler bug must not take the server down
      reply.code = static_cast<int>(grpc::StatusCode::UNKNOWN);
      reply.details = std::string("umbp master: handler failed: ") + e.what();
    }
    return true;
  }

  void answer(Call& c) {
    GrpcReply reply;
    std::vector<grpc::Slice> slices;
    std::string joined;
    const std::string_view request = request_bytes(c.request, slices, joined);
    const auto& md = c.ctx.client_metadata();
    CallSite site{c.ctx.method(), metadata_value(md, CallVerifier::kTsKey), metadata_value(md, CallVerifier::kNonceKey),
                  metadata_value(md, CallVerifier::kSigKey), time_remaining_s(c.ctx)};
    if (run(c, site, request, reply)) finish_unary(c, reply);
  }

  void finish_unary(Call& c, GrpcReply& reply) {
    c.stage = Call::kFinished;
    if (reply.code != 0) {
      c.stream.Finish(grpc::Status(static_cast<grpc::StatusCode>(reply.code), reply.details), &c);
      return;
    }
    grpc::Slice slice = owned_slice(std::move(reply.body));
    c.reply = grpc::ByteBuffer(&slice, 1);
    c.stream.WriteAndFinish(c.reply, grpc::WriteOptions(), grpc::Status::OK, &c);
  }

  // The handler threads (set_handler_threads): calls that may wait, queued by the pollers with
  // what they need (a streamed call's fields are gone once its poller moves on).
  struct Job {
    Call* call = nullptr;
    const Native* native = nullptr;  // tried first (may_wait natives), else the handler
    bool streamed = false;
    std::string method, request, ts, nonce, sig;
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  };
  int handler_threads = 0;
  size_t inline_bytes = SIZE_MAX;        // larger native calls go to the handler threads too
  std::unique_ptr<JobThreads> handlers;  // while serving, with handler_threads > 0

  static std::shared_ptr<Job> job_of(Call& c, const CallSite& site, std::string_view request, const Native* native) {
    auto job = std::make_shared<Job>();  // std::function wants a copyable job
    job->call = &c;
    job->native = native;
    job->streamed = site.streamed;
    job->method = site.method;
    job->request = request;
    job->ts = site.ts;
    job->nonce = site.nonce;
    job->sig = site.sig;
    if (site.time_remaining_s >= 0)
      job->deadline = std::chrono::steady_clock::now() +
                      std::chrono::microseconds(static_cast<int64_t>(site.time_remaining_s * 1e6));
    return job;
  }

  void queue(Call& c, const CallSite& site, std::string_view request, const Native* native) {
    handlers->submit([this, job = job_of(c, site, request, native)] { handle(*job); });
  }

  // A batched native's call: queued with the others of its method; a batch is scheduled unless
  // one already waits to start (it will take this call too) or every handler thread has one.
  void queue_batched(Call& c, const CallSite& site, std::string_view request, const Native& native) {
    BatchQueue& q = *native.queue;
    bool schedule = false;
    {
      std::lock_guard<std::mutex> lk(q.mu);
      q.jobs.push_back(job_of(c, site, request, &native));
      schedule = !q.scheduled && q.in_flight < handler_threads;
      if (schedule) q.scheduled = true, ++q.in_flight;
    }
    if (schedule) handlers->submit([this, n = &native] { run_batch(*n); });
  }

  // On a handler thread: up to kMaxBatchCalls queued calls of `native`'s method answered together
  // (those it leaves, one by one as handle() answers them), then the next batch scheduled if
  // calls are still queued.
  void run_batch(const Native& native) {
    BatchQueue& q = *native.queue;
    std::vector<std::shared_ptr<Job>> jobs;
    {
      std::lock_guard<std::mutex> lk(q.mu);
      q.scheduled = false;
      while (!q.jobs.empty() && jobs.size() < MasterGrpcServer::kMaxBatchCalls) {
        jobs.push_back(std::move(q.jobs.front()));
        q.jobs.pop_front();
      }
      q.batches += jobs.empty() ? 0 : 1;
      q.calls += jobs.size();
    }
    try {
      answer_batch(native, jobs);
    } catch (const std::exception&) {  // never leave in_flight counting a batch that is over
    }
    bool schedule = false;
    {
      std::lock_guard<std::mutex> lk(q.mu);
      --q.in_flight;
      schedule = !q.jobs.empty() && !q.scheduled;
      if (schedule) q.scheduled = true, ++q.in_flight;
    }
    if (schedule) handlers->submit([this, n = &native] { run_batch(*n); });
  }

  void answer_batch(const Native& native, std::vector<std::shared_ptr<Job>>& jobs) {
    {
      std::shared_lock<std::shared_mutex> starting(ops);
      if (draining) {  // the server stopped while these waited: drop them unanswered
        for (auto& job : jobs) drop(*job);
        return;
      }
    }
    // Calls whose deadline passed in the queue are not run (as handle() does not).
    const auto now = std::chrono::steady_clock::now();
    std::vector<std::string_view> requests;
    std::vector<size_t> live;
    for (size_t i = 0; i < jobs.size(); ++i)
      if (now < jobs[i]->deadline) {
        requests.push_back(jobs[i]->request);
        live.push_back(i);
      }
    std::vector<std::string> replies(requests.size());
    std::vector<char> answered(requests.size(), 0);
    if (!requests.empty()) {
      try {
        native.batch(requests, replies, answered);
      } catch (const std::exception&) {  // left to the one-by-one path, which reports it
        std::fill(answered.begin(), answered.end(), 0);
      }
    }
    std::vector<char> done(jobs.size(), 0);
    for (size_t j = 0; j < live.size(); ++j)
      if (answered[j]) {
        GrpcReply reply;
        reply.body = std::move(replies[j]);
        reply_to(*jobs[live[j]], reply);
        done[live[j]] = 1;
      }
    for (size_t i = 0; i < jobs.size(); ++i)
      if (!done[i]) handle(*jobs[i]);  // expired ones answered DEADLINE_EXCEEDED there
  }

  // A queued call, on a handler thread: its native method (one that may wait) or the handler,
  // then its reply, unless the server is gone meanwhile. A call whose deadline passed while it
  // waited in the queue is not run: its client has given up, and under a load the handlers
  // cannot keep up with, running it anyway would only make every later call late too.
  void handle(Job& job) {
    Call& c = *job.call;
    {
      std::shared_lock<std::shared_mutex> starting(ops);
      if (draining) {  // the server stopped while this waited: drop it unanswered
        drop(job);
        return;
      }
    }
    const bool has_deadline = job.deadline != std::chrono::steady_clock::time_point::max();
    const auto now = std::chrono::steady_clock::now();
    const double remaining = has_deadline ? std::chrono::duration<double>(job.deadline - now).count() : -1;
    GrpcReply reply;
    try {
      if (has_deadline && now >= job.deadline) {
        reply.code = static_cast<int>(grpc::StatusCode::DEADLINE_EXCEEDED);
        reply.details = "Deadline Exceeded";
      } else if (job.native == nullptr || !job.native->fn(job.request, reply.body, remaining)) {
        reply.body.clear();
        CallSite site{job.method, job.ts, job.nonce, job.sig, remaining, job.streamed};
        handler(call_of(c, site, std::move(job.request)), reply);
      }
    } catch (const std::exception& e) {  // a handler bug must not take the server down
      reply = GrpcReply{};
      reply.code = static_cast<int>(grpc::StatusCode::UNKNOWN);
      reply.details = std::string("umbp master: handler failed: ") + e.what();
    }
    reply_to(job, reply);
  }

  // A queued call's reply goes out, unless the server is gone meanwhile.
  void reply_to(Job& job, GrpcReply& reply) {
    std::shared_lock<std::shared_mutex> starting(ops);
    if (draining) {  // the server and its calls are gone: nothing more to start
      drop(job);
      return;
    }
    if (job.streamed)
      write_streamed(*job.call, reply);
    else
      finish_unary(*job.call, reply);
  }

  // A queued call the stopped server no longer answers (its completion queue is shut down).
  void drop(Job& job) {
    if (job.streamed) close_stream(job.call);
    delete job.call;
  }

  // Call streams: the live ones are known, so stop() can end those waiting for a message (a
  // client keeps its streams open between calls; the server's shutdown would otherwise wait its
  // whole grace time for them).
  std::mutex streams_mu;
  std::unordered_set<Call*> streams;
  bool streams_stopping = false;
#if MORI_UMBP_HAVE_PROTOBUF
  static constexpr bool streams_served = true;
#else
  static constexpr bool streams_served = false;  // no messages to parse them with
#endif

  void open_stream(Call* c) {
    std::lock_guard<std::mutex> lk(streams_mu);
    streams.insert(c);
  }
  void close_stream(Call* c) {
    std::lock_guard<std::mutex> lk(streams_mu);
    streams.erase(c);
  }
  // A stream's Read completed: false (and the stream forgotten) when it brought no message.
  bool read_done(Call* c, bool ok) {
    std::lock_guard<std::mutex> lk(streams_mu);
    c->waiting = false;
    if (!ok) streams.erase(c);
    return ok;
  }
  // After a reply went out: wait for the stream's next call, or end it when the server stops.
  void read_next(Call* c) {
    std::lock_guard<std::mutex> lk(streams_mu);
    if (streams_stopping) {
      streams.erase(c);
      c->stage = Call::kFinished;
      c->stream.Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, kCallStreamStopping), c);
      return;
    }
    c->stage = Call::kStreamRead;
    c->waiting = true;
    c->stream.Read(&c->request, c);
  }
  // Ends every stream waiting for a message; those answering one end after their reply.
  void stop_streams() {
    std::lock_guard<std::mutex> lk(streams_mu);
    streams_stopping = true;
    for (Call* c : streams)
      if (c->waiting) c->ctx.TryCancel();
  }

  // One message of a call stream, in c.request: answered as its method's unary call would be.
  void answer_streamed(Call& c) {
#if MORI_UMBP_HAVE_PROTOBUF
    std::vector<grpc::Slice> slices;
    std::string joined;
    const std::string_view bytes = request_bytes(c.request, slices, joined);
    ::umbp::StreamedCall call;
    GrpcReply reply;
    if (!call.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      reply.code = static_cast<int>(grpc::StatusCode::INTERNAL);
      reply.details = "umbp: a streamed call that does not parse";
    } else if (call.method() == kCallStreamMethod) {
      reply.code = static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT);
      reply.details = "umbp: a call stream cannot carry a call stream";
    } else {
      CallSite site{call.method(), call.ts(), call.nonce(), call.sig(), call.timeout_s() > 0 ? call.timeout_s() : -1,
                    true};
      if (!run(c, site, call.request(), reply)) return;  // the handler threads answer it
    }
    write_streamed(c, reply);
#else
    (void)c;
#endif
  }

  void write_streamed(Call& c, GrpcReply& reply) {
#if MORI_UMBP_HAVE_PROTOBUF
    ::umbp::StreamedReply out;
    out.set_code(reply.code);
    if (reply.code != 0)
      out.set_details(std::move(reply.details));
    else
      out.set_body(std::move(reply.body));
    std::string wire;
    out.SerializeToString(&wire);
    grpc::Slice slice = owned_slice(std::move(wire));
    c.reply = grpc::ByteBuffer(&slice, 1);
    c.request.Clear();
    c.stage = Call::kStreamWritten;
    c.stream.Write(c.reply, &c);
#else
    (void)c, (void)reply;
#endif
  }
};

MasterGrpcServer::MasterGrpcServer(std::string listen_address, GrpcHandler handler, int workers, bool reuse_port,
                                   int max_message_bytes, bool handlers_wait)
    : impl_(std::make_unique<Impl>()) {
  MORI_CHECK_ARG(workers >= 1, "workers must be >= 1, got %d", workers);
  MORI_CHECK_ARG(max_message_bytes > 0, "max_message_bytes must be > 0, got %d", max_message_bytes);
  impl_->listen_address = std::move(listen_address);
  impl_->handler = std::move(handler);
  impl_->n_workers = workers;
  impl_->handlers_wait = handlers_wait;
  impl_->reuse_port = reuse_port;
  impl_->max_message_bytes = max_message_bytes;
}

MasterGrpcServer::~MasterGrpcServer() { stop(0); }

void MasterGrpcServer::set_native(std::string method, GrpcNativeMethod native, bool may_wait) {
  MORI_CHECK_ARG(!impl_->server, "set_native() must come before start()");
  impl_->natives.push_back({std::move(method), std::move(native), may_wait});
}

void MasterGrpcServer::set_native_batch(const std::string& method, GrpcNativeBatchMethod batch) {
  MORI_CHECK_ARG(!impl_->server, "set_native_batch() must come before start()");
  for (auto& n : impl_->natives)
    if (n.method == method) {
      MORI_CHECK_ARG(n.may_wait, "set_native_batch(%s): only a native that may wait is batched", method.c_str());
      n.batch = std::move(batch);
      n.queue = std::make_unique<Impl::BatchQueue>();
      return;
    }
  MORI_CHECK_ARG(false, "set_native_batch(%s): set_native() it first", method.c_str());
}

std::pair<uint64_t, uint64_t> MasterGrpcServer::batch_counts(const std::string& method) const {
  for (const auto& n : impl_->natives)
    if (n.method == method && n.queue) {
      std::lock_guard<std::mutex> lk(n.queue->mu);
      return {n.queue->batches, n.queue->calls};
    }
  return {0, 0};
}

void MasterGrpcServer::set_handler_threads(int threads) {
  MORI_CHECK_ARG(!impl_->server, "set_handler_threads() must come before start()");
  MORI_CHECK_ARG(threads >= 0, "handler threads must be >= 0, got %d", threads);
  impl_->handler_threads = threads;
}

void MasterGrpcServer::set_inline_bytes(size_t bytes) {
  MORI_CHECK_ARG(!impl_->server, "set_inline_bytes() must come before start()");
  impl_->inline_bytes = bytes;
}

void MasterGrpcServer::verify_calls(CallVerifier* verifier, std::vector<std::string> methods,
                                    GrpcRefusedHook on_refused) {
  MORI_CHECK_ARG(!impl_->server, "verify_calls() must come before start()");
  MORI_CHECK_ARG(verifier != nullptr, "verifier must not be null");
  impl_->verifier = verifier;
  impl_->verified_methods = std::unordered_set<std::string>(methods.begin(), methods.end());
  impl_->on_refused = std::move(on_refused);
}

int MasterGrpcServer::workers() const { return static_cast<int>(impl_->workers.size()); }

int MasterGrpcServer::streams_open() const {
  std::lock_guard<std::mutex> lk(impl_->streams_mu);
  return static_cast<int>(impl_->streams.size());
}

int MasterGrpcServer::start() {
  Impl& s = *impl_;
  MORI_CHECK_ARG(!s.server, "the master's gRPC server on %s is already started", s.listen_address.c_str());
  // gRPC core's mutexes are absl's, which in Debian's build check every lock for a deadlock
  // cycle (a graph walk, a few % of a call's CPU in perf); they are not ours to debug here.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(s.listen_address, grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(s.max_message_bytes);
  builder.SetMaxSendMessageSize(s.max_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, s.reuse_port ? 1 : 0);
  builder.RegisterAsyncGenericService(&s.service);
  s.cq = builder.AddCompletionQueue();
  s.server = builder.BuildAndStart();
  if (!s.server || port == 0) {
    s.server.reset();
    s.cq->Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (s.cq->Next(&tag, &ok)) {
    }
    s.cq.reset();
    raise(Status::kUnavailable, "umbp gRPC server: cannot listen on %s", s.listen_address.c_str());
  }
  {  // a server started again after stop()
    std::lock_guard<std::mutex> lk(s.streams_mu);
    s.streams_stopping = false;
  }
  s.draining = false;
  // A slot per worker for calls arriving at once; each taken slot is replaced at once.
  const int n = s.handlers_wait ? std::max(s.n_workers, 2) : grpc_worker_threads(s.n_workers);
  for (int i = 0; i < n; ++i) s.request_call();
  if (s.handler_threads > 0) s.handlers = std::make_unique<JobThreads>(s.handler_threads, "umbp-handler");
  for (int i = 0; i < n; ++i) s.workers.emplace_back([&s] { s.work(); });
  return port;
}

void MasterGrpcServer::stop(double grace_s) {
  Impl& s = *impl_;
  if (!s.server) return;
  // Calls being handled get their answer out within the grace time (then they are cancelled);
  // the queue is shut down after the server, and the workers drain it and leave.
  s.stop_streams();
  s.server->Shutdown(std::chrono::system_clock::now() +
                     std::chrono::microseconds(static_cast<int64_t>(std::max(grace_s, 0.0) * 1e6)));
  {
    std::unique_lock<std::shared_mutex> no_ops(s.ops);  // waits for a handler still running
    s.draining = true;
    s.cq->Shutdown();
  }
  for (auto& t : s.workers) t.join();
  s.workers.clear();
  s.handlers.reset();  // the jobs left find the server draining and drop their calls
  s.server->Wait();
  s.server.reset();
  s.cq.reset();
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

}  // namespace mori::umbp
