// SPDX-License-Identifier: MIT
// CUDA IntraNode dispatch/combine kernels over NVLink peer pointers.
//
// Every buffer argument is an array of per-PE device pointers as this GPU addresses them
// (the PE's own buffer at index rank, peers' buffers mapped by P2P/IPC). The kernels know
// nothing about how the pointers were obtained: the caller gets them from the runtime's
// ptr(). No CUDA header is needed to include this file.
//
// Dispatch (the CPU handle's protocol, on the GPU): one remote atomic per block and
// destination reserves a range of receive rows; warps copy rows with 16-byte stores; the
// last block to finish publishes (round << 32 | count) with a system-scope release store and
// (unless AsyncLL) waits for every peer's with acquire loads.
//
// Combine, fused (IntraNode, IntraNodeLL): pull. Each PE makes the rows other PEs need readable
// in its own symmetric memory (its registered input as is, else a copy or an fp8 cast into its
// staging, by dispatch slot), then flags every peer (comb_ready: round, and where the rows are);
// every warp then sums slices of its tokens, its own rows read from the input and the peers'
// loaded over NVLink, so the transfer and the sums overlap. Pipelined staging: a quarter of the warps per
// block stage rows in their source PE's token order (dispatch left a map, disp_inv) and flag each
// row to its source (comb_flag); the other warps pull in the same order, waiting per row, so the
// staging copy hides behind the pull instead of preceding it. Combine, AsyncLL: push. The send
// half writes every row into its source PE's staging at (sender, token) and sets that slot's
// 32-bit flag to the round; the receive half waits for the flags and sums. Either way a PE
// that is done reading tells each peer (comb_done), so no round overwrites unread rows.
//
// Rounds and counters live in device memory and only move forward, so dispatch and combine
// can be captured in CUDA graphs and replayed.
#pragma once

#include <cstdint>

namespace mori::ep::cuda {

constexpr int kMaxPes = 8;

// Where a PE's rows of a combine round can be read (the low bits of comb_ready): its staging,
// complete; its registered input; or its staging, each row flagged in comb_flag once staged.
enum ReadyMode : unsigned { kStagedAll = 0, kDirect = 1, kStagedPerRow = 2 };

struct Peers {
  uint8_t* disp_tok[kMaxPes];
  float* disp_w[kMaxPes];
  int32_t* disp_idx[kMaxPes];
  uint8_t* disp_scale[kMaxPes];
  int32_t* disp_src[kMaxPes];
  unsigned long long* counter[kMaxPes];     // [2] per PE (by round parity)
  unsigned long long* disp_sig[kMaxPes];    // [2][world] per PE
  uint8_t* comb_stage[kMaxPes];             // [world * max_inp] rows per PE, by (sender, token)
  float* comb_stage_w[kMaxPes];             // [world * max_inp * topk]
  unsigned int* comb_flag[kMaxPes];         // [world * max_inp]: round of the row that landed
  unsigned long long* comb_done[kMaxPes];   // [world]: last round PE q finished reading from here
  uint8_t* comb_in[kMaxPes];                // registered combine input (zero-copy), rows by dispatch slot
  unsigned long long* comb_ready[kMaxPes];  // [world]: PE q's round r rows: r << 2 | ReadyMode
  unsigned long long* disp_inv[kMaxPes];    // [world * max_inp]: PE q's token t landed here at slot:
                                            // (dispatch round << 32 | slot) at q * max_inp + t
};

// Device memory of the launching PE only.
struct Local {
  int64_t* dest_map;          // [max_inp * topk]
  int32_t* total_recv;        // [1]
  unsigned long long* state;  // see state_words
  uint8_t* comb_out;          // [max_inp] rows
  float* comb_out_w;          // [max_inp * topk]
};

struct Shape {
  int rank, world;
  int topk, experts_per_rank, max_inp;
  int64_t max_recv, max_send;
  int scale_bytes;  // per token (0: none)
};

// Which half of combine a launch runs: both at once (IntraNode, IntraNodeLL) or one
// (AsyncLL's combine_send / combine_recv).
enum class CombinePhase : int { kFused = 0, kSend = 1, kRecv = 2 };

struct CombineArgs {
  const void* input = nullptr;     // send side: this PE's expert outputs, rows aligned with its dispatch output
  const float* weights = nullptr;  // send side: [rows, topk] or null
  bool with_weights = false;       // receive side: sum weights too
  int dtype = 9;                   // mori::DataType code of input and output: float32, bfloat16 (9) or
                                   // float4_e2m1fn_x2 (summed in fp32, rounded back to e2m1)
  int hidden = 0;
  bool fp8 = false;        // quant_type fp8_direct_cast: rows cross NVLink as e4m3
  int block = 0;           // quant_type fp8_blockwise: values per scale block (a multiple of 8;
                           // bfloat16 input); staged rows are e4m3 codes, then one fp32 scale per
                           // block (amax / 448). 0: off
  bool fp4 = false;        // with `block`: quant_type fp4_blockwise, packed e2m1 codes (amax / 6)
  int num_tokens = 0;      // receive side: this PE's tokens of the last dispatch
  bool zero_copy = false;  // input is this PE's registered buffer (Peers::comb_in)
  bool pipelined = false;  // staged rows: flag each row as it is staged (else all, then one flag)
};

// `with_recv`: the last block also waits for every peer and publishes recv_num_token (IntraNode);
// without it dispatch_recv does (AsyncLL). `replay_dest_map` (device, [num_tokens * topk]): put
// every row in the slot this layout names instead of reserving slots (a routing handle's replay).
void dispatch_send(const Shape& s, const Peers& p, const Local& l, const void* input, int row_bytes,
                   const float* weights, const void* scales, const int32_t* indices, int num_tokens, int blocks,
                   int warps, bool with_recv, void* stream, const int64_t* replay_dest_map = nullptr);
void dispatch_recv(const Shape& s, const Peers& p, const Local& l, void* stream);
// `blocks` is capped so that every block of the fused kernel is resident at once (its
// receivers wait for peers' senders).
void combine(const Shape& s, const Peers& p, const Local& l, const CombineArgs& a, CombinePhase phase, int blocks,
             int warps, void* stream);

// Words of Local::state.
// [0] dispatch round, [1] combine round, [2] blocks done, [3] overflow flags, [4, 4 + world) rows
// sent per PE, [4 + world] blocks that staged (pull combine).
inline int state_words(int world) { return 5 + world; }

}  // namespace mori::ep::cuda
