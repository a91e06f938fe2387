// SPDX-License-Identifier: MIT
// EpHandle: one PE's MoE dispatch/combine state on the host. It owns its symmetric
// buffers (allocated from the shmem runtime's heap, collectively) and runs the CPU
// kernels of every kernel type over the runtime:
//
//   IntraNode / IntraNodeLL  direct stores into peers' mapped buffers (shm), slot ranges
//                            reserved with one atomic per block and destination, release
//                            signals; combine pushes rows back (or pulls them, zero-copy).
//   InterNode                the same protocol on the runtime's RMA calls, one put per token
//                            and field (works over any transport: shm, tcp).
//   InterNodeV1LL            RMA with packed puts: one put per block, destination and field.
//   AsyncLL                  packed RMA, split into send and recv halves for overlap.
//   InterNodeV1              node-level dedup: one copy per destination node goes to the PE
//                            with the same local rank there, which forwards it inside its node;
//                            combine reduces inside the node first and sends one row back.
//
// Arguments are raw pointers (the Python layer passes tensors' data pointers).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "mori/ep/config.h"
#include "mori/ep/dtype.h"
#include "mori/core/thread_team.h"

namespace mori::shmem {
class Runtime;
}

namespace mori::ep {

struct LaunchParams {
  int block_num = -1;       // token blocks (CPU: work partitions; one slot atomic per block and destination)
  int warp_per_block = -1;  // GPU only; checked for sign
  int rdma_block_num = -1;  // GPU inter-node only; checked for sign
};

// A dispatch's layout as a routing handle keeps it (mori.ops.EpDispatchRoutingHandle): where this
// PE's tokens went, and where the rows this PE received came from. Pointers stay the caller's.
struct RoutingView {
  const int64_t* dest_map = nullptr;  // [cur_tokens * topk]: dest_pe * max_recv + slot, or -1
  int cur_tokens = 0;
  const int32_t* indices = nullptr;  // the routing it was made with, or null (then not compared)
  int32_t total_recv = 0;
  const int32_t* src_pos = nullptr;  // [total_recv] flat source positions
  // InterNodeV1 only: the nodes each token visited, and what this PE forwarded.
  const uint8_t* node_sent = nullptr;    // [cur_tokens * nodes]
  const int32_t* inbox_count = nullptr;  // [nodes] entries in this PE's inbox from each node
  const int32_t* inbox_meta = nullptr;   // [nodes * max_inp][2]: (source token, local-rank mask)
};

struct DispatchArgs {
  const void* input = nullptr;  // [num_tokens, hidden] of dtype
  DataType dtype = DataType::kBFloat16;
  int num_tokens = 0;
  int hidden = 0;
  const float* weights = nullptr;    // [num_tokens, topk] or null
  const void* scales = nullptr;      // [num_tokens, scale_dim] of scale_type_size bytes, or null
  const int32_t* indices = nullptr;  // [num_tokens, topk] global expert ids, -1 = none
  LaunchParams launch;
  const int64_t* replay_dest_map = nullptr;  // IntraNode, InterNodeV1: place the rows where this layout says
  // InterNodeV1 replay: the handle's forwarding layout, int32 [nodes] inbox counts, then
  // [nodes * max_inp][2] inbox entries (source token, local-rank mask), then
  // [nodes * max_inp * pes_per_node] the slot each entry took on each PE of this node, or -1.
  const int32_t* replay_forward = nullptr;
};

// Pointers into this PE's symmetric buffers; rows are dense with the call's row size.
struct DispatchResult {
  void* tokens;         // [max_recv, hidden]
  float* weights;       // [max_recv, topk]
  void* scales;         // [max_recv, scale_dim] or null when scale_dim == 0
  int32_t* indices;     // [max_recv, topk]
  int32_t* total_recv;  // 1 element
};

struct CombineArgs {
  const void* input = nullptr;  // [num_rows, hidden] rows aligned with the dispatch output
  DataType dtype = DataType::kBFloat16;
  int num_rows = 0;
  int hidden = 0;
  const float* weights = nullptr;    // [num_rows, topk] or null
  const int32_t* indices = nullptr;  // this rank's original routing [num_tokens, topk]
  int num_tokens = 0;
  int use_external_inp_buf = -1;  // -1: config; 0: zero-copy (pull); 1: external (push)
  LaunchParams launch;
  const RoutingView* routing = nullptr;  // combine that dispatch's layout instead of the last one's
};

struct CombineResult {
  void* tokens;    // [max_inp, hidden] of the input dtype
  float* weights;  // [max_inp, topk], or null when no weights were given
};

class EpHandle {
 public:
  // Collective over all PEs of the shmem runtime (allocates symmetric buffers).
  explicit EpHandle(const EpConfig& cfg);
  ~EpHandle();
  EpHandle(const EpHandle&) = delete;
  EpHandle& operator=(const EpHandle&) = delete;

