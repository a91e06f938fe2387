// SPDX-License-Identifier: MIT
// Who is where: node identity of every PE, local ranks, which PEs share a host.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mori/core/bootstrap.h"

namespace mori {

struct PeDescriptor {
  char node_id[64];  // MORI_NODE_ID, else kernel boot id, else hostname
  char hostname[64];
  int32_t pid;
  int32_t cuda_device;  // -1 when not bound to a GPU
  char ip[48];          // address other hosts reach this PE at (tcp transport)
};

class Topology {
 public:
  // Collective over the bootstrap: every PE publishes its descriptor.
  static Topology discover(Bootstrap& bootstrap, int cuda_device = -1);

  int my_pe() const { return my_pe_; }
  int n_pes() const { return static_cast<int>(pes_.size()); }
  const PeDescriptor& pe(int i) const { return pes_.at(i); }

  int num_nodes() const { return num_nodes_; }
  int node_of(int pe) const { return node_index_.at(pe); }
  bool same_node(int a, int b) const { return node_index_.at(a) == node_index_.at(b); }
  // PEs on my node in PE order; my local rank is my position in it.
  const std::vector<int>& local_pes() const { return local_pes_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return static_cast<int>(local_pes_.size()); }
  // Local rank of any PE within its own node.
  int local_rank_of(int pe) const { return local_rank_of_.at(pe); }

 private:
  int my_pe_ = 0;
  int num_nodes_ = 1;
  int local_rank_ = 0;
  std::vector<PeDescriptor> pes_;
  std::vector<int> node_index_, local_pes_, local_rank_of_;
};

// This process's node identity (MORI_NODE_ID, boot id, hostname).
std::string node_identity();

}  // namespace mori
