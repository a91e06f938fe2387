// SPDX-License-Identifier: MIT
// The transport interface. One implementation per way of reaching a peer:
// shm (same host, mapped memory), tcp and ucx (other hosts), cuda (GPUs of one node).
// The registry (registry.h) picks one per peer pair from the topology.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mori/core/doorbell.h"
#include "mori/transports/mem_region.h"

namespace mori {

enum class AmoOp : uint8_t {
  kFetch,
  kSet,
  kSwap,
  kCompareSwap,
  kAdd,
  kFetchAdd,
  kAnd,
  kFetchAnd,
  kOr,
  kFetchOr,
  kXor,
  kFetchXor,
};
enum class SignalOp : uint8_t { kSet = 0, kAdd = 1 };

const char* amo_name(AmoOp op);

// Target-side work that a waiting caller may do itself, instead of waking the transport's
// progress thread for every operation of a peer (ucx: peers' software-emulated RMA). An
// optional capability of a transport (Transport::progress()).
class Progress {
 public:
  // One round; says whether it did something.
  virtual bool poll() = 0;
  // Between begin_polling() and end_polling() the transport's own thread stands aside; it
  // comes back at once when the caller says it will sleep next (`will_sleep`), else soon after.
  virtual void begin_polling() = 0;
  virtual void end_polling(bool will_sleep) = 0;
  // Told once at setup whether PEs outnumber this host's cores (then waits must not keep a
  // core busy for long) or each PE has a core of its own.
  virtual void set_crowded(bool crowded) = 0;

 protected:
  ~Progress() = default;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;

  // Makes `pe`'s part of `region` reachable (region.handles[pe] is filled in).
  virtual void connect_region(MemRegion& region, int pe) = 0;
  virtual void disconnect_region(MemRegion& region, int pe) = 0;

  // A pointer this process can load from / store to, or nullptr when the transport cannot.
  virtual void* direct_ptr(int pe, RemoteRef r) = 0;

  // RMA. Blocking forms return once `src` may be reused (put) or `dst` holds the data (get);
  // nbi forms may return earlier and complete at quiet().
  virtual void put(int pe, RemoteRef dst, const void* src, size_t n, bool nbi) = 0;
  virtual void get(int pe, void* dst, RemoteRef src, size_t n, bool nbi) = 0;
  // Atomic on a 4- or 8-byte word; returns the old value for fetching ops (0 otherwise).
  virtual uint64_t atomic(int pe, RemoteRef target, AmoOp op, int width, uint64_t operand, uint64_t compare) = 0;
  // Delivers the data, then updates the 64-bit signal: a reader that sees the signal sees the data.
  virtual void put_signal(int pe, RemoteRef dst, const void* src, size_t n, RemoteRef signal, uint64_t value,
                          SignalOp op, bool nbi) = 0;
  // The library's own signalling (barrier arrivals, collective messages and their acks): like
  // put_signal (n may be 0), returning once `src` may be reused, but quiet() need not complete
  // it: the receiver's wait for the signal proves its delivery, so a barrier's quiet does not
  // wait a round trip for the previous collective's signals.
  virtual void notify(int pe, RemoteRef dst, const void* src, size_t n, RemoteRef signal, uint64_t value, SignalOp op) {
    if (n == 0)
      atomic(pe, signal, op == SignalOp::kSet ? AmoOp::kSet : AmoOp::kAdd, 8, value, 0);
    else
      put_signal(pe, dst, src, n, signal, value, op, false);
  }
  // fence: order earlier puts/AMOs to `pe` before later ones. quiet: complete everything.
  virtual void fence(int pe) = 0;
  virtual void quiet() = 0;

  // A PE this transport knows to be gone (connection lost, process exited), or -1.
  virtual int dead_peer() const { return -1; }

  // Whether every atomic, signal and notify of this transport rings the target's doorbell
  // as it lands (shm: the writer rings; tcp: the target's thread that applies it). Not where
  // a NIC writes memory behind the CPU's back (ucx). A wait on a word that only such
  // operations write may then sleep until rung rather than nap (Runtime::wait_for).
  virtual bool rings_on_delivery() const { return false; }

  // Where a waiting caller can progress this transport itself, or nullptr (asked once, at setup).
  virtual Progress* progress() { return nullptr; }
  // Whether a thread of this transport applies peers' operations here (tcp's target, ucx's
  // progress thread): it needs a core as much as the PE does.
  virtual bool has_progress_thread() const { return false; }
  // For a PE whose memory this transport writes directly (its region is mapped here): the
  // doorbell that PE sleeps on, rung after each write into its memory (shm).
  virtual void set_peer_doorbell(int pe, Doorbell* bell) {}

  // Lets peers reach this PE's own part of `region` through this transport (a
  // target-side engine serves it). Called for every symmetric region, heap first.
  virtual void expose_region(const MemRegion& region) {}
  // Where this transport reaches `pe` ("ip:port" for tcp), or "" when not meaningful.
  virtual std::string endpoint(int pe) const { return ""; }
};

}  // namespace mori
