// SPDX-License-Identifier: MIT
// TransferStatus: MORI's status of one transfer. The state is shared between the caller's
// object and the engine, so dropping the caller's reference while the transfer is in flight
// is harmless (MORI keeps a raw pointer there: a use-after-free).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mori/io/types.h"

namespace mori::io {

class StatusState;

// Progress a waiting thread may make itself: the connection a transfer's replies arrive on
// lets the thread that waits for it read them, instead of a receiving thread reading them
// and then waking the waiter (one thread hand-off less per small transfer).
class StatusDriver {
 public:
  virtual ~StatusDriver() = default;
  // Reads replies until `s` settles, nothing more is expected on this connection or
  // `deadline` passes. False when the waiter cannot drive (the connection is gone).
  virtual bool drive(const StatusState& s, std::chrono::steady_clock::time_point deadline) = 0;
  // The caller polls the status instead of waiting: whoever reads the connection's replies
  // should be reading now, not resting after a waiter left (the tcp lanes' linger).
  virtual void nudge() {}
};

class StatusState {
 public:
  StatusCode code() const;
  // The code, as a caller polling the status sees it: while it is in progress, the
  // connection's replies are nudged along (StatusDriver::nudge).
  StatusCode poll() const;
  std::string message() const;
  // Failure-sticky: once a status holds an error, later updates are ignored.
  void update(StatusCode code, const std::string& message = "");
  void set(StatusCode code, const std::string& message = "");  // unconditional
  // Blocks until the code is neither INIT nor IN_PROGRESS or timeout_ms passes (< 0: no limit).
  StatusCode wait_for(int64_t timeout_ms) const;
  // The connection a waiter may drive (set before the status is handed to the caller).
  // poll_for_rest: the rest of the transfer lands within microseconds of the driven part (one
  // piece on each of its connections), so a waiter done driving polls for it a while
  // (MORI_IO_TCP_POLL_US) rather than sleep at once.
  void set_driver(std::weak_ptr<StatusDriver> d, bool poll_for_rest = false) {
    driver_ = std::move(d);
    poll_for_rest_ = poll_for_rest;
  }
  bool poll_for_rest() const { return poll_for_rest_; }
  bool settled() const {
    StatusCode c = code();
    return c != StatusCode::INIT && c != StatusCode::IN_PROGRESS;
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::atomic<StatusCode> code_{StatusCode::INIT};  // written under mu_, read without it
  std::string message_;
  std::weak_ptr<StatusDriver> driver_;
  bool poll_for_rest_ = false;
};

class TransferStatus {
 public:
  TransferStatus() : state_(std::make_shared<StatusState>()) {}
  explicit TransferStatus(std::shared_ptr<StatusState> s) : state_(std::move(s)) {}

  StatusCode Code() const { return state_->poll(); }
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
