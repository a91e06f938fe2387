// SPDX-License-Identifier: MIT
// Where each buffer of an EpHandle lives inside its one symmetric allocation.
#pragma once

#include <cstddef>

#include "mori/ep/handle.h"

namespace mori::ep {

// Offsets (bytes from the start of this handle's symmetric allocation) of every buffer.
struct EpHandle::Layout {
  size_t counter = 0;        // uint64[2]: receive-slot counters, by round parity
  size_t total = 0;          // int32: tokens received in the last dispatch (recv_num_token)
  size_t disp_sig = 0;       // uint64[2][world]: dispatch counts from each PE
  size_t comb_sig = 0;       // uint64[world]: combine rounds from each PE
  size_t inbox_sig = 0;      // uint64[2][nodes]: V1 inbox counts from each node
  size_t node_comb_sig = 0;  // uint64[nodes]: V1 partial sums from each node
  size_t disp_tok = 0, disp_w = 0, disp_idx = 0, disp_scale = 0, disp_src = 0;  // [max_recv] rows
  size_t comb_inp = 0, comb_inp_w = 0;      // [max_recv] rows: registered combine input
  size_t comb_stage = 0, comb_stage_w = 0;  // [world * max_inp] rows: pushed combine rows
  size_t comb_out = 0, comb_out_w = 0;      // [max_inp] rows
  size_t inbox_tok = 0, inbox_w = 0, inbox_idx = 0, inbox_scale = 0, inbox_meta = 0;  // V1 [nodes * max_inp]
  size_t fwd_stage = 0, fwd_stage_w = 0;  // V1 [nodes * max_inp * pes_per_node]
  size_t bytes = 0;
};

}  // namespace mori::ep
