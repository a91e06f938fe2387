// SPDX-License-Identifier: MIT
// TransferStatus: MORI's status of one transfer. The state is shared between the caller's
// object and the engine, so dropping the caller's reference while the transfer is in flight
// is harmless (MORI keeps a raw pointer there: a use-after-free).
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mori/io/types.h"

namespace mori::io {

class StatusState {
 public:
  StatusCode code() const;
  std::string message() const;
  // Failure-sticky: once a status holds an error, later updates are ignored.
  void update(StatusCode code, const std::string& message = "");
  void set(StatusCode code, const std::string& message = "");  // unconditional
  // Blocks until the code is neither INIT nor IN_PROGRESS or timeout_ms passes (< 0: no limit).
  StatusCode wait_for(int64_t timeout_ms) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  StatusCode code_ = StatusCode::INIT;
  std::string message_;
};

class TransferStatus {
 public:
  TransferStatus() : state_(std::make_shared<StatusState>()) {}
  explicit TransferStatus(std::shared_ptr<StatusState> s) : state_(std::move(s)) {}

  StatusCode Code() const { return state_->code(); }
  std::string Message() const { return state_->message(); }
  bool Init() const { return Code() == StatusCode::INIT; }
  bool InProgress() const { return Code() == StatusCode::IN_PROGRESS; }
  bool Succeeded() const { return Code() == StatusCode::SUCCESS; }
  bool Failed() const { return is_failure(Code()); }
  void SetCode(StatusCode c) { state_->set(c, state_->message()); }
  void SetMessage(const std::string& m) { state_->set(state_->code(), m); }
  void Update(StatusCode c, const std::string& m) { state_->update(c, m); }
  void Wait() const { state_->wait_for(-1); }
  StatusCode WaitFor(int64_t timeout_ms) const { return state_->wait_for(timeout_ms); }

  const std::shared_ptr<StatusState>& state() const { return state_; }

 private:
  std::shared_ptr<StatusState> state_;
};

// MORI's wait_all: failure wins; timeout_ms 0 polls once, < 0 waits for all, > 0 one deadline.
StatusCode wait_all(const std::vector<std::shared_ptr<StatusState>>& statuses, int64_t timeout_ms);

}  // namespace mori::io
