// SPDX-License-Identifier: MIT
#include "src/backends/tcp_backend.h"

#include <algorithm>

#include "src/engine_impl.h"

namespace mori::io {

void TcpBackend::post(bool read, Peer& peer, const std::shared_ptr<Transfer>& t, Region& local,
                      const MemoryDesc& remote, const std::vector<Extent>& extents) {
  std::vector<Lane*> lanes = peer.lanes();
  size_t n = lanes.size();
  uint64_t total = 0;
  for (const auto& e : extents) total += e.size;
  std::vector<std::vector<Lane::Piece>> per_lane(n);
  size_t lane = t->uid % n;
  const size_t chunk = engine_.settings().chunk_bytes;
  bool stripe = n > 1 && total > chunk;
  int count = 0;
  for (const auto& e : extents) {
    for (uint64_t done = 0; done < e.size;) {
      uint64_t len = std::min<uint64_t>(e.size - done, stripe ? chunk : wire::kMaxChunk);
      Lane::Piece lp;
      lp.req.op = static_cast<uint8_t>(read ? wire::Op::kRead : wire::Op::kWrite);
      lp.req.region = remote.id;
      lp.req.id = engine_.next_request_id();
      lp.req.region_key = remote.region_key;
      lp.req.offset = e.remote_offset + done;
      lp.req.length = len;
      lp.local = local.ptr + e.local_offset + done;
      lp.gpu = local.loc == MemoryLocationType::GPU;
      lp.device = local.device;
      lp.transfer = t;
      per_lane[lane].push_back(std::move(lp));
      ++count;
      done += len;
      if (stripe) lane = (lane + 1) % n;
    }
  }
  t->add_pieces(count);
  if (!stripe) t->status->set_driver(lanes[lane]->driver());  // one lane: its waiter may read the replies
  for (size_t i = 0; i < n; ++i)
    if (!per_lane[i].empty()) lanes[i]->post(std::move(per_lane[i]));
}

void TcpBackend::connect(Peer& peer) { (void)peer.lanes(); }

}  // namespace mori::io
