// SPDX-License-Identifier: MIT
// LocationCache: a distributed reader's memory of where values lay on their owners (the place a
// BatchResolveKeys or the master's route gave, read and verified under a read lease), and the
// located read that uses it: one call, no GIL, no RPC: lookup, one MORI-IO batch read per owner
// straight into the caller's registered host memory, the wait, the check of what arrived (its
// checksum hashed as it landed where the backend lets it: arrival_checksums.h).
// Places that fail their check or their read are forgotten (the caller reads those keys through
// the routed path); a failed owner is reported, for the caller's peer bookkeeping.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "mori/io/engine.h"

namespace mori::umbp {

class LocationCache {
 public:
  using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC: Python's time.monotonic()
  // Hashes [ptrs[i], ptrs[i] + sizes[i]) against checksums[i] (PeerPages::verify).
  using Verifier = std::function<std::vector<bool>(const std::vector<uintptr_t>&, const std::vector<uint64_t>&,
                                                   const std::vector<uint64_t>&)>;

  explicit LocationCache(size_t capacity) : capacity_(capacity ? capacity : 1) {}

  // Places of values just read from `node_id` (at `address`, its DRAM arena `arena`), valid
  // until `expires` (seconds of the monotonic clock). An owner named with another address or
  // arena than before is a new one: the places learnt from the old one are not used again.
  void remember(const std::string& node_id, const std::string& address, const io::MemoryDesc& arena,
                const std::vector<std::string>& keys, const std::vector<uint64_t>& offsets,
                const std::vector<uint64_t>& sizes, const std::vector<uint64_t>& checksums, double expires);
  // Forgets an owner and every place learnt from it (it failed, or its address changed).
  void forget_owner(const std::string& node_id);
  // Forgets these keys' places (they failed a read the caller made at them).
  void forget(const std::vector<std::string>& keys);
  size_t size() const;
  // Per key, whether a place is held that a read would use now (not expired, its owner not
  // forgotten): where a distributed exists() may answer without the master.
  std::vector<bool> holds(const std::vector<std::string>& keys) const;

  // Host memory registered with the engine: the only destinations the located read writes to.
  void add_region(uintptr_t ptr, uint64_t size, const io::MemoryDesc& desc);
  void remove_region(uintptr_t ptr);

  struct Place {
    std::string node_id, address;
    uint64_t offset = 0, size = 0, checksum = 0;
    double expires = 0;
  };
  // A key's place, false when none is held (test hooks).
  bool peek(const std::string& key, Place* out) const;
  // Test hook: overrides a held place's offset and/or expiry (< 0: keep).
  bool adjust(const std::string& key, int64_t offset, double expires);

  struct Result {
    std::vector<uint32_t> got;   // indices read and verified
    std::vector<uint32_t> rest;  // indices for the routed path (no usable place, stale, failed)
    // Indices with a usable place but a destination outside registered host memory: the caller
    // reads them its own way (staging, GPU), at these places.
    std::vector<uint32_t> other;
    std::vector<Place> other_places;
    uint64_t stale = 0;      // places used that failed their check or their read
    uint64_t got_bytes = 0;  // bytes of `got`
    // Values whose check was hashed as they landed (ArrivalChecksums), not after the read.
    uint64_t on_arrival = 0;
    // Owners whose transfer failed: (node id, address, why); their places are forgotten.
    std::vector<std::array<std::string, 3>> failed;
  };
  // Reads keys[i] (i in idx, or every key when idx is empty) of exactly sizes[i] bytes into
  // ptrs[i] where a place is held; every transfer within timeout_ms.
  Result read(io::Engine& engine, const std::vector<std::string>& keys, const std::vector<uintptr_t>& ptrs,
              const std::vector<uint64_t>& sizes, const std::vector<uint32_t>& idx, int64_t timeout_ms,
              const Verifier& verify);

  // Reads whose Result nobody hands back to Python (the binding's get with `tally`), added up
  // here: the reader's stats() adds them to its own counters.
  struct Tally {
    uint64_t got = 0, stale = 0, on_arrival = 0, got_bytes = 0;
  };
  void tally(const Result& r);
  Tally tallied() const;

 private:
  struct Owner {
    std::string node_id, address;
    io::MemoryDesc arena;
  };
  struct Entry {
    std::shared_ptr<const Owner> owner;
    uint64_t offset, size, checksum;
    Clock::time_point expires;
    std::list<std::string>::iterator lru;
  };
  struct Region {
    uintptr_t ptr;
    uint64_t size;
    io::MemoryDesc desc;
  };

  void erase_locked(std::unordered_map<std::string, Entry>::iterator it);
  // The index of the registered region holding [ptr, ptr + size), or -1.
  int region_of_locked(uintptr_t ptr, uint64_t size) const;

  const size_t capacity_;
  mutable std::mutex mu_;
  mutable std::mutex tally_mu_;
  Tally tally_;
  std::unordered_map<std::string, std::shared_ptr<const Owner>> owners_;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> lru_;  // oldest first
  std::vector<Region> regions_;
};

}  // namespace mori::umbp