  const EpConfig& config() const { return cfg_; }
  int threads() const { return team_->size(); }

  // Full dispatch; for AsyncLL only the send half (finish with dispatch_recv()).
  DispatchResult dispatch(const DispatchArgs& a);
  void dispatch_recv();
  // Full combine; for AsyncLL only the send half (finish with combine_recv()).
  CombineResult combine(const CombineArgs& a);
  void combine_recv();

  int32_t total_recv() const;
  int cur_rank_num_token() const { return cur_tokens_; }
  // Flat source position of every received row (src_rank * max_send + src_token).
  const int32_t* src_token_pos() const;
  // Where the last dispatch sent this PE's tokens ([cur_rank_num_token * topk], see RoutingView).
  const int64_t* dest_map() const { return dest_map_.data(); }
  // InterNodeV1: the last dispatch's node_sent / inbox_count / inbox entries (see RoutingView).
  const uint8_t* node_sent() const { return node_sent_.data(); }
  const int32_t* inbox_count() const { return inbox_count_.data(); }
  const int32_t* inbox_meta() const;
  // InterNodeV1: the slot each inbox entry took on each PE of this node ([nodes * max_inp *
  // pes_per_node], -1 = not forwarded there), what a replay of the dispatch needs.
  const int32_t* forward_slots() const { return fwd_slot_.data(); }
  // The symmetric buffer zero-copy combine reads from: max_recv rows of up to token_bytes each.
  void* registered_combine_input() const;
  size_t registered_combine_input_bytes() const;
  // Bytes that crossed to other PEs in the last dispatch / combine (for link-efficiency figures).
  uint64_t last_dispatch_remote_bytes() const { return disp_remote_bytes_; }
  uint64_t last_combine_remote_bytes() const { return comb_remote_bytes_; }
  // Peers whose rows the last combine summed in place from their shared tensor arena.
  int last_combine_in_place_peers() const {
    int n = 0;
    for (const char* p : pulled_rows_) n += p != nullptr;
    return n;
  }
  // Where this PE's published combine input (what peers read before summing its rows in place)
  // and its combine signals lie in the op's symmetric allocation, and the record's fields (byte
  // offsets): the surface a peer that lies attacks, described for tests of the reader's checks.
  struct PublishedLayout {
    char* base = nullptr;
    size_t bytes = 0, pull_source = 0, pull_source_bytes = 0, combine_signals = 0;
    std::vector<std::pair<const char*, size_t>> fields;
  };
  PublishedLayout published_layout() const;

 private:
  struct Layout;
  struct PullSource;
  enum class Mover { kDirect, kPutPerToken, kPutPacked };

  void allocate();
  void release() noexcept;
  int choose_blocks(int requested, int items, bool rma) const;
  void check_launch(const LaunchParams& p, const char* caller) const;
  void validate_dispatch(const DispatchArgs& a) const;
  void validate_combine(const CombineArgs& a, bool external, const RoutingView& layout) const;
  void check_replay(const DispatchArgs& a) const;

  void dispatch_send_flat(const DispatchArgs& a);
  void dispatch_replay_flat(const DispatchArgs& a);
  void publish_dispatch_counts(uint64_t round, int blocks, const std::vector<uint8_t>& overflow, uint64_t row_bytes);
  void dispatch_recv_flat();
  void combine_send_flat(const CombineArgs& a, bool external);
  void combine_recv_flat();
  void dispatch_v1(const DispatchArgs& a);
  void combine_v1(const CombineArgs& a, bool external);
  void reduce_own_tokens(bool pull);
  // External combine input in this PE's shared tensor arena: publish it for the sources.
  bool publish_pull_source(const CombineArgs& a, size_t row, size_t k4, int total);
  // Which holders published their input for this round (pulled_rows_, pulled_w_), each record
  // checked against what this process mapped; a lie is a RemoteError naming the PE and field.
  void find_pull_sources();
  // After the sum: tell every holder read in place that I am done; wait for my own readers.
  void finish_pulls();

