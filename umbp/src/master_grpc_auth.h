// SPDX-License-Identifier: MIT
// The check of a signed UMBP control-plane call (umbp/distributed/master_auth.py states the
// rules): metadata x-umbp-ts (milliseconds since the epoch), x-umbp-nonce and x-umbp-sig =
// hex HMAC-SHA256(secret, method \n ts \n nonce \n hex SHA-256 of the request bytes), with
// core/auth's HMAC. A call is refused when it is unsigned, its timestamp is malformed or outside
// the replay window, its signature is not the secret's for this method and body, or its nonce was
// seen before. The one implementation of those rules: the grpc++ server checks every call with
// it before any handler (native or Python), and grpcio's VerifyingInterceptor calls it too, so
// both servers refuse alike and share no second nonce cache. No grpc here: it is in libmori.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace mori::umbp {

struct Refusal {
  std::string reason;   // what the refusal counter hook is told: "unsigned call (...)", "replayed nonce", ...
  std::string details;  // the UNAUTHENTICATED details: "<name>: <reason>" ("<name>: replayed call")
};

class CallVerifier {
 public:
  // secret: the job secret's bytes; window_s: UMBP_AUTH_WINDOW_MS in seconds; name: who refuses
  // ("umbp master", a peer's name) in the details.
  CallVerifier(std::string secret, double window_s, std::string name);
  CallVerifier(const CallVerifier&) = delete;
  CallVerifier& operator=(const CallVerifier&) = delete;

  // Refusal of the signing metadata alone (before the body is read), or nothing. Empty strings
  // stand for absent metadata. now: seconds since the epoch.
  std::optional<Refusal> header_refusal(std::string_view ts, std::string_view nonce, std::string_view sig,
                                        double now) const;
  // Whether sig is the secret's signature of (method, ts, nonce, body).
  bool signature_ok(std::string_view method, std::string_view ts, std::string_view nonce, std::string_view sig,
                    std::string_view body) const;
  // Records the nonce as used; false when it was seen within the window (a replay).
  bool fresh_nonce(std::string_view nonce, double now);
  // The whole check, in the rules' order (header, signature, replay); nothing when it passes.
  std::optional<Refusal> check(std::string_view method, std::string_view ts, std::string_view nonce,
                               std::string_view sig, std::string_view body, double now);

  const std::string& name() const { return name_; }

  static constexpr const char* kTsKey = "x-umbp-ts";
  static constexpr const char* kNonceKey = "x-umbp-nonce";
  static constexpr const char* kSigKey = "x-umbp-sig";

 private:
  Refusal refusal(std::string reason) const { return {reason, name_ + ": " + reason}; }

  std::string secret_;
  double window_s_;
  std::string name_;
  std::mutex mu_;
  std::unordered_map<std::string, double> nonces_;  // nonce -> when it may be forgotten
  double next_prune_ = 0;
};

// Seconds since the epoch (the clock of Python's time.time(), which signers use).
double wall_clock_s();

// The hex signature of one call: HMAC-SHA256(secret, method \n ts \n nonce \n hex SHA-256(body)).
std::string call_signature(std::string_view secret, std::string_view method, std::string_view ts,
                           std::string_view nonce, std::string_view body);

// The signing metadata of one call at `now` (seconds since the epoch), with a fresh random nonce:
// what a native client sends (master_auth.sign is Python's).
struct CallSignature {
  std::string ts, nonce, sig;
};
CallSignature sign_call(std::string_view secret, std::string_view method, std::string_view body, double now);

}  // namespace mori::umbp
