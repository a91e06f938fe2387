// SPDX-License-Identifier: MIT
#include "mori/core/store.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/random.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "mori/core/env.h"
#include "mori/core/log.h"
#include "mori/core/socket.h"
#include "mori/core/status.h"

namespace mori {
namespace {

constexpr char kHello[8] = {'M', 'O', 'R', 'I', 'S', 'T', 'R', '1'};
enum Op : uint8_t { kSet = 1, kGet = 2, kBye = 3 };
enum Reply : uint8_t { kOk = 0, kTimedOut = 1, kOwnerGone = 2, kRefused = 3 };

bool secrets_equal(const uint8_t* a, const uint8_t* b, size_t n) {
  uint8_t diff = 0;  // constant time: do not leak how many bytes matched
  for (size_t i = 0; i < n; ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

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
std::string read_str(int fd, uint64_t max_len = (1ull << 32)) {
  uint64_t n = read_raw<uint64_t>(fd);
  if (n > max_len) raise(Status::kRemote, "bootstrap store message too long (%llu bytes)", (unsigned long long)n);
  std::string s(n, '\0');
  if (n && !net::recv_all(fd, s.data(), n)) raise(Status::kRemote, "bootstrap store connection closed");
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
  listen_fd_ = net::listen_tcp(bind_host, port, &port_);
  acceptor_ = std::thread([this] { accept_loop(); });
}

StoreServer::~StoreServer() { stop(); }

void StoreServer::stop() {
  if (stopping_.exchange(true)) return;
  ::shutdown(listen_fd_, SHUT_RDWR);
  net::close_fd(listen_fd_);
  if (acceptor_.joinable()) acceptor_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : client_fds_) ::shutdown(fd, SHUT_RDWR);
  }
  cv_.notify_all();
  for (auto& t : workers_)
    if (t.joinable()) t.join();
}

bool StoreServer::wait_goodbyes(int n, double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return goodbyes_ >= n; });
}

void StoreServer::accept_loop() {
  while (!stopping_.load()) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (stopping_.load()) return;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    net::set_nodelay(fd);
    std::lock_guard<std::mutex> lock(mu_);
    client_fds_.push_back(fd);
    workers_.emplace_back([this, fd] { serve(fd); });
  }
}

