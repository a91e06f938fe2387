// SPDX-License-Identifier: MIT
// The owner's side of a pulled put, in C++: a writer's BatchAllocateSlots names where each value
// lies in its registered memory; the owner reserves slots in its arena, reads the values from the
// writer through MORI-IO (one batch read per source), and commits them, all in the one call
// (umbp/distributed/peer_service.py does the same in Python, and keeps the cases this leaves:
// HBM slots, a source it has not seen yet). The grpc++ peer server runs it without the
// interpreter lock (master_grpc_peer.h parses and answers the call).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "mori/io/engine.h"
#include "src/peer_pages.h"
#include "src/wakeup.h"

namespace mori::umbp {

class PeerPuts {
 public:
  // What the worker's store does to its pages (PeerPages, behind the client's lock).
  struct Store {
    std::function<std::vector<SlotGrant>(const std::vector<std::string>&, const std::vector<uint64_t>&,
                                         const std::vector<int>&)>
        allocate;
    std::function<std::vector<bool>(const std::vector<uint64_t>&, const std::vector<std::string>&)> commit;
    std::function<std::vector<bool>(const std::vector<uint64_t>&)> abort;
  };
  struct Entry {
    std::string key;
    uint64_t size = 0;
    int32_t tier = 0;         // TIER_UNKNOWN or TIER_DRAM here (HBM is Python's)
    uint32_t source_ref = 0;  // 1-based into the call's source descriptors; 0: the writer writes
    uint64_t source_offset = 0;
  };
  struct Grant {
    SlotGrant slot;
    bool committed = false;  // read from the writer and published
    bool failed = false;     // granted, but the read or commit failed: answered FAILED
  };

  // engine and arena (the DRAM arena's registration) outlive this; wake is set after a commit
  // (the heartbeat that ships the ADD events); transfer_timeout_ms bounds a read.
  PeerPuts(Store store, io::Engine& engine, io::MemoryDesc arena, Wakeup* wake, int64_t transfer_timeout_ms);

  // A writer's packed MemoryDesc, unpacked (by Python, the first time it was seen).
  void remember_source(const std::string& packed, io::MemoryDesc desc);
  size_t sources() const;
  // Test hook: the next `count` reads start only `past_s` after their writer's deadline (as a
  // stalled owner's would), then read for real. take_hold(): past_s for the read about to start
  // (one fewer held), or < 0; the Python service's reads take it too.
  void hold_next(int count, double past_s);
  double take_hold();

  // The call: false, with nothing reserved, when it is Python's (an HBM or unknown tier, a source
  // not remembered yet). time_left_s: until the writer's deadline (< 0: none).
  bool run(const std::vector<Entry>& entries, const std::vector<std::string>& sources, double time_left_s,
           std::vector<Grant>& out);

  static constexpr size_t kMaxSources = 1024;  // writers' buffers remembered (then forgotten, all)

 private:
  Store store_;
  io::Engine& engine_;
  io::MemoryDesc arena_;
  Wakeup* wake_;
  int64_t transfer_timeout_ms_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, io::MemoryDesc> sources_;
  int hold_count_ = 0;
  double hold_past_s_ = 0;
};

}  // namespace mori::umbp
