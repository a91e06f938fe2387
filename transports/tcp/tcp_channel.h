// SPDX-License-Identifier: MIT
// The initiator side of one tcp connection (this PE -> one target PE).
//
// The calling thread drives the connection itself: no helper thread sits between
// the application and the socket, so a small put costs one sendmsg() and a
// fetching atomic one round trip. While a send would block, the sender keeps
// reading replies, so a target blocked on sending us get data can never deadlock
// against us blocked on sending it requests. Get payloads are received straight
// into the caller's buffer.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "mori/core/store.h"
#include "mori/core/unique_fd.h"
#include "mori/transports/transport.h"
#include "tcp/tcp_protocol.h"

namespace mori::tcp {

class TcpChannel {
 public:
  // Connects to `peer` at ip:port (retrying until timeout_s) and authenticates.
  TcpChannel(int my_pe, int peer, const std::string& ip, int port, const JobSecret& secret, double timeout_s,
             uint32_t hello_flags = kHelloPrimary);
  ~TcpChannel();
  TcpChannel(const TcpChannel&) = delete;
  TcpChannel& operator=(const TcpChannel&) = delete;

  int peer() const { return peer_; }
  const std::string& address() const { return address_; }

  void put(uint32_t region, uint64_t offset, const void* src, size_t n);
  void get(uint32_t region, uint64_t offset, void* dst, size_t n, bool nbi);
  uint64_t atomic(uint32_t region, uint64_t offset, AmoOp op, int width, uint64_t operand, uint64_t compare);
  void put_signal(uint32_t region, uint64_t offset, const void* src, size_t n, uint32_t signal_region,
                  uint64_t signal_offset, uint64_t value, SignalOp op);

  // quiet in two halves, so flushes to many peers overlap: start() sends a flush
  // if anything is outstanding, finish() waits for everything sent so far.
  void quiet_start();
  void quiet_finish();

  // Says goodbye (finalize) and closes; errors are ignored.
  void close(bool say_bye);

  // Set once the connection failed (message), empty while healthy.
  std::string failure() const;
  bool failed() const { return failed_.load(std::memory_order_acquire); }

 private:
  struct Pending {
    uint64_t seq;
    Op op;
    char* dst;        // get: where the data goes
    size_t length;    // get: bytes expected
    uint64_t* value;  // fetching atomic: where the old value goes
  };

  uint64_t send_request(Request& rq, const void* payload, size_t n, bool expect_reply, char* dst = nullptr,
                        uint64_t* value = nullptr);
  // Waits until the reply to `seq` (and everything before it) has been processed.
  void wait_for(uint64_t seq);
  // Blocks until the socket is writable (want_write) or readable, reading replies meanwhile.
  void wait_io(bool want_write);
  // Reads whatever replies are available without blocking; returns whether bytes arrived.
  bool read_replies();
  // recv() into the reply buffer without blocking; false when nothing is available.
  bool fill_buffer();
  void parse_header();
  void finish_error();
  void complete_front();
  void raise_deferred_errors();
  [[noreturn]] void fail(const std::string& why);
  void check_usable();

  int my_pe_, peer_;
  std::string address_;
  double timeout_s_;
  UniqueFd fd_;
  std::mutex mu_;
  std::atomic<bool> failed_{false};
  std::string failure_;  // written once, before failed_ is set

  uint64_t next_seq_ = 1;
  uint64_t completed_ = 0;     // highest seq whose reply has been processed
  uint64_t last_unacked_ = 0;  // highest seq sent without a reply expected
  uint64_t last_replied_ = 0;  // highest seq sent that expects a reply
  std::deque<Pending> pending_;
  std::vector<std::string> errors_;  // error replies not yet reported to the caller
  double last_progress_ = 0;

  // Reply parser state.
  enum class Phase { kHeader, kData, kText } phase_ = Phase::kHeader;
  Reply cur_{};
  size_t cur_got_ = 0;
  std::string cur_text_;
  std::vector<char> rbuf_;
  size_t rpos_ = 0, rend_ = 0;
};

}  // namespace mori::tcp
