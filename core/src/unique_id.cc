// SPDX-License-Identifier: MIT
#include "mori/core/unique_id.h"

#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "mori/core/env.h"
#include "mori/core/socket.h"
#include "mori/core/status.h"

namespace mori {
namespace {

constexpr char kMagic[8] = {'M', 'O', 'R', 'I', 'U', 'I', 'D', '1'};
constexpr size_t kHostOffset = 12, kHostBytes = 48, kSecretOffset = 60, kFlagsOffset = 92;
// Flag: the id carries no secret; every rank takes the job secret from MORI_JOB_SECRET. Set
// when the creator has MORI_JOB_SECRET, so the secret stays off whatever channel (torchrun's
// unauthenticated store, a file, a socket) carries the id.
constexpr uint8_t kSecretFromEnv = 1;

bool is_loopback(const std::string& host) { return host == "localhost" || host.rfind("127.", 0) == 0; }

std::mutex g_mu;
std::map<int, std::shared_ptr<StoreServer>> g_servers;  // port -> server started by create_unique_id

}  // namespace

UniqueId create_unique_id() {
  const std::string& env_secret = env::get().job_secret;
  const bool from_env = !env_secret.empty();
  JobSecret secret = from_env ? secret_from_hex(env_secret) : random_secret();
  auto server = std::make_shared<StoreServer>(secret);
  UniqueId id{};
  std::memcpy(id.data(), kMagic, sizeof(kMagic));
  uint16_t version = 1, port = static_cast<uint16_t>(server->port());
  std::memcpy(id.data() + 8, &version, 2);
  std::memcpy(id.data() + 10, &port, 2);
  std::string host = local_ip_address();
  std::strncpy(reinterpret_cast<char*>(id.data() + kHostOffset), host.c_str(), kHostBytes - 1);
  if (from_env)
    id[kFlagsOffset] = kSecretFromEnv;
  else
    std::memcpy(id.data() + kSecretOffset, secret.data(), secret.size());
  std::lock_guard<std::mutex> lock(g_mu);
  g_servers[port] = std::move(server);
  return id;
}

UniqueIdFields parse_unique_id(const uint8_t* data, size_t size) {
  if (size != kUniqueIdBytes)
    raise(Status::kInvalidArgument, "unique_id must be %zu bytes, got %zu", kUniqueIdBytes, size);
  if (std::memcmp(data, kMagic, sizeof(kMagic)) != 0)
    raise(Status::kInvalidArgument, "unique_id is not a MORI unique id (bad magic); get it from shmem_get_unique_id()");
  UniqueIdFields f;
  uint16_t port;
  std::memcpy(&port, data + 10, 2);
  f.port = port;
  f.host = std::string(reinterpret_cast<const char*>(data + kHostOffset),
                       strnlen(reinterpret_cast<const char*>(data + kHostOffset), kHostBytes));
  if (data[kFlagsOffset] & kSecretFromEnv) {
    const std::string& env_secret = env::get().job_secret;
    if (env_secret.empty())
      raise(Status::kInvalidArgument,
            "unique_id: its creator took the job secret from MORI_JOB_SECRET, which is not set here; set the same "
            "MORI_JOB_SECRET on every rank");
    f.secret = secret_from_hex(env_secret);
  } else {
    std::memcpy(f.secret.data(), data + kSecretOffset, f.secret.size());
  }
  return f;
}

namespace {

// A store bootstrap whose store may live inside one of the job's ranks (the one that made the
// unique id, or rank 0 of a MASTER_ADDR job). That rank's death takes the store along and the
// others would read only "connection closed": this names the rank. Which rank hosts the store
// is learnt once, by an allgather at construction; no rank hosts it under `mori run`.
class RankHostedStore : public Bootstrap {
 public:
  RankHostedStore(std::unique_ptr<Bootstrap> inner, bool hosting, std::string host, int port)
      : inner_(std::move(inner)), host_(std::move(host)), port_(port) {
    uint8_t mine = hosting ? 1 : 0;
    std::vector<uint8_t> all(static_cast<size_t>(inner_->size()));
    inner_->allgather(&mine, all.data(), 1);
    for (int r = 0; r < inner_->size() && host_rank_ < 0; ++r)
      if (all[r]) host_rank_ = r;
  }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void allgather(const void* send, void* recv, size_t bytes) override {
    guarded([&] { inner_->allgather(send, recv, bytes); });
  }
  void broadcast(void* buf, size_t bytes, int root) override {
    guarded([&] { inner_->broadcast(buf, bytes, root); });
  }
  void barrier() override {
    guarded([&] { inner_->barrier(); });
  }
  std::string describe() const override {
    return host_rank_ < 0 ? inner_->describe() : inner_->describe() + format(" (hosted by rank %d)", host_rank_);
  }
  void shutdown() override { inner_->shutdown(); }
  std::string job_secret() override { return inner_->job_secret(); }

