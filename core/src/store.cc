// SPDX-License-Identifier: MIT
#include "mori/core/store.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <string_view>
#include <thread>

#include "mori/core/auth.h"
#include "mori/core/dial.h"
#include "mori/core/env.h"
#include "mori/core/log.h"
#include "mori/core/rate_limited_log.h"
#include "mori/core/socket.h"
#include "mori/core/status.h"

namespace mori {
namespace {

// The authentication label: a proof made for the store is worth nothing to any other service.
constexpr std::string_view kAuthLabel = "mori-store-v1";
// A connection has this long to authenticate and name its rank.
constexpr double kHandshakeSeconds = 10;
// Strangers waiting to authenticate at once; more evict the oldest (see net::Acceptor).
constexpr size_t kMaxPending = 64;
constexpr uint64_t kMaxKeyBytes = 4096;
constexpr uint32_t kMaxKeysPerGet = 1u << 20;
// Values are received in pieces of this size, so memory follows the bytes that arrive,
// not the length a peer announces.
constexpr size_t kReceiveChunk = 1 << 20;

enum Op : uint8_t { kSet = 1, kGet = 2, kBye = 3 };
enum Reply : uint8_t { kOk = 0, kTimedOut = 1, kOwnerGone = 2, kStopped = 3, kOwnerExited = 4 };

template <typename T>
void put_raw(std::string& buf, const T& v) {
  buf.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void put_str(std::string& buf, const std::string& s) {
  put_raw<uint64_t>(buf, s.size());
  buf += s;
}
template <typename T>
T read_raw(int fd, double deadline = -1) {
  T v;
  if (!net::recv_all(fd, &v, sizeof(T), deadline)) raise(Status::kRemote, "bootstrap store connection closed");
  return v;
}
std::string read_str(int fd, uint64_t max_len, const char* what) {
  uint64_t n = read_raw<uint64_t>(fd);
  if (n > max_len)
    raise(Status::kRemote, "bootstrap store: a %s of %llu bytes is above the limit of %llu bytes", what,
          static_cast<unsigned long long>(n), static_cast<unsigned long long>(max_len));
  std::string s;
  while (s.size() < n) {
    size_t at = s.size(), k = static_cast<size_t>(std::min<uint64_t>(kReceiveChunk, n - at));
    s.resize(at + k);
    if (!net::recv_all(fd, s.data() + at, k)) raise(Status::kRemote, "bootstrap store connection closed");
  }
  return s;
}

}  // namespace

JobSecret random_secret() {
  JobSecret s;
  size_t got = 0;
  while (got < s.size()) {
    ssize_t k = getrandom(s.data() + got, s.size() - got, 0);
    if (k < 0) raise_errno("getrandom");
    got += static_cast<size_t>(k);
  }
  return s;
}

std::string secret_to_hex(const JobSecret& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (uint8_t b : s) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

JobSecret secret_from_hex(const std::string& hex) {
  JobSecret s{};
  if (hex.size() != 2 * s.size())
    raise(Status::kInvalidArgument, "job secret must be %zu hex digits, got %zu", 2 * s.size(), hex.size());
  auto val = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    raise(Status::kInvalidArgument, "job secret has a non-hex digit '%c'", c);
  };
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(val(hex[2 * i]) * 16 + val(hex[2 * i + 1]));
  return s;
}

// ---------------------------------------------------------------- server

StoreServer::StoreServer(const JobSecret& secret, const std::string& bind_host, int port) : secret_(secret) {
  UniqueFd listen_fd = net::listen_tcp(bind_host, port, &port_);
  net::Acceptor::Options o;
  o.service = "bootstrap store";
  o.subsys = "BOOTSTRAP";
  o.max_pending = kMaxPending;
  o.pending_lifetime_s = kHandshakeSeconds + 1;  // a backstop: serve() gives up at kHandshakeSeconds
  acceptor_ =
      std::make_unique<net::Acceptor>(std::move(listen_fd), std::move(o), [this](net::Connection& c) { serve(c); });
}

StoreServer::~StoreServer() { stop(); }

void StoreServer::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_.exchange(true)) return;
  }
  cv_.notify_all();  // pending gets answer "stopped" and their connections end
  acceptor_->stop();
}

bool StoreServer::wait_goodbyes(int n, double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return goodbyes_ >= n; });
}

void StoreServer::rank_exited(int rank, int code) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    exited_[rank] = code;
  }
  cv_.notify_all();
}

