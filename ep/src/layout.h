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
  size_t comb_pull = 0;      // PullSource: where this PE's combine input can be read in place
  size_t comb_done = 0;      // uint64[world]: combine rounds each PE finished reading my input in
  size_t disp_tok = 0, disp_w = 0, disp_idx = 0, disp_scale = 0, disp_src = 0;  // [max_recv] rows
  size_t comb_inp = 0, comb_inp_w = 0;      // [max_recv] rows: registered combine input
  size_t comb_stage = 0, comb_stage_w = 0;  // [world * max_inp] rows: pushed combine rows
  size_t comb_out = 0, comb_out_w = 0;      // [max_inp] rows
  size_t inbox_tok = 0, inbox_w = 0, inbox_idx = 0, inbox_scale = 0, inbox_meta = 0;  // V1 [nodes * max_inp]
  size_t fwd_stage = 0, fwd_stage_w = 0;  // V1 [nodes * max_inp * pes_per_node]
  size_t bytes = 0;
};

// Published by a PE whose external combine input lies in its shared tensor arena
// (mori.shmem.shared_tensors): its sources read the rows there instead of staging copies.
// Written before the combine signal of `round`; valid for that round only.
struct EpHandle::PullSource {
  // (2 was "in the op buffers": read in place no longer, as a peer's next dispatch rewrites them.)
  enum Weights : uint64_t { kNone = 0, kArena = 1, kStaged = 3 };
  uint64_t round = 0;
  uint64_t input_offset = 0;  // rows: arena offset of row 0
  uint64_t rows = 0;          // rows of the input (the holder's received tokens)
  uint64_t row_bytes = 0;
  uint64_t weights = kNone;     // where the weights are read
  uint64_t weights_offset = 0;  // arena offset (kArena)
  uint64_t arena_size = 0;
  char arena_handle[88] = {};  // SharedArena::handle(): how a peer maps the arena
};

}  // namespace mori::ep
