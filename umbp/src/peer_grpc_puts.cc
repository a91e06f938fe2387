// SPDX-License-Identifier: MIT
// BatchAllocateSlots in C++ for the peer's grpc++ server (peer_grpc_puts.h).
#include "src/peer_grpc_puts.h"

#include <vector>

#if MORI_UMBP_HAVE_PROTOBUF
#include "umbp_peer.pb.h"
#endif

namespace mori::umbp {

NativePeerPuts::NativePeerPuts(PeerPuts& puts, std::string arena_buffer, uint32_t backend_id, uint32_t buffer_index,
                               uint64_t page_size)
    : puts_(puts),
      arena_buffer_(std::move(arena_buffer)),
      backend_id_(backend_id),
      buffer_index_(buffer_index),
      page_size_(page_size) {}

bool NativePeerPuts::batch_allocate_slots(std::string_view request, std::string& reply, double time_remaining_s) {
#if MORI_UMBP_HAVE_PROTOBUF
  ::umbp::BatchAllocateSlotsRequest req;
  if (!req.ParseFromArray(request.data(), static_cast<int>(request.size()))) return false;
  std::vector<PeerPuts::Entry> entries;
  entries.reserve(req.entries_size());
  for (auto& e : *req.mutable_entries())
    entries.push_back({std::move(*e.mutable_key()), e.size(), static_cast<int32_t>(e.tier()), e.source_desc_ref(),
                       e.source_offset()});
  const std::vector<std::string> sources(req.source_descs().begin(), req.source_descs().end());
  std::vector<PeerPuts::Grant> grants;
  if (!puts_.run(entries, sources, time_remaining_s, grants)) return false;
  ::umbp::BufferMemoryDesc arena;
  if (!arena.ParseFromString(arena_buffer_)) return false;
  ::umbp::BatchAllocateSlotsResponse resp;
  resp.mutable_entries()->Reserve(static_cast<int>(grants.size()));
  for (const PeerPuts::Grant& g : grants) {
    auto* out = resp.add_entries();
    if (g.failed) {  // granted, but not read or not committed: the writer puts it elsewhere
      out->set_outcome(::umbp::ALLOCATE_SLOT_OUTCOME_FAILED);
      continue;
    }
    out->set_outcome(static_cast<::umbp::AllocateSlotOutcome>(static_cast<int>(g.slot.outcome)));
    out->set_slot_id(g.slot.slot_id);
    out->set_page_size(page_size_);
    out->set_backend_id(backend_id_);
    out->set_pending_ttl_ms(kPendingTtlMs);
    if (g.slot.outcome == SlotOutcome::Allocated) {
      auto* page = out->add_pages();
      page->set_buffer_index(buffer_index_);
      page->set_page_index(static_cast<uint32_t>(g.slot.offset / page_size_));
      *out->add_descs() = arena;
    }
    out->set_committed(g.committed);
  }
  if (!resp.SerializeToString(&reply)) return false;
  answered_.fetch_add(1, std::memory_order_relaxed);
  return true;
#else
  (void)request;
  (void)reply;
  (void)time_remaining_s;
  return false;
#endif
}

}  // namespace mori::umbp
