// SPDX-License-Identifier: MIT
#include "mori/io/transfer_status.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace mori::io {

static bool is_settled(StatusCode c) { return c != StatusCode::INIT && c != StatusCode::IN_PROGRESS; }

StatusCode StatusState::code() const { return code_.load(std::memory_order_acquire); }

StatusCode StatusState::poll() const {
  StatusCode c = code();
  if (is_settled(c)) return c;
  if (auto d = driver_.lock()) d->nudge();
  return code();
}

std::string StatusState::message() const {
  std::lock_guard<std::mutex> lock(mu_);
  return message_;
}

void StatusState::update(StatusCode code, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (is_failure(code_)) return;
    code_ = code;
    if (!message.empty() || !is_failure(code)) message_ = message;
  }
  cv_.notify_all();
}

void StatusState::set(StatusCode code, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    code_ = code;
    message_ = message;
  }
  cv_.notify_all();
}

StatusCode StatusState::wait_for(int64_t timeout_ms) const {
  if (timeout_ms != 0 && !settled()) {
    if (auto d = driver_.lock()) {
      auto deadline = timeout_ms < 0 ? std::chrono::steady_clock::time_point::max()
                                     : std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
      if (d->drive(*this, deadline) && (settled() || timeout_ms > 0 && std::chrono::steady_clock::now() >= deadline))
        return code();
      // Driven as far as this connection goes (the rest is on other connections): sleep.
      if (timeout_ms > 0) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        timeout_ms = std::max<int64_t>(1, left.count());
      }
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout_ms < 0) {
    cv_.wait(lock, [&] { return is_settled(code_); });
  } else if (timeout_ms > 0) {
    cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return is_settled(code_); });
  }
  return code_;
}

StatusCode wait_all(const std::vector<std::shared_ptr<StatusState>>& statuses, int64_t timeout_ms) {
  using clock = std::chrono::steady_clock;
  auto deadline = clock::now() + std::chrono::milliseconds(timeout_ms > 0 ? timeout_ms : 0);
  bool pending = false;
  StatusCode first_failure = StatusCode::SUCCESS;
  for (const auto& s : statuses) {
    if (!s) continue;
    StatusCode c;
    if (timeout_ms < 0) {
      c = s->wait_for(-1);
    } else if (timeout_ms == 0) {
      c = s->poll();
    } else {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
      c = s->wait_for(left > 0 ? left : 0);
    }
    if (is_failure(c) && first_failure == StatusCode::SUCCESS) first_failure = c;
    if (!is_settled(c)) pending = true;
  }
  if (first_failure != StatusCode::SUCCESS) return first_failure;
  return pending ? StatusCode::IN_PROGRESS : StatusCode::SUCCESS;
}

}  // namespace mori::io