void StoreServer::serve(net::Connection& conn) {
  const int fd = conn.fd();
  double deadline = net::now() + kHandshakeSeconds;
  if (!auth::server_handshake(fd, secret_.data(), secret_.size(), kAuthLabel, deadline)) {
    if (!conn.evicted())
      MORI_LOG_LIMITED(refusals_log_, kWarn, "BOOTSTRAP",
                       "store refused a connection from %s: it did not prove it holds the job secret",
                       conn.peer().c_str());
    return;
  }
  if (!conn.admit()) return;
  int32_t claimed = read_raw<int32_t>(fd, deadline);
  int rank = -1;
  bool said_bye = false;
  try {
    {
      std::lock_guard<std::mutex> lock(mu_);
      rank = claimed;
      rank_gone_[rank] = false;
    }
    uint8_t ok = kOk;
    net::send_all(fd, &ok, 1);
    while (!stopping_.load()) {
      uint8_t op;
      if (!net::recv_all(fd, &op, 1)) break;
      if (op == kSet) {
        std::string key = read_str(fd, kMaxKeyBytes, "key");
        std::string value = read_str(fd, kStoreMaxValueBytes, "value");
        {
          std::lock_guard<std::mutex> lock(mu_);
          kv_[key] = std::move(value);
        }
        cv_.notify_all();
        net::send_all(fd, &ok, 1);
      } else if (op == kGet) {
        uint32_t n = read_raw<uint32_t>(fd);
        if (n > kMaxKeysPerGet) raise(Status::kRemote, "bootstrap store: a get of %u keys from rank %d", n, rank);
        std::vector<std::string> keys;
        std::vector<int32_t> owners;
        for (uint32_t i = 0; i < n; ++i) {
          keys.push_back(read_str(fd, kMaxKeyBytes, "key"));
          owners.push_back(read_raw<int32_t>(fd));
        }
        double timeout = read_raw<double>(fd);
        auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
        std::string reply;
        std::unique_lock<std::mutex> lock(mu_);
        uint32_t missing = 0;
        uint8_t status = kOk;
        while (true) {
          while (missing < n && kv_.count(keys[missing])) ++missing;
          if (missing == n) break;
          if (exited_.count(owners[missing])) {
            status = kOwnerExited;
            break;
          }
          auto it = rank_gone_.find(owners[missing]);
          if (it != rank_gone_.end() && it->second) {
            status = kOwnerGone;
            break;
          }
          if (stopping_.load()) {
            status = kStopped;
            break;
          }
          if (cv_.wait_until(lock, until) == std::cv_status::timeout) {
            while (missing < n && kv_.count(keys[missing])) ++missing;
            if (missing == n) break;
            status = kTimedOut;
            break;
          }
        }
        put_raw<uint8_t>(reply, status);
        if (status == kOk) {
          for (auto& k : keys) put_str(reply, kv_[k]);
        } else {
          put_raw<int32_t>(reply, owners[missing]);
          put_str(reply, keys[missing]);
          if (status == kOwnerExited) {
            put_raw<int32_t>(reply, exited_[owners[missing]]);
            put_raw<uint8_t>(reply, rank_gone_.count(owners[missing]) ? 1 : 0);  // it had joined the store
          }
        }
        lock.unlock();
        net::send_all(fd, reply.data(), reply.size());
      } else if (op == kBye) {
        said_bye = true;
        net::send_all(fd, &ok, 1);
        {
          std::lock_guard<std::mutex> lock(mu_);
          ++goodbyes_;
        }
        cv_.notify_all();
        break;
      } else {
        MORI_LOG(kWarn, "BOOTSTRAP", "store: unknown op %d from rank %d; closing its connection", op, rank);
        break;
      }
    }
  } catch (const std::exception& e) {
    MORI_LOG(kDebug, "BOOTSTRAP", "store connection of rank %d ended: %s", rank, e.what());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (rank >= 0 && !said_bye) rank_gone_[rank] = true;
  }
  cv_.notify_all();
}

// ---------------------------------------------------------------- client

StoreClient::StoreClient(const std::string& host, int port, const JobSecret& secret, int rank, double timeout_s,
                         int host_rank)
    : rank_(rank), host_rank_(host_rank), address_(host + ":" + std::to_string(port)), secret_(secret) {
  net::DialOptions o;
  o.host = host;
  o.port = port;
  o.secret = secret_.data();
  o.secret_len = secret_.size();
  o.label = kAuthLabel;
  o.deadline = net::now() + timeout_s;
  o.greet = [rank](int fd, double deadline) {
    int32_t r = rank;
    net::send_all(fd, &r, sizeof(r));
    uint8_t ok = 1;
    if (!net::recv_all(fd, &ok, 1, deadline) || ok != kOk)
      raise(Status::kRemote, "the store closed the connection after authentication");
  };
  try {
    fd_ = net::dial(o);
  } catch (const auth::Refused& e) {
    raise(Status::kRemote, "bootstrap store at %s refused rank %d: %s (every rank needs the same MORI_JOB_SECRET)",
          address_.c_str(), rank, e.what());
  } catch (const net::DialError& e) {
    if (host_rank_ >= 0 && host_rank_ != rank)
      raise(Status::kRemote,
            "rank %d could not reach the bootstrap store at %s within %.0f s: rank %d hosts it and is not there "
            "(it exited or never started): %s",
            rank, address_.c_str(), timeout_s, host_rank_, e.what());
    raise(Status::kTimeout, "rank %d could not authenticate to the bootstrap store at %s within %.0f s: %s", rank,
          address_.c_str(), timeout_s, e.what());
  }
}

