// SPDX-License-Identifier: MIT
// CUDA IntraNode dispatch/combine kernels over NVLink peer pointers.
//
// Every buffer argument is an array of per-PE device pointers as this GPU addresses them
// (the PE's own buffer at index rank, peers' buffers mapped by P2P/IPC). The kernels know
// nothing about how the pointers were obtained: the caller gets them from the runtime's
// ptr() or from its own peer mappings. No CUDA header is needed to include this file.
//
// Protocol (the CPU handle's, on the GPU): one remote atomic per block and destination
// reserves a range of receive rows; warps copy rows with 16-byte stores; the last block to
// finish publishes (round << 32 | count) with a system-scope release store; the receive
// kernel waits with acquire loads. Rounds and counters live in device memory and reset
// themselves, so dispatch and combine can be captured in CUDA graphs and replayed.
#pragma once

#include <cstdint>

namespace mori::ep::cuda {

constexpr int kMaxPes = 8;

struct Peers {
  uint8_t* disp_tok[kMaxPes];
  float* disp_w[kMaxPes];
  int32_t* disp_idx[kMaxPes];
  uint8_t* disp_scale[kMaxPes];
  int32_t* disp_src[kMaxPes];
  unsigned long long* counter[kMaxPes];   // [2] per PE (by round parity)
  unsigned long long* disp_sig[kMaxPes];  // [2][world] per PE
  uint8_t* comb_stage[kMaxPes];           // [world * max_inp] rows per PE
  float* comb_stage_w[kMaxPes];
  unsigned long long* comb_sig[kMaxPes];  // [world] per PE
};

// Device memory of the launching PE only.
struct Local {
  int64_t* dest_map;          // [max_inp * topk]
  int32_t* total_recv;        // [1]
  unsigned long long* state;  // [0] dispatch round, [1] combine round, [2] blocks done, [3] flags, [4..) sent[world]
  uint8_t* comb_out;          // [max_inp] rows
  float* comb_out_w;          // [max_inp * topk]
};

struct Shape {
  int rank, world;
  int topk, experts_per_rank, max_inp;
  int64_t max_recv, max_send;
  int scale_bytes;  // per token (0: none)
};

// dtype codes of mori::ep::DType (float32 = 0, bfloat16 = 1) for combine.
void dispatch_send(const Shape& s, const Peers& p, const Local& l, const void* input, int row_bytes,
                   const float* weights, const void* scales, const int32_t* indices, int num_tokens, int blocks,
                   int warps, void* stream);
void dispatch_recv(const Shape& s, const Peers& p, const Local& l, void* stream);
void combine_send(const Shape& s, const Peers& p, const Local& l, const void* input, int dtype, int hidden,
                  const float* weights, int blocks, int warps, void* stream);
void combine_recv(const Shape& s, const Peers& p, const Local& l, int dtype, int hidden, bool weights, int num_tokens,
                  int blocks, int warps, void* stream);

// Bytes of state for Local::state.
inline int state_words(int world) { return 4 + world; }

}  // namespace mori::ep::cuda
