// SPDX-License-Identifier: MIT
#include "src/backends/cuda_ipc_backend.h"

#include "src/engine_impl.h"

namespace mori::io {

void CudaIpcBackend::post(bool read, Peer& peer, const std::shared_ptr<Transfer>& t, Region& local,
                          const MemoryDesc& remote, const std::vector<Extent>& extents) {
  if (t->notify) (void)peer.lanes();  // the notification goes over the peer's connection
  std::string why;
  const EngineDesc& me = engine_.desc();
  bool same_process = peer.desc().pid == me.pid && peer.desc().node_id == me.node_id;
  char* base = copier_.open(remote, local.device, same_process, &why);
  if (!base) {
    t->piece_done(StatusCode::ERR_GPU_OP, why);
    return;
  }
  std::vector<std::pair<char*, const char*>> dst_src;
  std::vector<size_t> sizes;
  for (const auto& e : extents) {
    char* l = local.ptr + e.local_offset;
    char* r = base + e.remote_offset;
    dst_src.emplace_back(read ? l : r, read ? r : l);
    sizes.push_back(e.size);
  }
  t->add_pieces(1);
  auto driver = copier_.copy(local.device, dst_src, sizes, [t](const std::string& err) {
    t->piece_done(err.empty() ? StatusCode::SUCCESS : StatusCode::ERR_GPU_OP, err);
  });
  // Its waiter synchronizes the copy's event itself (the status is not the caller's yet).
  if (driver) t->status->set_driver(driver);
}

void CudaIpcBackend::on_register(MemoryDesc& desc) {
  if (desc.loc == MemoryLocationType::GPU && desc.data)
    gpu::export_ipc(reinterpret_cast<const void*>(desc.data), &desc.ipc_handle, &desc.ipc_offset);
}

}  // namespace mori::io