StoreClient::~StoreClient() = default;

void StoreClient::set(const std::string& key, const std::string& value) {
  MORI_CHECK_ARG(key.size() <= kMaxKeyBytes, "bootstrap store key of %zu bytes: keys have at most %llu", key.size(),
                 static_cast<unsigned long long>(kMaxKeyBytes));
  MORI_CHECK_ARG(value.size() <= kStoreMaxValueBytes,
                 "bootstrap store value for '%s' is %zu bytes: the store takes at most %llu per key", key.c_str(),
                 value.size(), static_cast<unsigned long long>(kStoreMaxValueBytes));
  std::lock_guard<std::mutex> lock(mu_);
  std::string msg;
  put_raw<uint8_t>(msg, kSet);
  put_str(msg, key);
  put_str(msg, value);
  uint8_t reply = kOk;
  talk([&] {
    net::send_all(fd_.get(), msg.data(), msg.size());
    reply = read_raw<uint8_t>(fd_.get());
  });
  if (reply != kOk) raise(Status::kRemote, "bootstrap store rejected set of '%s'", key.c_str());
}

std::vector<std::string> StoreClient::get(const std::vector<std::string>& keys, const std::vector<int>& owners,
                                          double timeout_s) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string msg;
  put_raw<uint8_t>(msg, kGet);
  put_raw<uint32_t>(msg, static_cast<uint32_t>(keys.size()));
  for (size_t i = 0; i < keys.size(); ++i) {
    put_str(msg, keys[i]);
    put_raw<int32_t>(msg, i < owners.size() ? owners[i] : -1);
  }
  put_raw<double>(msg, timeout_s);
  uint8_t status = kOk;
  int32_t owner = -1, code = 0;
  std::string key;
  bool joined = false;
  std::vector<std::string> values(keys.size());
  talk([&] {
    net::send_all(fd_.get(), msg.data(), msg.size());
    status = read_raw<uint8_t>(fd_.get(), net::now() + timeout_s + 30);
    if (status == kOk) {
      for (auto& v : values) v = read_str(fd_.get(), kStoreMaxValueBytes, "value");
      return;
    }
    owner = read_raw<int32_t>(fd_.get());
    key = read_str(fd_.get(), kMaxKeyBytes, "key");
    if (status == kOwnerExited) {
      code = read_raw<int32_t>(fd_.get());
      joined = read_raw<uint8_t>(fd_.get()) != 0;
    }
  });
  if (status != kOk) {
    if (status == kOwnerExited) {
      raise(Status::kRemote,
            "rank %d: rank %d exited with status %d %s (its launcher saw it end), before providing '%s'", rank_, owner,
            code, joined ? "after joining the job" : "without ever joining the job", key.c_str());
    }
    if (status == kOwnerGone)
      raise(Status::kRemote, "rank %d: rank %d left the job (its bootstrap connection closed) before providing '%s'",
            rank_, owner, key.c_str());
    if (status == kStopped)
      throw StoreStopped(
          format("rank %d: the bootstrap store at %s stopped while rank %d waited for rank %d "
                 "(bootstrap key '%s')",
                 rank_, address_.c_str(), rank_, owner, key.c_str()));
    raise(Status::kTimeout,
          "rank %d: timed out after %.0f s waiting for rank %d (bootstrap key '%s'); raise MORI_BOOTSTRAP_TIMEOUT "
          "if it is just slow",
          rank_, timeout_s, owner, key.c_str());
  }
  return values;
}

void StoreClient::talk(const std::function<void()>& exchange) {
  try {
    exchange();
  } catch (const Error& e) {
    // The connection broke: where a rank hosts the store, that rank is gone. (Worded as the
    // unique-id bootstrap's own report of it, unique_id.cc, whichever layer sees it first.)
    if (host_rank_ < 0 || host_rank_ == rank_ || e.status() == Status::kInvalidArgument) throw;
    raise(Status::kRemote, "rank %d: lost the bootstrap store at %s, hosted by rank %d: rank %d exited or failed (%s)",
          rank_, address_.c_str(), host_rank_, host_rank_, e.what());
  }
}

