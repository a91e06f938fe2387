// SPDX-License-Identifier: MIT
// Mutual challenge-response authentication over a fresh connection. Both ends hold a
// shared secret; neither sends it. Each side picks a random nonce and answers with
// HMAC-SHA256(secret, label | role | client nonce | server nonce), so a recorded exchange
// is useless later (the other side's nonce is new every time) and a proof made for one
// service (`label`, e.g. "mori-store-v1") or one role is refused by every other.
//
// The one implementation for the bootstrap store, the tcp transport and the IO engine.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "mori/core/status.h"

namespace mori::auth {

constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;
using Mac = std::array<uint8_t, kMacBytes>;

// Cryptographically random bytes (getrandom). Throws mori::Error(kSystem) on failure.
void random_bytes(void* out, size_t n);
// HMAC-SHA256 (OpenSSL libcrypto).
Mac hmac_sha256(const void* key, size_t key_len, const void* data, size_t len);
// Constant-time comparison.
bool equal(const void* a, const void* b, size_t n);

// A definite "no" from the other side (it proved another secret, or refused our proof): not
// worth retrying, unlike a connection that merely broke (a plain mori::Error).
class Refused : public Error {
 public:
  explicit Refused(const std::string& what) : Error(Status::kRemote, what) {}
};

// The client side: sends its nonce, checks the server's proof, sends its own, reads the
// verdict. Throws auth::Refused (status kRemote) when the server proves nothing or refuses
// us, mori::Error(kRemote) when the connection closes first, kTimeout when `deadline`
// (net::now() seconds) passes, kSystem on socket errors.
void client_handshake(int fd, const void* secret, size_t secret_len, std::string_view label, double deadline);
// The server side. Returns false (after telling the client) when the client fails to
// prove the secret or speaks something else; throws only on socket errors/timeouts.
bool server_handshake(int fd, const void* secret, size_t secret_len, std::string_view label, double deadline);

}  // namespace mori::auth
