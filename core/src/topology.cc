// SPDX-License-Identifier: MIT
#include "mori/core/topology.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>

#include "mori/core/env.h"
#include "mori/core/store.h"

namespace mori {

std::string node_identity() {
  const std::string forced = env::current().node_id;  // per call: an engine made after os.environ changed sees it
  if (!forced.empty()) return forced;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (f && std::getline(f, id) && !id.empty()) return id;
  char host[64] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

Topology Topology::discover(Bootstrap& bootstrap, int cuda_device) {
  PeDescriptor me{};
  std::strncpy(me.node_id, node_identity().c_str(), sizeof(me.node_id) - 1);
  gethostname(me.hostname, sizeof(me.hostname) - 1);
  me.pid = static_cast<int32_t>(getpid());
  me.cuda_device = cuda_device;
  std::strncpy(me.ip, local_ip_address().c_str(), sizeof(me.ip) - 1);

  Topology t;
  t.my_pe_ = bootstrap.rank();
  t.pes_ = bootstrap.allgather_values(me);
  std::map<std::string, int> nodes;  // node id -> index, in order of first PE
  std::vector<int> per_node_count;
  for (int pe = 0; pe < t.n_pes(); ++pe) {
    std::string id(t.pes_[pe].node_id, strnlen(t.pes_[pe].node_id, sizeof(me.node_id)));
    auto [it, inserted] = nodes.emplace(id, static_cast<int>(nodes.size()));
    if (inserted) per_node_count.push_back(0);
    t.node_index_.push_back(it->second);
    t.local_rank_of_.push_back(per_node_count[it->second]++);
  }
  t.num_nodes_ = static_cast<int>(nodes.size());
  for (int pe = 0; pe < t.n_pes(); ++pe)
    if (t.same_node(pe, t.my_pe_)) t.local_pes_.push_back(pe);
  t.local_rank_ = t.local_rank_of_[t.my_pe_];
  return t;
}

}  // namespace mori