void StoreClient::goodbye() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!fd_) return;
  uint8_t op = kBye;
  try {
    net::send_all(fd_.get(), &op, 1);
    read_raw<uint8_t>(fd_.get(), net::now() + 5);
  } catch (const std::exception&) {
  }
  fd_.reset();
}

// ---------------------------------------------------------------- bootstrap

StoreBootstrap::StoreBootstrap(std::unique_ptr<StoreClient> client, int rank, int size, double timeout_s,
                               std::shared_ptr<StoreServer> server, std::string ns)
    : client_(std::move(client)),
      server_(std::move(server)),
      rank_(rank),
      size_(size),
      timeout_s_(timeout_s),
      ns_(std::move(ns)) {}

StoreBootstrap::~StoreBootstrap() = default;

void StoreBootstrap::allgather(const void* send, void* recv, size_t bytes) {
  std::string prefix = ns_ + "ag/" + std::to_string(seq_++) + "/";
  client_->set(prefix + std::to_string(rank_), std::string(static_cast<const char*>(send), bytes));
  std::vector<std::string> keys;
  std::vector<int> owners;
  for (int r = 0; r < size_; ++r) {
    keys.push_back(prefix + std::to_string(r));
    owners.push_back(r);
  }
  auto values = client_->get(keys, owners, timeout_s_);
  for (int r = 0; r < size_; ++r) {
    if (values[r].size() != bytes)
      raise(Status::kInvalidUsage, "allgather size mismatch: rank %d sent %zu bytes, rank %d sent %zu", rank_, bytes, r,
            values[r].size());
    std::memcpy(static_cast<char*>(recv) + r * bytes, values[r].data(), bytes);
  }
}

void StoreBootstrap::broadcast(void* buf, size_t bytes, int root) {
  std::string key = ns_ + "bc/" + std::to_string(seq_++);
  if (rank_ == root) {
    client_->set(key, std::string(static_cast<const char*>(buf), bytes));
  } else {
    auto v = client_->get({key}, {root}, timeout_s_);
    if (v[0].size() != bytes)
      raise(Status::kInvalidUsage, "broadcast size mismatch: root %d sent %zu bytes, rank %d expects %zu", root,
            v[0].size(), rank_, bytes);
    std::memcpy(buf, v[0].data(), bytes);
  }
}

std::string StoreBootstrap::job_secret() {
  const JobSecret& s = client_->secret();
  return std::string(reinterpret_cast<const char*>(s.data()), s.size());
}

std::string StoreBootstrap::describe() const { return "tcp-store " + client_->address(); }

void StoreBootstrap::shutdown() {
  barrier();  // collective: everyone is done with the store
  client_->goodbye();
  if (server_) {
    // Stop only once every rank has its last reply (said goodbye), or the timeout passed.
    server_->wait_goodbyes(size_, timeout_s_);
    server_->stop();
  }
}

// ---------------------------------------------------------------- misc

void Bootstrap::broadcast(void* buf, size_t bytes, int root) {
  std::vector<char> all(bytes * size());
  allgather(buf, all.data(), bytes);
  std::memcpy(buf, all.data() + root * bytes, bytes);
}

std::string Bootstrap::job_secret() {
  if (job_secret_.empty()) {
    JobSecret s{};
    if (rank() == 0) s = random_secret();
    broadcast(s.data(), s.size(), 0);
    job_secret_.assign(reinterpret_cast<const char*>(s.data()), s.size());
  }
  return job_secret_;
}

void Bootstrap::barrier() {
  char c = 0;
  std::vector<char> all(size());
  allgather(&c, all.data(), 1);
}

namespace {
class SingleBootstrap : public Bootstrap {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allgather(const void* send, void* recv, size_t bytes) override { std::memcpy(recv, send, bytes); }
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}
  std::string describe() const override { return "single"; }
};
}  // namespace

std::unique_ptr<Bootstrap> make_single_bootstrap() { return std::make_unique<SingleBootstrap>(); }

std::string local_ip_address() {
  const std::string& want = env::get().socket_ifname;
  ifaddrs* list = nullptr;
  std::string found;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* it = list; it; it = it->ifa_next) {
      if (!it->ifa_addr || it->ifa_addr->sa_family != AF_INET) continue;
      bool loopback = it->ifa_flags & IFF_LOOPBACK;
      if (!want.empty() ? want != it->ifa_name : loopback) continue;
      char buf[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr, buf, sizeof(buf));
      found = buf;
      break;
    }
    freeifaddrs(list);
  }
  if (found.empty() && !want.empty())
    raise(Status::kInvalidArgument, "MORI_SOCKET_IFNAME=%s: no IPv4 address on that interface", want.c_str());
  return found.empty() ? "127.0.0.1" : found;
}

}  // namespace mori