void StoreServer::serve(int fd) {
  int rank = -1;
  bool said_bye = false;
  try {
    char hello[8];
    uint8_t secret[32];
    // A client gets a few seconds to authenticate; strangers are dropped.
    double deadline = net::now() + 10;
    if (!net::recv_all(fd, hello, sizeof(hello), deadline) || !net::recv_all(fd, secret, sizeof(secret), deadline))
      throw Error(Status::kRemote, "client left before hello");
    rank = read_raw<int32_t>(fd, deadline);
    if (std::memcmp(hello, kHello, sizeof(hello)) != 0 || !secrets_equal(secret, secret_.data(), secret_.size())) {
      uint8_t r = kRefused;
      net::send_all(fd, &r, 1);
      MORI_LOG(kWarn, "BOOTSTRAP", "store refused a client without the job secret (claimed rank %d)", rank);
      rank = -1;
      throw Error(Status::kRemote, "refused");
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      rank_gone_[rank] = false;
    }
    uint8_t ok = kOk;
    net::send_all(fd, &ok, 1);
    while (!stopping_.load()) {
      uint8_t op;
      if (!net::recv_all(fd, &op, 1)) break;
      if (op == kSet) {
        std::string key = read_str(fd, 4096), value = read_str(fd);
        {
          std::lock_guard<std::mutex> lock(mu_);
          kv_[key] = std::move(value);
        }
        cv_.notify_all();
        net::send_all(fd, &ok, 1);
      } else if (op == kGet) {
        uint32_t n = read_raw<uint32_t>(fd);
        std::vector<std::string> keys(n);
        std::vector<int32_t> owners(n);
        for (uint32_t i = 0; i < n; ++i) {
          keys[i] = read_str(fd, 4096);
          owners[i] = read_raw<int32_t>(fd);
        }
        double timeout = read_raw<double>(fd);
        auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
        std::string reply;
        std::unique_lock<std::mutex> lock(mu_);
        uint32_t missing = 0;
        uint8_t status = kOk;
        while (true) {
          while (missing < n && kv_.count(keys[missing])) ++missing;
          if (missing == n) break;
          auto it = rank_gone_.find(owners[missing]);
          if (it != rank_gone_.end() && it->second) {
            status = kOwnerGone;
            break;
          }
          if (stopping_.load() || cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
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
        MORI_LOG(kWarn, "BOOTSTRAP", "store: unknown op %d from rank %d", op, rank);
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
  // The fd is closed by stop(); closing here could race with a reused descriptor number.
  ::shutdown(fd, SHUT_RDWR);
}

// ---------------------------------------------------------------- client

StoreClient::StoreClient(const std::string& host, int port, const JobSecret& secret, int rank, double timeout_s)
    : rank_(rank), address_(host + ":" + std::to_string(port)), secret_(secret) {
  fd_ = net::connect_tcp(host, port, timeout_s);
  std::string hello(kHello, sizeof(kHello));
  hello.append(reinterpret_cast<const char*>(secret.data()), secret.size());
  put_raw<int32_t>(hello, rank);
  net::send_all(fd_, hello.data(), hello.size());
  uint8_t r = 0;
  if (!net::recv_all(fd_, &r, 1, net::now() + timeout_s) || r != kOk) {
    net::close_fd(fd_);
    raise(Status::kRemote, "bootstrap store at %s refused rank %d: wrong job secret", address_.c_str(), rank);
  }
}

StoreClient::~StoreClient() { net::close_fd(fd_); }

void StoreClient::set(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string msg;
  put_raw<uint8_t>(msg, kSet);
  put_str(msg, key);
  put_str(msg, value);
  net::send_all(fd_, msg.data(), msg.size());
  if (read_raw<uint8_t>(fd_) != kOk) raise(Status::kRemote, "bootstrap store rejected set of '%s'", key.c_str());
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
  net::send_all(fd_, msg.data(), msg.size());
  uint8_t status = read_raw<uint8_t>(fd_, net::now() + timeout_s + 30);
  if (status != kOk) {
    int32_t owner = read_raw<int32_t>(fd_);
    std::string key = read_str(fd_);
    if (status == kOwnerGone)
      raise(Status::kRemote, "rank %d: rank %d left the job (its bootstrap connection closed) before providing '%s'",
            rank_, owner, key.c_str());
    raise(Status::kTimeout,
          "rank %d: timed out after %.0f s waiting for rank %d (bootstrap key '%s'); raise MORI_BOOTSTRAP_TIMEOUT "
          "if it is just slow",
          rank_, timeout_s, owner, key.c_str());
  }
  std::vector<std::string> values(keys.size());
  for (auto& v : values) v = read_str(fd_);
  return values;
}

void StoreClient::goodbye() {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) return;
  uint8_t op = kBye;
  try {
    net::send_all(fd_, &op, 1);
    read_raw<uint8_t>(fd_, net::now() + 5);
  } catch (const std::exception&) {
  }
  net::close_fd(fd_);
}

// ---------------------------------------------------------------- bootstrap

StoreBootstrap::StoreBootstrap(std::unique_ptr<StoreClient> client, int rank, int size, double timeout_s,
                               std::shared_ptr<StoreServer> server, std::string ns)
    : client_(std::move(client)), server_(std::move(server)), rank_(rank), size_(size), timeout_s_(timeout_s),
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
      raise(Status::kInvalidUsage, "allgather size mismatch: rank %d sent %zu bytes, rank %d sent %zu", rank_,
            bytes, r, values[r].size());
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
