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
  const size_t chunk = engine_.settings().chunk_bytes, stripe_from = engine_.settings().stripe_from;
  bool stripe = n > 1 && total > stripe_from;
  // The lanes this transfer uses: an unstriped one the first two in turn (taking all four in
  // turn made 64 KiB reads slower, 29 -> 39-43 us: docs/io.md, Round 6), a striped one as many
  // as give each at least stripe_from bytes, two at least (360 KiB in halves, 2 MiB over four).
  const size_t use = stripe ? std::min<size_t>(n, std::max<uint64_t>(2, total / stripe_from)) : std::min<size_t>(n, 2);
  size_t lane = t->uid % use;
  // Unstriped, the first idle lane of those: a caller's back-to-back transfers stay on one lane,
  // whose threads are the ones awake (64 KiB reads on two cores: 49-51 -> 46-48 us), while
  // transfers in flight side by side still spread.
  if (!stripe)
    for (size_t i = 0; i < use; ++i)
      if (lanes[i]->idle()) {
        lane = i;
        break;
      }
  uint64_t piece = wire::kMaxChunk;
  if (stripe) {
    // Pieces of equal size, at most `chunk`, as many as a multiple of the lanes used: every
    // lane carries the same share, and the transfer ends when they all do (1 MiB + 4 KiB goes
    // as two halves rather than 1 MiB on one lane and 4 KiB on the other).
    uint64_t k = (total + chunk - 1) / chunk;
    k = (k + use - 1) / use * use;
    piece = std::min<uint64_t>(chunk, (total + k - 1) / k);
  }
  int count = 0;
  for (const auto& e : extents) {
    for (uint64_t done = 0; done < e.size;) {
      uint64_t len = std::min<uint64_t>(e.size - done, piece);
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
      if (stripe) lane = (lane + 1) % use;
    }
  }
  if (count == 1 && t->notify) {
    // One request is the whole transfer: it carries the notification, which the target counts
    // once the request succeeded (one message, not two; the waiter sends nothing after the
    // reply). Not for a read into GPU memory: its copy there may still fail afterwards.
    for (auto& pieces : per_lane)
      if (!pieces.empty() && !(read && pieces.front().gpu)) {
        pieces.front().req.flags = wire::kNotifyOnSuccess;
        pieces.front().req.aux = t->uid;
        t->notify = false;
      }
  }
  t->add_pieces(count);
  // Large shares go to the lanes' threads first; the caller may send the last lane's itself
  // (Lane::post), after the others are on their way.
  size_t last = n;
  for (size_t i = 0; i < n; ++i)
    if (!per_lane[i].empty()) last = i;
  // The waiter reads that lane's replies itself (the others' come through their receiving
  // threads; with one lane, all of them). A striped transfer of one piece per lane ends on every
  // lane within microseconds: their threads and its waiter poll for the replies rather than
  // sleep (MORI_IO_TCP_POLL_US; a 256 KiB write 48 -> 39.5 us, docs/io.md, Round 9). Lanes with
  // several pieces each (batches, 4 MiB and up) stream their replies: polling gained nothing there.
  const bool one_each = stripe && static_cast<size_t>(count) <= use;
  if (last < n) t->status->set_driver(lanes[last]->driver(), one_each);
  for (size_t i = 0; i < n; ++i)
    if (!per_lane[i].empty()) lanes[i]->post(std::move(per_lane[i]), i == last, one_each);
}

void TcpBackend::connect(Peer& peer) { (void)peer.lanes(); }

}  // namespace mori::io
