// SPDX-License-Identifier: MIT
// A TCP key-value store used for bootstrap rendezvous. One server per job
// (hosted by `mori run`, or by rank 0 when the job starts from a unique id),
// one client per rank. Clients must prove they hold the job secret (auth.h, label
// "mori-store-v1"; the secret never crosses the wire); strangers are bounded in number
// and lifetime (acceptor.h). Every blocking get has a deadline and reports which
// rank's key is missing.
#pragma once

#include <atomic>
#include <array>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mori/core/acceptor.h"
#include "mori/core/bootstrap.h"
#include "mori/core/rate_limited_log.h"
#include "mori/core/status.h"
#include "mori/core/unique_fd.h"

namespace mori {

using JobSecret = std::array<uint8_t, 32>;
// Largest value one key may hold (a set above it is refused before anything is sent).
constexpr uint64_t kStoreMaxValueBytes = 256ull << 20;
JobSecret random_secret();
std::string secret_to_hex(const JobSecret& s);
JobSecret secret_from_hex(const std::string& hex);

// A get that the store could not answer because it was stopping: the process hosting it ended
// or shut it down. Distinct from a timeout, which says a rank is slow.
class StoreStopped : public Error {
 public:
  explicit StoreStopped(const std::string& what) : Error(Status::kRemote, what) {}
};

class StoreServer {
 public:
  // Binds host:port (port 0 picks a free one) and serves in background threads. Bind
  // loopback unless ranks on other hosts must reach it.
  StoreServer(const JobSecret& secret, const std::string& bind_host = "0.0.0.0", int port = 0);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const { return port_; }
  // Waits until `n` ranks have said goodbye (or timeout_s passes); then stopping is safe.
  bool wait_goodbyes(int n, double timeout_s);
  // The launcher saw `rank`'s process end with exit status `code`: a wait for a key of that
  // rank that is not there ends at once, naming it (a rank that exits before it ever joins
  // would otherwise leave the others waiting the whole bootstrap timeout).
  void rank_exited(int rank, int code);
  void stop();

 private:
  void serve(net::Connection& conn);

  JobSecret secret_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  log::RateLimit refusals_log_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> kv_;
  std::map<int, bool> rank_gone_;  // rank -> disconnected without saying goodbye
  std::map<int, int> exited_;      // rank -> exit status its launcher saw
  int goodbyes_ = 0;
  std::unique_ptr<net::Acceptor> acceptor_;  // last: its threads use everything above
};

class StoreClient {
 public:
  // Connects and authenticates as `rank`, retrying broken attempts until timeout_s. Throws
  // kRemote when the store refuses the secret, kTimeout when it never answers. `host_rank`:
  // the rank whose process hosts the store (-1: a launcher does), named when the store is gone.
  StoreClient(const std::string& host, int port, const JobSecret& secret, int rank, double timeout_s,
              int host_rank = -1);
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  void set(const std::string& key, const std::string& value);
  // Waits until every key exists. owner_ranks[i] is the rank expected to set keys[i]
  // (named in the timeout error). Returns the values in order.
  std::vector<std::string> get(const std::vector<std::string>& keys, const std::vector<int>& owner_ranks,
                               double timeout_s);
  void goodbye();  // tells the server this rank leaves on purpose

  const std::string& address() const { return address_; }
  const JobSecret& secret() const { return secret_; }

 private:
  // Runs one request/reply on the connection; a broken connection to a rank-hosted store is
  // an error naming the host rank.
  void talk(const std::function<void()>& exchange);

  std::mutex mu_;
  UniqueFd fd_;
  int rank_;
  int host_rank_ = -1;
  std::string address_;
  JobSecret secret_;
};

// Bootstrap over a store: allgather = set own key, get everyone's.
class StoreBootstrap : public Bootstrap {
 public:
  StoreBootstrap(std::unique_ptr<StoreClient> client, int rank, int size, double timeout_s,
                 std::shared_ptr<StoreServer> server = nullptr, std::string ns = "");
  ~StoreBootstrap() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allgather(const void* send, void* recv, size_t bytes) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  std::string describe() const override;
  void shutdown() override;
  std::string job_secret() override;

 private:
  std::unique_ptr<StoreClient> client_;
  std::shared_ptr<StoreServer> server_;  // held by the rank that hosts it
  int rank_, size_;
  double timeout_s_;
  std::string ns_;
  uint64_t seq_ = 0;
};

// Address to publish for this host: MORI_SOCKET_IFNAME's IPv4, else the first
// non-loopback IPv4, else 127.0.0.1.
std::string local_ip_address();

}  // namespace mori