  // Waits until every PE in `from` has set its 64-bit word in `sig` to a value whose
  // high 32 bits equal `round` (dispatch counts) or, with `at_least`, to >= round.
  void wait_signals(const uint64_t* sig, const std::vector<int>& from, uint64_t round, bool at_least,
                    const char* caller);
  void signal(int pe, uint64_t* local_word, uint64_t value);
  uint64_t fetch_add(int pe, uint64_t* local_word, uint64_t add);
  // Writes n bytes at symmetric offset `off` of `pe`'s buffers (`stream`: a direct copy
  // bypasses the caches; the caller fences, see stream_copy.h).
  void write(int pe, size_t off, const void* src, size_t n, bool direct_ok, bool stream = false);
  void read(int pe, size_t off, void* dst, size_t n);
  // Maps [off, off + bytes) of `pe`'s buffers into this process's page tables in one call
  // (MADV_POPULATE_WRITE) before copies touch it: rows a PE reaches for the first time would
  // otherwise fault page by page, over the first several calls (slots move between calls).
  // `field` names the buffer whose populated prefix is tracked; cheap once the prefix is mapped.
  enum Field { kDispTok, kDispW, kDispIdx, kDispScale, kDispSrc, kStage, kStageW, kFieldCount };
  void populate(Field field, int pe, size_t off, size_t bytes);
  char* peer(int pe) const { return peer_base_[pe]; }
  template <typename T>
  T* at(size_t off) const {
    return reinterpret_cast<T*>(base_ + off);
  }

  EpConfig cfg_;
  shmem::Runtime* rt_;
  std::unique_ptr<Layout> lay_;
  char* base_ = nullptr;
  std::vector<char*> peer_base_;  // each PE's allocation mapped here, or null
  std::vector<int> all_pes_, node_pes_;
  std::unique_ptr<ThreadTeam> team_;
  Mover mover_ = Mover::kDirect;
  bool oversubscribed_ = false;                       // more PEs x threads on this host than hardware threads
  std::unique_ptr<std::atomic<size_t>[]> populated_;  // [kFieldCount * world]: bytes mapped
  std::mutex populate_mu_;
  std::atomic<bool> populate_ok_{true};  // false where the kernel lacks MADV_POPULATE_WRITE
  int blockwise_scale_dim_ = 0;          // blockwise combine: scales per row (read when the op is built)

  // State of the last dispatch (what combine needs).
  uint64_t disp_round_ = 0, comb_round_ = 0;
  int cur_tokens_ = 0;
  bool dispatch_pending_ = false, combine_pending_ = false;
  bool dispatch_done_ = false;
  std::vector<int64_t> dest_map_;      // [max_inp * topk]: dest_pe * max_recv + slot, or -1
  std::vector<int32_t> last_indices_;  // the routing of the last dispatch (#475 check)
  std::vector<uint8_t> node_sent_;     // V1: [max_inp * nodes] token went to that remote node
  std::vector<int32_t> inbox_count_;   // V1: tokens in my inbox from each node
  std::vector<int32_t> fwd_slot_;      // V1: [nodes * max_inp * local]: slot on local PE, or -1
  std::vector<uint64_t> part_count_, part_base_;
  std::vector<int32_t> sent_to_;  // tokens this PE sent to each PE in the current dispatch
  bool overflow_sent_ = false;
  int64_t last_row_bytes_ = 0;
  // Two dispatches (or two combines) in a row, as with routing handles: peers write this PE's
  // buffers of that phase, so the second one starts with a barrier (every PE is done with the
  // first one's outputs). Alternating dispatch/combine needs none: each phase waits for the other.
  enum class Phase { kNone, kDispatch, kCombine };
  Phase last_phase_ = Phase::kNone;
  void enter_phase(Phase p);
  // The layout the current combine uses (the last dispatch's, or a routing handle's).
  RoutingView comb_layout_;
  // Combine parameters carried from the send half to the recv half.
  DataType comb_dtype_ = DataType::kBFloat16;
  DataType comb_wire_ = DataType::kBFloat16;
  int comb_hidden_ = 0;
  bool comb_weights_ = false, comb_pull_ = false;
  // This PE's own rows are summed straight from the combine input (not staged): flat kernel
  // types whose combine sends and sums in one call, rows not cast.
  bool comb_own_direct_ = false, comb_own_w_direct_ = false;
  const char* comb_input_ = nullptr;
  const float* comb_input_w_ = nullptr;
  // Rows (and weights) of holders whose input is read in place this round, else null.
  std::vector<const char*> pulled_rows_;
  std::vector<const float*> pulled_w_;
  bool comb_published_ = false;  // my input is read in place this round: wait for the readers
  uint64_t disp_remote_bytes_ = 0, comb_remote_bytes_ = 0;
};

}  // namespace mori::ep