 private:
  template <typename Op>
  void guarded(Op&& op) {
    try {
      op();
    } catch (const StoreStopped& e) {
      // The store said it is stopping: its listener may still accept for a moment, so do not probe it.
      if (host_rank_ < 0 || host_rank_ == rank()) throw;
      lost(e);
    } catch (const Error& e) {
      if (host_rank_ < 0 || host_rank_ == rank() || store_reachable()) throw;
      lost(e);
    }
  }
  [[noreturn]] void lost(const Error& e) const {
    raise(Status::kRemote,
          "rank %d: lost the bootstrap store at %s:%d, hosted by rank %d: rank %d exited or failed (%s)", rank(),
          host_.c_str(), port_, host_rank_, host_rank_, e.what());
  }
  // A store that still accepts connections is alive: the error was something else.
  bool store_reachable() const {
    try {
      net::connect_tcp(host_, port_, 0.5);  // closed again at once
      return true;
    } catch (const Error&) {
      return false;
    }
  }

  std::unique_ptr<Bootstrap> inner_;
  std::string host_;
  int port_;
  int host_rank_ = -1;
};

}  // namespace

std::unique_ptr<Bootstrap> bootstrap_from_unique_id(const uint8_t* uid, size_t size, int rank, int nranks) {
  UniqueIdFields f = parse_unique_id(uid, size);
  if (nranks < 1) raise(Status::kInvalidArgument, "nranks must be >= 1, got %d", nranks);
  if (rank < 0 || rank >= nranks)
    raise(Status::kInvalidArgument, "rank %d is out of range for nranks %d", rank, nranks);
  std::shared_ptr<StoreServer> server;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_servers.find(f.port);
    if (it != g_servers.end()) {
      server = it->second;  // this process made the id: it hosts the store
      g_servers.erase(it);
    }
  }
  double timeout = env::get().bootstrap_timeout;
  // The host's own rank may talk to its server over loopback.
  std::string host = server ? "127.0.0.1" : f.host;
  auto client = std::make_unique<StoreClient>(host, f.port, f.secret, rank, timeout);
  return std::make_unique<RankHostedStore>(
      std::make_unique<StoreBootstrap>(std::move(client), rank, nranks, timeout, server), server != nullptr, host,
      f.port);
}

std::unique_ptr<Bootstrap> bootstrap_from_store(const std::string& host, int port, const JobSecret& secret, int rank,
                                                int nranks, bool host_locally, int store_rank) {
  if (nranks < 1) raise(Status::kInvalidArgument, "world size must be >= 1, got %d", nranks);
  if (rank < 0 || rank >= nranks)
    raise(Status::kInvalidArgument, "rank %d is out of range for world size %d", rank, nranks);
  std::shared_ptr<StoreServer> server;
  // A store whose address is loopback serves one host only: keep it off the network.
  if (host_locally) server = std::make_shared<StoreServer>(secret, is_loopback(host) ? "127.0.0.1" : "0.0.0.0", port);
  double timeout = env::get().bootstrap_timeout;
  auto client = std::make_unique<StoreClient>(host_locally ? "127.0.0.1" : host, port, secret, rank, timeout,
                                              host_locally ? rank : store_rank);
  return std::make_unique<RankHostedStore>(
      std::make_unique<StoreBootstrap>(std::move(client), rank, nranks, timeout, server), host_locally,
      host_locally ? "127.0.0.1" : host, port);
}

}  // namespace mori
