// SPDX-License-Identifier: MIT
// A worker's UMBPPeer.BatchAllocateSlots answered in C++ by its grpc++ peer server: the request
// parsed with umbp_peer.proto's C++ messages, the pulled puts done by PeerPuts (peer_puts.h), and
// the reply built as peer_service.PeerService._allocate builds it. What PeerPuts leaves (HBM
// slots, a writer's buffer not seen yet) and a request that does not parse go to the Python
// handler.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "src/peer_puts.h"

namespace mori::umbp {

class NativePeerPuts {
 public:
  // arena_buffer: the serialized BufferMemoryDesc of the DRAM arena (handed to writers with each
  // slot); backend_id, buffer_index, page_size: the arena's, as the Python service names them.
  NativePeerPuts(PeerPuts& puts, std::string arena_buffer, uint32_t backend_id, uint32_t buffer_index,
                 uint64_t page_size);
  // False: the call is the Python handler's.
  bool batch_allocate_slots(std::string_view request, std::string& reply, double time_remaining_s);
  uint64_t answered() const { return answered_.load(std::memory_order_relaxed); }

  static constexpr uint64_t kPendingTtlMs = 30000;  // an uncommitted slot is reclaimed after this

 private:
  PeerPuts& puts_;
  std::string arena_buffer_;
  uint32_t backend_id_, buffer_index_;
  uint64_t page_size_;
  std::atomic<uint64_t> answered_{0};
};

}  // namespace mori::umbp
