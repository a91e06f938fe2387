// SPDX-License-Identifier: MIT
// The UMBP master's gRPC server in C++ (grpc++): it serves umbp.UMBPMaster and
// umbp.UMBPMasterAdmin (MORI's wire, umbp/proto/) from inside the master process. Every call is
// taken as raw bytes by one generic service and handed, on the worker thread that polled it in,
// to a native method (BatchRouteGet, RouteGet: master_grpc_routes.h) or else to a handler (the
// binding's: the Python servicers, with the interpreter lock taken once per call); the reply or
// status goes back as it was given. Calls may also come as the messages of a call stream
// (UMBPCallStream), answered the same way: what UMBP's own clients send. With a job secret every call of a known method
// is checked here first (master_grpc_auth.h), so native and Python calls are refused alike. What it replaces is
// grpcio's Python server, whose completion-queue thread and thread pool cost a call ~600 us of CPU
// (docs/umbp-master.md). Built into its own extension module (mori.umbp._master_server), so only a master process loads
// grpc++.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace mori::umbp {

class CallVerifier;

// The method of UMBPCallStream (umbp_admin.proto): calls of the other methods carried as the
// messages of one long-lived stream (grpc_channel.h sends them).
inline constexpr char kCallStreamMethod[] = "/umbp.UMBPCallStream/Calls";
// The status details a stopping server ends an idle call stream with: a client that sees them
// knows the server did not take its next call.
inline constexpr char kCallStreamStopping[] = "umbp: the server is stopping";

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
// false to leave the call to the handler. time_remaining_s: until the client's deadline (< 0: none).
using GrpcNativeMethod = std::function<bool(std::string_view request, std::string& reply, double time_remaining_s)>;

// Several queued calls of one method answered together (RouteGets over Redis: one script call
// per endpoint for all their keys): for each request answered, its reply body in replies[i] and
// answered[i] set; the others go on to the method's GrpcNativeMethod, then the handler, one by one.
using GrpcNativeBatchMethod = std::function<void(const std::vector<std::string_view>& requests,
                                                 std::vector<std::string>& replies, std::vector<char>& answered)>;
// Called with the reason of every refused call (the refusal counter).
using GrpcRefusedHook = std::function<void(const std::string& reason)>;

// The worker threads for `requested`: no more than the host's cores (more pollers of one
// completion queue than cores only add thread wake-ups and switches per call), and at least 2
// where 2 or more were asked for (a handler blocked on Redis or a peer leaves another to poll);
// 1 when 1 was (the master's default: its calls that may wait run on handler threads).
int grpc_worker_threads(int requested);

class MasterGrpcServer {
 public:
  // listen_address: host:port (port 0: any free one); workers: threads polling for calls and
  // running the handler (as many calls are handled at once);
  // reuse_port: share the port with sibling processes (SO_REUSEPORT); max_message_bytes: the
  // largest request or reply; handlers_wait: the handler may wait on other calls (a peer's SSD
  // read waiting for a staging slot that a release call frees), so all `workers` threads run,
  // however few the cores (else grpc_worker_threads(workers)).
  MasterGrpcServer(std::string listen_address, GrpcHandler handler, int workers, bool reuse_port, int max_message_bytes,
                   bool handlers_wait = false);
  ~MasterGrpcServer();
  MasterGrpcServer(const MasterGrpcServer&) = delete;
  MasterGrpcServer& operator=(const MasterGrpcServer&) = delete;

  // Calls of `method` ("/umbp.UMBPMaster/BatchRouteGet") are offered to `native` first (one per
  // method); may_wait: it waits on something outside the process (Redis), so it runs where the
  // handler runs. Before start().
  void set_native(std::string method, GrpcNativeMethod native, bool may_wait = false);
  // With handler threads, the calls of a may_wait native `method` (set_native first) that queue
  // for them are taken up to kMaxBatchCalls at a time and offered to `batch` together, one batch
  // per handler thread at most: a call that finds a thread free starts a batch of its own (as
  // many Redis calls in flight as without batches), and calls that queue while every thread
  // waits on Redis are answered together by the next (one round trip, one hand-off for many).
  // Before start().
  void set_native_batch(const std::string& method, GrpcNativeBatchMethod batch);
  static constexpr size_t kMaxBatchCalls = 64;
  // (batches, calls in them) of `method` since the start: calls / batches is the mean batch.
  std::pair<uint64_t, uint64_t> batch_counts(const std::string& method) const;
  // threads > 0: the handler and the natives that may wait run on that many threads of their
  // own, and the workers answer only the other natives themselves. One worker then answers the
  // in-memory routes with no thread hand-off at all (each idle worker costs every call one),
  // while a call waiting on the interpreter lock or Redis holds up none of them. 0 (the default):
  // everything runs on the worker that took the call in. Before start().
  void set_handler_threads(int threads);
  // With handler threads: a call of a native that does not wait whose request is larger than
  // `bytes` (a batch) goes to them too, so that a worker busy with batches is not the ceiling of
  // the whole server; smaller ones stay on the worker. Unlimited by default. Before start().
  void set_inline_bytes(size_t bytes);
  // Check every call of the `methods` (the services' full method names) with `verifier` before
  // anything answers it: a refused call gets UNAUTHENTICATED with the verifier's details, and
  // on_refused(reason). Calls of other methods go to the handler (which answers UNIMPLEMENTED),
  // as grpcio's interceptor lets them. verifier outlives the server. Before start().
  void verify_calls(CallVerifier* verifier, std::vector<std::string> methods, GrpcRefusedHook on_refused);
  // The worker threads serving (after start()).
  int workers() const;
  // Call streams open now (UMBPCallStream.Calls, umbp_admin.proto: a client's calls carried as
  // the messages of one long-lived stream, answered as the unary calls are).
  int streams_open() const;

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
