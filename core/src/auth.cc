// SPDX-License-Identifier: MIT
#include "mori/core/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "mori/core/socket.h"
#include "mori/core/status.h"

namespace mori::auth {
namespace {

constexpr char kMagic[8] = {'M', 'O', 'R', 'I', 'A', 'U', 'T', 'H'};
constexpr uint8_t kAccepted = 1, kRefused = 0;

Mac proof(const void* secret, size_t secret_len, std::string_view label, char role, const uint8_t* client_nonce,
          const uint8_t* server_nonce) {
  std::string msg;
  msg.reserve(label.size() + 2 + 2 * kNonceBytes);
  msg.append(label).push_back('\0');
  msg.push_back(role);
  msg.append(reinterpret_cast<const char*>(client_nonce), kNonceBytes);
  msg.append(reinterpret_cast<const char*>(server_nonce), kNonceBytes);
  return hmac_sha256(secret, secret_len, msg.data(), msg.size());
}

void recv_exact(int fd, void* buf, size_t n, double deadline, const char* what) {
  if (!net::recv_all(fd, buf, n, deadline)) raise(Status::kRemote, "peer closed the connection during %s", what);
}

}  // namespace

void random_bytes(void* out, size_t n) {
  auto* p = static_cast<uint8_t*>(out);
  while (n > 0) {
    ssize_t got = getrandom(p, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      raise_errno("getrandom");
    }
    p += got;
    n -= static_cast<size_t>(got);
  }
}

Mac hmac_sha256(const void* key, size_t key_len, const void* data, size_t len) {
  Mac mac{};
  unsigned int out_len = 0;
  if (!HMAC(EVP_sha256(), key, static_cast<int>(key_len), static_cast<const unsigned char*>(data), len, mac.data(),
            &out_len) ||
      out_len != kMacBytes)
    raise(Status::kInternal, "HMAC-SHA256 failed");
  return mac;
}

bool equal(const void* a, const void* b, size_t n) { return CRYPTO_memcmp(a, b, n) == 0; }

void client_handshake(int fd, const void* secret, size_t secret_len, std::string_view label, double deadline) {
  uint8_t hello[sizeof(kMagic) + kNonceBytes];
  std::memcpy(hello, kMagic, sizeof(kMagic));
  uint8_t* client_nonce = hello + sizeof(kMagic);
  random_bytes(client_nonce, kNonceBytes);
  net::send_all(fd, hello, sizeof(hello));

  uint8_t reply[kNonceBytes + kMacBytes];
  recv_exact(fd, reply, sizeof(reply), deadline, "authentication");
  const uint8_t* server_nonce = reply;
  Mac expect = proof(secret, secret_len, label, 'S', client_nonce, server_nonce);
  if (!equal(expect.data(), reply + kNonceBytes, kMacBytes))
    throw Refused(
        format("the peer could not prove it holds the secret (%.*s): wrong secret, or not the service "
               "we expected",
               static_cast<int>(label.size()), label.data()));
  Mac mine = proof(secret, secret_len, label, 'C', client_nonce, server_nonce);
  net::send_all(fd, mine.data(), mine.size());
  uint8_t verdict = kRefused;
  recv_exact(fd, &verdict, 1, deadline, "authentication");
  if (verdict != kAccepted)
    throw Refused(format("the peer refused our proof of the secret (%.*s): wrong secret",
                         static_cast<int>(label.size()), label.data()));
}

bool server_handshake(int fd, const void* secret, size_t secret_len, std::string_view label, double deadline) {
  uint8_t hello[sizeof(kMagic) + kNonceBytes];
  if (!net::recv_all(fd, hello, sizeof(hello), deadline)) return false;
  if (std::memcmp(hello, kMagic, sizeof(kMagic)) != 0) return false;
  const uint8_t* client_nonce = hello + sizeof(kMagic);

  uint8_t reply[kNonceBytes + kMacBytes];
  uint8_t* server_nonce = reply;
  random_bytes(server_nonce, kNonceBytes);
  Mac mine = proof(secret, secret_len, label, 'S', client_nonce, server_nonce);
  std::memcpy(reply + kNonceBytes, mine.data(), kMacBytes);
  net::send_all(fd, reply, sizeof(reply));

  uint8_t theirs[kMacBytes];
  if (!net::recv_all(fd, theirs, sizeof(theirs), deadline)) return false;
  Mac expect = proof(secret, secret_len, label, 'C', client_nonce, server_nonce);
  uint8_t verdict = equal(expect.data(), theirs, kMacBytes) ? kAccepted : kRefused;
  net::send_all(fd, &verdict, 1);
  return verdict == kAccepted;
}

}  // namespace mori::auth
