// SPDX-License-Identifier: MIT
// The job secret of a job started with MASTER_ADDR/RANK/WORLD_SIZE (torchrun, or by hand).
//
// MORI_JOB_SECRET, when set, is the secret. Without it a secret is derived from the store's
// address, which anyone who knows the address can compute: that is safe only while the store
// is unreachable from other hosts, so a derived secret is used on one host only (the store
// then listens on loopback) and a job spanning hosts is refused with an error saying how to
// set MORI_JOB_SECRET. Applied by the launcher detection (launch.h), for Python and C alike.
#pragma once

#include <string>

namespace mori {

// Where a host name points.
enum class HostScope {
  kLoopback,  // every address it resolves to is a loopback address
  kLocal,     // an address of this host that other hosts can reach
  kRemote,    // another host (or a name that does not resolve)
};
HostScope host_scope(const std::string& host);

struct EnvLaunchSecret {
  std::string secret_hex;  // 64 hex digits
  std::string store_host;  // where the store listens and the ranks meet it
  bool derived = false;    // computed from the address (single host only), not MORI_JOB_SECRET
};

// job_secret_hex: MORI_JOB_SECRET ("" if unset). local_world_size: LOCAL_WORLD_SIZE, -1 if
// unknown. run_id: TORCHELASTIC_RUN_ID ("" if none). Throws mori::Error(kInvalidArgument) for
// a job that may span hosts without MORI_JOB_SECRET.
EnvLaunchSecret env_launch_secret(const std::string& job_secret_hex, const std::string& master_addr, int store_port,
                                  const std::string& run_id, int world_size, int local_world_size);

}  // namespace mori
