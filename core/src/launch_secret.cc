// SPDX-License-Identifier: MIT
#include "mori/core/launch_secret.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/sha.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "mori/core/status.h"

namespace mori {
namespace {

bool is_loopback_address(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) return (ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr) >> 24) == 127;
  if (sa->sa_family == AF_INET6) {
    const auto* a6 = &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a6) || (IN6_IS_ADDR_V4MAPPED(a6) && a6->s6_addr[12] == 127);
  }
  return false;
}

// An address is this host's when a socket can be bound to it.
bool is_own_address(const addrinfo* ai) {
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_storage addr{};
  memcpy(&addr, ai->ai_addr, ai->ai_addrlen);
  if (addr.ss_family == AF_INET)
    reinterpret_cast<sockaddr_in*>(&addr)->sin_port = 0;
  else
    reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port = 0;
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), ai->ai_addrlen) == 0;
  close(fd);
  return ok;
}

// Lower-case hex SHA-256, as Python's hashlib.sha256(...).hexdigest() writes it.
std::string sha256_hex(const std::string& data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : digest) out += {kHex[b >> 4], kHex[b & 15]};
  return out;
}

}  // namespace

HostScope host_scope(const std::string& host) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return HostScope::kRemote;
  bool all_loopback = true, all_own = true;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    if (is_loopback_address(ai->ai_addr)) continue;
    all_loopback = false;
    if (!is_own_address(ai)) all_own = false;
  }
  freeaddrinfo(res);
  if (all_loopback) return HostScope::kLoopback;
  return all_own ? HostScope::kLocal : HostScope::kRemote;
}

EnvLaunchSecret env_launch_secret(const std::string& job_secret_hex, const std::string& master_addr, int store_port,
                                  const std::string& run_id, int world_size, int local_world_size) {
  if (!job_secret_hex.empty()) return {job_secret_hex, master_addr, false};
  HostScope scope = host_scope(master_addr);
  // One host: the store's address is loopback, or it is this host's and every rank is local.
  // The store then listens on loopback, out of other hosts' reach.
  bool one_host = scope == HostScope::kLoopback ||
                  (scope == HostScope::kLocal && local_world_size > 0 && local_world_size >= world_size);
  if (!one_host) {
    std::string why =
        scope == HostScope::kRemote ? "MASTER_ADDR=" + master_addr + " is another host"
        : local_world_size > 0
            ? "LOCAL_WORLD_SIZE=" + std::to_string(local_world_size) + " < WORLD_SIZE=" + std::to_string(world_size)
            : "MASTER_ADDR=" + master_addr + " is reachable from other hosts and LOCAL_WORLD_SIZE is not set";
    raise(Status::kInvalidArgument,
          "MORI_JOB_SECRET is not set and this job may span hosts (%s): a secret derived from the address "
          "would let anyone who knows it join. Set the same random MORI_JOB_SECRET on every rank, e.g. "
          "export MORI_JOB_SECRET=$(python3 -c 'import secrets; print(secrets.token_hex(32))') where the "
          "job is launched (or start it with `mori run --nnodes`, which draws one); a one-host job may "
          "use MASTER_ADDR=127.0.0.1 instead",
          why.c_str());
  }
  std::string store_host = scope == HostScope::kLoopback ? master_addr : "127.0.0.1";
  return {sha256_hex("mori:" + store_host + ":" + std::to_string(store_port) + ":" + run_id), store_host, true};
}

}  // namespace mori
