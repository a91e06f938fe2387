// SPDX-License-Identifier: MIT
#include "src/backends/direct_backend.h"

#include <algorithm>

#include "mori/core/status.h"
#include "src/engine_impl.h"

namespace mori::io {

DirectBackend::DirectBackend(EngineImpl& engine, Backend& fallback)
    : engine_(engine),
      fallback_(fallback),
      copier_(std::max(1, engine.settings().direct_threads - 1), "mori-io-cma") {}  // the caller copies too

bool DirectBackend::can_move(const MemoryDesc& local, const MemoryDesc& remote, Peer& peer, bool same_node) {
  return local.loc == MemoryLocationType::CPU && remote.loc == MemoryLocationType::CPU && same_node &&
         peer.grant(remote) != nullptr;
}

void DirectBackend::post(bool read, Peer& peer, const std::shared_ptr<Transfer>& t, Region& local,
                         const MemoryDesc& remote, const std::vector<Extent>& extents) {
  std::shared_ptr<Grant> g = peer.grant(remote);
  if (!g) {
    fallback_.post(read, peer, t, local, remote, extents);
    return;
  }
  std::vector<DirectSegment> segs;
  segs.reserve(extents.size());
  uint64_t total = 0;
  for (const auto& e : extents) {
    if (!range_ok(e.remote_offset, e.size, g->size))
      raise(Status::kInvalidArgument, "remote offset %llu + size %llu is outside remote memory region %u (%llu bytes)",
            (unsigned long long)e.remote_offset, (unsigned long long)e.size, remote.id, (unsigned long long)g->size);
    segs.push_back({local.ptr + e.local_offset, g->addr + e.remote_offset, e.size});
    total += e.size;
  }
  auto run = [read, g, t, region = remote.id](std::vector<DirectSegment> part) {
    std::shared_lock<std::shared_mutex> lock(g->mu);
    if (g->revoked) {
      t->piece_done(StatusCode::ERR_BAD_STATE, format("remote memory region %u was deregistered", region));
      return;
    }
    std::string err = direct_copy(read, static_cast<pid_t>(g->pid), part.data(), part.size());
    if (err.empty())
      t->piece_done(StatusCode::SUCCESS);
    else
      t->piece_done(StatusCode::ERR_RDMA_OP, t->peer->name() + ": " + err);
  };
  // Small jobs run on the caller's thread; large ones are cut into `direct_threads` parts of
  // about equal bytes: the caller copies the first, workers the rest (both cores busy, one
  // hand-off fewer than giving every part away).
  const IoSettings& settings = engine_.settings();
  size_t parts_wanted = static_cast<size_t>(settings.direct_threads);
  if (total <= 4 * settings.inline_bytes || parts_wanted == 1) {
    t->add_pieces(1);
    run(std::move(segs));
    return;
  }
  uint64_t share = (total + parts_wanted - 1) / parts_wanted;
  std::vector<std::vector<DirectSegment>> parts(1);
  uint64_t in_part = 0;
  for (auto s : segs) {
    while (s.size > 0) {
      uint64_t take = std::min<uint64_t>(s.size, share - in_part);
      parts.back().push_back({s.local, s.remote, take});
      s.local += take;
      s.remote += take;
      s.size -= take;
      in_part += take;
      if (in_part == share) {
        parts.emplace_back();
        in_part = 0;
      }
    }
  }
  if (parts.back().empty()) parts.pop_back();
  t->add_pieces(static_cast<int>(parts.size()));
  for (size_t i = 1; i < parts.size(); ++i)
    copier_.submit([run, part = std::move(parts[i])]() mutable { run(std::move(part)); });
  run(std::move(parts[0]));
}

}  // namespace mori::io
