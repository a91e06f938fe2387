// SPDX-License-Identifier: MIT
// MORI-IO's public value types: MORI's enums (their values are MORI's wire/ABI values),
// backend configurations and the two descriptors engines exchange out of band.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace mori::io {

enum class BackendType : uint32_t { Unknown = 0, XGMI = 1, RDMA = 2, TCP = 3, FABRIC = 4 };
enum class MemoryLocationType : uint32_t { Unknown = 0, CPU = 1, GPU = 2 };
enum class StatusCode : uint32_t {
  SUCCESS = 0,
  INIT = 1,
  IN_PROGRESS = 2,
  ERR_BEGIN = 10,  // internal: every code above it is a failure
  ERR_INVALID_ARGS = 11,
  ERR_NOT_FOUND = 12,
  ERR_RDMA_OP = 13,
  ERR_BAD_STATE = 14,
  ERR_GPU_OP = 15,
};
enum class PollCqMode : uint32_t { POLLING = 0, EVENT = 1 };

inline bool is_failure(StatusCode c) { return static_cast<uint32_t>(c) > static_cast<uint32_t>(StatusCode::ERR_BEGIN); }

struct IOEngineConfig {
  std::string host;
  uint16_t port = 0;
};

// MORI's RDMA configuration. Without an RDMA stack the network backend is our tcp one;
// qp_per_transfer then sets its connections (lanes) per peer, the rest is kept for MORI's API.
struct RdmaBackendConfig {
  int qp_per_transfer = 1;
  int post_batch_size = -1;
  int num_worker_threads = -1;
  PollCqMode poll_cq_mode = PollCqMode::POLLING;
  bool enable_notification = true;
  int notif_per_qp = 1024;
  bool enable_transfer_chunking = false;
  int chunk_bytes = 65536;
  int max_chunks_per_transfer = 64;
  int num_nics_per_transfer = 1;
  int max_send_wr = 0, max_cqe_num = 0, max_msg_sge = 0;
};

struct XgmiBackendConfig {
  int num_streams = 64;
  int num_events = 64;
};

// Our own network backend's knobs (BackendType.TCP); 0 = the MORI_IO_* setting.
struct TcpBackendConfig {
  int lanes = 0;
  bool direct = true;  // CPU memory of engines on one host without sockets (MORI_IO_DIRECT)
};

constexpr size_t kIpcHandleBytes = 64;
using IpcHandle = std::array<uint8_t, kIpcHandleBytes>;
constexpr size_t kEngineSecretBytes = 32;

// Who an engine is and where it listens. `secret` is the capability a peer must prove it
// holds (challenge-response, never sent) before the engine serves it: whoever has the
// descriptor may talk to the engine, nobody else.
struct EngineDesc {
  std::string key, node_id, hostname, host;
  uint32_t port = 0;
  int64_t pid = 0;
  std::string secret;       // kEngineSecretBytes raw bytes
  std::string ucx_address;  // UCX worker address when the RDMA backend runs on UCX (opaque bytes)

  bool operator==(const EngineDesc& o) const {
    return key == o.key && node_id == o.node_id && hostname == o.hostname && host == o.host && port == o.port &&
           pid == o.pid;
  }
};

// One registered region. `region_key` is a per-region random capability checked by the
// target on every request, so holding an engine's descriptor is not enough to reach
// memory it never described to you.
struct MemoryDesc {
  std::string engine_key;
  uint32_t id = 0;
  int32_t device_id = -1;
  std::string device_bus_id;
  uint64_t data = 0, size = 0;
  MemoryLocationType loc = MemoryLocationType::Unknown;
  IpcHandle ipc_handle{};
  int32_t numa_node = -1;
  uint64_t ipc_offset = 0;
  uint64_t region_key = 0;
  std::string ucx_rkey;  // packed UCX rkey when the region is mapped for UCX RMA (opaque bytes)

  bool operator==(const MemoryDesc& o) const {
    return engine_key == o.engine_key && id == o.id && device_id == o.device_id && device_bus_id == o.device_bus_id &&
           data == o.data && size == o.size && loc == o.loc && numa_node == o.numa_node;
  }
};

}  // namespace mori::io
