// SPDX-License-Identifier: MIT
// MORI's 128-byte unique id: where rank 0's bootstrap store listens, and the job secret
// (unless MORI_JOB_SECRET is set where it is created: then every rank takes the secret from
// its own MORI_JOB_SECRET and the id carries none).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "mori/core/bootstrap.h"
#include "mori/core/store.h"

namespace mori {

constexpr size_t kUniqueIdBytes = 128;
using UniqueId = std::array<uint8_t, kUniqueIdBytes>;

// Starts a store server in this process (kept alive until a bootstrap adopts it
// or the process exits) and returns an id that points at it.
UniqueId create_unique_id();

struct UniqueIdFields {
  std::string host;
  int port;
  JobSecret secret;
};
UniqueIdFields parse_unique_id(const uint8_t* data, size_t size);

// Bootstrap of rank `rank` of `nranks` through the store named by `uid`.
std::unique_ptr<Bootstrap> bootstrap_from_unique_id(const uint8_t* uid, size_t size, int rank, int nranks);
// Bootstrap through a store at host:port (hosted by `mori run` or a rank); host_locally
// makes this rank start the server itself (env-var launches without a launcher store), and
// `store_rank` names the rank that hosts it (-1: a launcher), for errors when it is gone.
std::unique_ptr<Bootstrap> bootstrap_from_store(const std::string& host, int port, const JobSecret& secret, int rank,
                                                int nranks, bool host_locally, int store_rank = -1);

}  // namespace mori
