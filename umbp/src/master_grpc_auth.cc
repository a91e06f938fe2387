// SPDX-License-Identifier: MIT
// Signed UMBP control-plane calls (master_grpc_auth.h).
#include "src/master_grpc_auth.h"

#include <openssl/sha.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <string>

#include "mori/core/auth.h"

namespace mori::umbp {

namespace {

void append_hex(std::string& out, const uint8_t* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[p[i] >> 4]);
    out.push_back(kDigits[p[i] & 15]);
  }
}

// The timestamp in milliseconds: decimal digits, an optional sign (what the signers send).
std::optional<int64_t> parse_ms(std::string_view ts) {
  const char* first = ts.data();
  const char* last = first + ts.size();
  if (first != last && *first == '+') ++first;
  int64_t v = 0;
  auto [end, ec] = std::from_chars(first, last, v);
  if (ec != std::errc() || end != last || first == last) return std::nullopt;
  return v;
}

}  // namespace

double wall_clock_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

CallVerifier::CallVerifier(std::string secret, double window_s, std::string name)
    : secret_(std::move(secret)), window_s_(window_s), name_(std::move(name)) {}

std::optional<Refusal> CallVerifier::header_refusal(std::string_view ts, std::string_view nonce, std::string_view sig,
                                                    double now) const {
  if (ts.empty() || nonce.empty() || sig.empty()) return refusal("unsigned call (this master requires the job secret)");
  auto ms = parse_ms(ts);
  if (!ms) return refusal("malformed timestamp");
  if (std::fabs(now - static_cast<double>(*ms) / 1000.0) > window_s_)
    return refusal("signature outside the replay window");
  return std::nullopt;
}

std::string call_signature(std::string_view secret, std::string_view method, std::string_view ts,
                           std::string_view nonce, std::string_view body) {
  uint8_t digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(body.data()), body.size(), digest);
  std::string msg;
  msg.reserve(method.size() + ts.size() + nonce.size() + 3 + 2 * sizeof(digest));
  msg.append(method).push_back('\n');
  msg.append(ts).push_back('\n');
  msg.append(nonce).push_back('\n');
  append_hex(msg, digest, sizeof(digest));
  const auth::Mac mac = auth::hmac_sha256(secret.data(), secret.size(), msg.data(), msg.size());
  std::string out;
  out.reserve(2 * mac.size());
  append_hex(out, mac.data(), mac.size());
  return out;
}

CallSignature sign_call(std::string_view secret, std::string_view method, std::string_view body, double now) {
  CallSignature s;
  s.ts = std::to_string(static_cast<int64_t>(now * 1000.0));
  uint8_t nonce[16];
  auth::random_bytes(nonce, sizeof(nonce));
  append_hex(s.nonce, nonce, sizeof(nonce));
  s.sig = call_signature(secret, method, s.ts, s.nonce, body);
  return s;
}

bool CallVerifier::signature_ok(std::string_view method, std::string_view ts, std::string_view nonce,
                                std::string_view sig, std::string_view body) const {
  const std::string expected = call_signature(secret_, method, ts, nonce, body);
  // Constant time over the expected length; a signature of another length is wrong anyway.
  return sig.size() == expected.size() && auth::equal(sig.data(), expected.data(), expected.size());
}

bool CallVerifier::fresh_nonce(std::string_view nonce, double now) {
  std::lock_guard<std::mutex> lk(mu_);
  if (now >= next_prune_) {
    std::erase_if(nonces_, [now](const auto& kv) { return kv.second <= now; });
    next_prune_ = now + window_s_;
  }
  // A nonce is kept for two windows: a call whose timestamp is inside the window cannot be
  // replayed after its nonce is forgotten.
  return nonces_.emplace(std::string(nonce), now + 2 * window_s_).second;
}

std::optional<Refusal> CallVerifier::check(std::string_view method, std::string_view ts, std::string_view nonce,
                                           std::string_view sig, std::string_view body, double now) {
  if (auto why = header_refusal(ts, nonce, sig, now)) return why;
  if (!signature_ok(method, ts, nonce, sig, body)) return refusal("bad signature");
  if (!fresh_nonce(nonce, now)) return Refusal{"replayed nonce", name_ + ": replayed call"};
  return std::nullopt;
}

}  // namespace mori::umbp
