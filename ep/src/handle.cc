// SPDX-License-Identifier: MIT
// EpHandle: buffers, validation, signalling, and the flat (non-node-dedup) protocol that
// IntraNode, IntraNodeLL, InterNode, InterNodeV1LL and AsyncLL share.
//
// Dispatch, round r (every PE calls it; r counts dispatches):
//   1. route: each (token, k) gets its destination PE; a PE already hit by an earlier k of
//      the same token is skipped, so a token goes once to each destination PE.
//   2. reserve: each token block does one fetch-add per destination on that PE's slot
//      counter (counter[r % 2]) and gets a contiguous range of receive rows.
//   3. copy: payload, weights, indices, scales and the flat source position go into the
//      destination's rows (direct stores, or RMA puts).
//   4. signal: after the copies are complete, a release store of (r << 32 | count) into
//      the destination's signal word for this PE (parity r % 2).
//   5. receive: wait for every PE's signal of round r, sum the counts, reset counter[r % 2]
//      (nobody touches it again before round r + 2, which needs my round r + 1 signal).
// Combine, round c: every received row goes back to its source (push) into the slot
// (my_pe, token) of the source's staging buffer, or stays in my registered buffer for the
// source to read (pull, zero-copy); then a signal with c; then each PE sums, per own
// token, the rows of its unique destination PEs in fp32.
#include "mori/ep/handle.h"

#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <thread>

#include "mori/core/env.h"
#include "mori/core/log.h"
#include "mori/core/shared_arena.h"
#include "mori/core/status.h"
#include "mori/ep/blockwise.h"
#include "mori/ep/stream_copy.h"
#include "mori/shmem/runtime.h"
#include "src/layout.h"

namespace mori::ep {

using shmem::Runtime;

namespace {
constexpr uint64_t kOverflowFlag = uint64_t{1} << 31;
constexpr uint64_t kCountMask = kOverflowFlag - 1;

size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

std::pair<int, int> block_range(int items, int blocks, int b) {
  int64_t lo = static_cast<int64_t>(items) * b / blocks, hi = static_cast<int64_t>(items) * (b + 1) / blocks;
  return {static_cast<int>(lo), static_cast<int>(hi)};
}
}  // namespace

// ---------------------------------------------------------------- lifecycle

EpHandle::EpHandle(const EpConfig& cfg) : cfg_(cfg), rt_(&Runtime::get("EpDispatchCombineOp")) {
  cfg_.validate();
  if (cfg_.blockwise()) blockwise_scale_dim_ = blockwise_scale_dim();
  MORI_CHECK_ARG(cfg_.rank == rt_->my_pe() && cfg_.world_size == rt_->n_pes(),
                 "EpDispatchCombineConfig(rank=%d, world_size=%d) does not match the shmem job (PE %d of %d): the EP "
                 "group is the shmem world",
                 cfg_.rank, cfg_.world_size, rt_->my_pe(), rt_->n_pes());
  switch (cfg_.kernel_type) {
    case KernelType::kIntraNode:
    case KernelType::kIntraNodeLL: mover_ = Mover::kDirect; break;
    case KernelType::kInterNode: mover_ = Mover::kPutPerToken; break;
    case KernelType::kInterNodeV1LL:
    case KernelType::kAsyncLL: mover_ = Mover::kPutPacked; break;
    case KernelType::kInterNodeV1: mover_ = Mover::kDirect; break;  // inside a node; inboxes use puts
    default:
      raise(Status::kInvalidArgument, "unknown EpDispatchCombineKernelType %d", static_cast<int>(cfg_.kernel_type));
  }
  int threads = cfg_.num_threads;
  if (threads <= 0) threads = static_cast<int>(env::get().copy_threads);
  if (threads <= 0) {
    int hw = static_cast<int>(std::thread::hardware_concurrency());
    int local = std::max(1, rt_->topology().local_size());
    threads = std::clamp(hw / local, 1, 8);
  }
  team_ = std::make_unique<ThreadTeam>(threads);
  oversubscribed_ = rt_->topology().local_size() * threads > static_cast<int>(std::thread::hardware_concurrency());
  for (int pe = 0; pe < cfg_.world_size; ++pe) all_pes_.push_back(pe);
  int g = cfg_.pes_per_node(), node = cfg_.rank / g;
  for (int l = 0; l < g; ++l) node_pes_.push_back(node * g + l);

  allocate();
  if (mover_ == Mover::kDirect && cfg_.kernel_type != KernelType::kInterNodeV1) {
    for (int pe = 0; pe < cfg_.world_size; ++pe)
      if (!peer_base_[pe]) {
        release();
        raise(Status::kUnavailable,
              "EpDispatchCombineKernelType.%s needs every PE's memory mapped on this PE, but PE %d is reached over "
              "the %s transport (another host?): use InterNodeV1, InterNodeV1LL, InterNode or AsyncLL",
              kernel_type_name(cfg_.kernel_type), pe, rt_->transport_name(pe));
      }
  }
  const int64_t max_inp = cfg_.max_num_inp_token_per_rank, k = cfg_.num_experts_per_token;
  dest_map_.assign(static_cast<size_t>(max_inp * k), -1);
  last_indices_.reserve(static_cast<size_t>(max_inp * k));
  sent_to_.assign(cfg_.world_size, 0);
  if (cfg_.kernel_type == KernelType::kInterNodeV1) {
    node_sent_.assign(static_cast<size_t>(max_inp * cfg_.num_nodes()), 0);
    inbox_count_.assign(cfg_.num_nodes(), 0);
    fwd_slot_.assign(static_cast<size_t>(max_inp) * cfg_.num_nodes() * cfg_.pes_per_node(), -1);
  }
}

EpHandle::~EpHandle() { release(); }

void EpHandle::allocate() {
  Layout l;
  const int64_t world = cfg_.world_size, max_inp = cfg_.max_num_inp_token_per_rank, max_recv = cfg_.max_recv();
  const size_t tok = cfg_.token_bytes(), k4 = static_cast<size_t>(cfg_.num_experts_per_token) * 4;
  const size_t sc = cfg_.scale_bytes();
  const int64_t nodes = cfg_.num_nodes(), g = cfg_.pes_per_node();
  size_t off = 0;
  auto take = [&](size_t bytes, size_t align) {
    off = align_up(off, align);
    size_t at = off;
    off += bytes;
    return at;
  };
  l.counter = take(16, 64);
  l.total = take(4, 64);
  l.disp_sig = take(2 * world * 8, 64);
  l.comb_sig = take(world * 8, 64);
  l.inbox_sig = take(2 * nodes * 8, 64);
  l.node_comb_sig = take(nodes * 8, 64);
  l.comb_pull = take(sizeof(PullSource), 64);
  l.comb_done = take(world * 8, 64);
  const size_t control_end = off;
  // Big buffers start on pages: only the rows a run touches ever get memory.
  l.disp_tok = take(max_recv * tok, 4096);
  l.disp_w = take(max_recv * k4, 4096);
  l.disp_idx = take(max_recv * k4, 4096);
  l.disp_scale = take(max_recv * sc, 4096);
  l.disp_src = take(max_recv * 4, 4096);
  l.comb_inp = take(max_recv * tok, 4096);
  l.comb_inp_w = take(max_recv * k4, 4096);
  // Blockwise rows (codes + scales) can outgrow a token row when hidden is small.
  const bool fp4 = cfg_.quant_type == QuantType::kFp4Blockwise;
  const size_t stage_row =
      cfg_.blockwise() ? std::max(tok, blockwise_layout(fp4, cfg_.hidden_dim, blockwise_scale_dim_).row_bytes()) : tok;
  l.comb_stage = take(world * max_inp * stage_row, 4096);
  l.comb_stage_w = take(world * max_inp * k4, 4096);
  l.comb_out = take(max_inp * tok, 4096);
  l.comb_out_w = take(max_inp * k4, 4096);
  if (cfg_.kernel_type == KernelType::kInterNodeV1) {
    l.inbox_tok = take(nodes * max_inp * tok, 4096);
    l.inbox_w = take(nodes * max_inp * k4, 4096);
    l.inbox_idx = take(nodes * max_inp * k4, 4096);
    l.inbox_scale = take(nodes * max_inp * sc, 4096);
    l.inbox_meta = take(nodes * max_inp * 8, 4096);
    l.fwd_stage = take(nodes * max_inp * g * tok, 4096);
    l.fwd_stage_w = take(nodes * max_inp * g * k4, 4096);
  }
  l.bytes = align_up(off, 4096);
  lay_ = std::make_unique<Layout>(l);
  // Collective; ends with a barrier.
  base_ = static_cast<char*>(rt_->malloc(l.bytes, 4096, "EpDispatchCombineOp"));
  // The heap may hand back memory of an earlier op: clear the control words, then make sure
  // nobody signals into them before everyone has cleared.
  std::memset(base_, 0, control_end);
  rt_->barrier_all();
  peer_base_.resize(cfg_.world_size);
  for (int pe = 0; pe < cfg_.world_size; ++pe) peer_base_[pe] = static_cast<char*>(rt_->ptr(base_, pe));
  populated_ = std::make_unique<std::atomic<size_t>[]>(static_cast<size_t>(kFieldCount) * cfg_.world_size);
  MORI_LOG(kInfo, "EP", "%s handle: %s of symmetric buffers, %d copy thread(s)", kernel_type_name(cfg_.kernel_type),
           human_bytes(l.bytes).c_str(), team_->size());
}

void EpHandle::release() noexcept {
  if (!base_) return;
  // Local bookkeeping only (no barrier): a destructor must not block on peers. Every PE
  // frees its handles in the same order, which keeps the heap symmetric.
  try {
    if (Runtime::initialized()) {
      Runtime& rt = Runtime::get("EpDispatchCombineOp.__del__");
      if (&rt == rt_ && rt.is_symmetric(base_)) rt.free(base_, "EpDispatchCombineOp.__del__", false);
    }
  } catch (...) {
  }
  base_ = nullptr;
}

// ---------------------------------------------------------------- accessors

int32_t EpHandle::total_recv() const { return __atomic_load_n(at<int32_t>(lay_->total), __ATOMIC_ACQUIRE); }
const int32_t* EpHandle::src_token_pos() const { return at<int32_t>(lay_->disp_src); }
void* EpHandle::registered_combine_input() const { return base_ + lay_->comb_inp; }
size_t EpHandle::registered_combine_input_bytes() const {
  return static_cast<size_t>(cfg_.max_recv()) * cfg_.token_bytes();
}

EpHandle::PublishedLayout EpHandle::published_layout() const {
  PublishedLayout p;
  p.base = base_;
  p.bytes = lay_->bytes;
  p.pull_source = lay_->comb_pull;
  p.pull_source_bytes = sizeof(PullSource);
  p.combine_signals = lay_->comb_sig;
  p.fields = {{"round", offsetof(PullSource, round)},
              {"input_offset", offsetof(PullSource, input_offset)},
              {"rows", offsetof(PullSource, rows)},
              {"row_bytes", offsetof(PullSource, row_bytes)},
              {"weights", offsetof(PullSource, weights)},
              {"weights_offset", offsetof(PullSource, weights_offset)},
              {"arena_size", offsetof(PullSource, arena_size)},
              {"arena_handle", offsetof(PullSource, arena_handle)}};
  return p;
}

// ---------------------------------------------------------------- helpers

int EpHandle::choose_blocks(int requested, int items, bool rma) const {
  int blocks = requested > 0 ? requested : cfg_.block_num;
  // A block per ~16 tokens at least, and no more than a few per thread: every block costs one
  // reservation per destination. Over RMA (a network round trip each), one block per thread.
  blocks = std::min(blocks, std::max(1, (items + 15) / 16));
  blocks = std::min(blocks, rma ? team_->size() : 4 * team_->size());
  return std::max(1, blocks);
}

void EpHandle::check_launch(const LaunchParams& p, const char* caller) const {
  MORI_CHECK_ARG(p.block_num == -1 || p.block_num > 0, "%s: block_num must be > 0 (or -1 for the config's), got %d",
                 caller, p.block_num);
  MORI_CHECK_ARG(p.warp_per_block == -1 || p.warp_per_block > 0,
                 "%s: warp_per_block must be > 0 (or -1 for the config's), got %d", caller, p.warp_per_block);
  MORI_CHECK_ARG(p.rdma_block_num >= -1, "%s: rdma_block_num must be >= 0 (or -1 for the config's), got %d", caller,
                 p.rdma_block_num);
}

void EpHandle::signal(int pe, uint64_t* local_word, uint64_t value) {
  rt_->atomic(local_word, AmoOp::kSet, 8, value, 0, pe, "EpDispatchCombineOp (signal)");
}

uint64_t EpHandle::fetch_add(int pe, uint64_t* local_word, uint64_t add) {
  if (mover_ == Mover::kDirect && peer_base_[pe]) {
    auto* w = reinterpret_cast<uint64_t*>(peer_base_[pe] + (reinterpret_cast<char*>(local_word) - base_));
    return std::atomic_ref<uint64_t>(*w).fetch_add(add, std::memory_order_relaxed);
  }
  return rt_->atomic(local_word, AmoOp::kFetchAdd, 8, add, 0, pe, "EpDispatchCombineOp (slot reservation)");
}

void EpHandle::write(int pe, size_t off, const void* src, size_t n, bool direct_ok, bool stream) {
  if (n == 0) return;
  if (direct_ok && peer_base_[pe]) {
    if (stream)
      copy_streaming(peer_base_[pe] + off, src, n);
    else
      std::memcpy(peer_base_[pe] + off, src, n);
    return;
  }
  // Non-blocking: sources stay valid until the quiet() that precedes the signal.
  rt_->put(base_ + off, src, n, pe, true);
}

void EpHandle::populate(Field field, int pe, size_t off, size_t bytes) {
  if (!peer_base_[pe] || !populate_ok_.load(std::memory_order_relaxed)) return;
  std::atomic<size_t>& done = populated_[static_cast<size_t>(field) * cfg_.world_size + pe];
  if (bytes <= done.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(populate_mu_);
  const size_t from = done.load(std::memory_order_relaxed);
  if (bytes <= from) return;
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14
#endif
  const uintptr_t page = 4096;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(peer_base_[pe] + off + from) & ~(page - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(peer_base_[pe] + off + bytes) + page - 1) & ~(page - 1);
  if (madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_POPULATE_WRITE) != 0) {
    // An older kernel: the copies fault the pages in as before.
    populate_ok_.store(false, std::memory_order_relaxed);
    MORI_LOG(kDebug, "EP", "MADV_POPULATE_WRITE unavailable (errno %d): pages fault in on first touch", errno);
    return;
  }
  done.store(bytes, std::memory_order_release);
}

void EpHandle::read(int pe, size_t off, void* dst, size_t n) {
  if (peer_base_[pe] && mover_ == Mover::kDirect) {
    std::memcpy(dst, peer_base_[pe] + off, n);
    return;
  }
  rt_->get(dst, base_ + off, n, pe, false);
}

void EpHandle::wait_signals(const uint64_t* sig, const std::vector<int>& from, uint64_t round, bool at_least,
                            const char* caller) {
  auto ready = [&] {
    for (int pe : from) {
      uint64_t v = __atomic_load_n(&sig[pe], __ATOMIC_ACQUIRE);
      if (at_least ? v < round : (v >> 32) != round) return false;
    }
    return true;
  };
  if (oversubscribed_) {
    // More PEs than cores on this host: a spinning waiter takes the core from the very peer it
    // waits for. Poll with sched_yield for a while (handing the core over), then let the
    // runtime sleep on its doorbell.
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    for (int i = 0;; ++i) {
      if (ready()) return;
      sched_yield();
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) break;
    }
  }
  rt_->wait_for(ready, caller);
}

// ---------------------------------------------------------------- validation

void EpHandle::validate_dispatch(const DispatchArgs& a) const {
  const char* fn = "EpDispatchCombineOp.dispatch";
  check_launch(a.launch, fn);
  MORI_CHECK_ARG(a.num_tokens >= 0 && a.num_tokens <= cfg_.max_num_inp_token_per_rank,
                 "%s: input has %d tokens but max_num_inp_token_per_rank is %d", fn, a.num_tokens,
                 cfg_.max_num_inp_token_per_rank);
  MORI_CHECK_ARG(a.hidden > 0 && a.hidden <= cfg_.hidden_dim, "%s: input hidden size %d must be in 1..hidden_dim=%d",
                 fn, a.hidden, cfg_.hidden_dim);
  MORI_CHECK_ARG(static_cast<int>(dtype_size(a.dtype)) <= cfg_.max_token_type_size,
                 "%s: input dtype %s is %d bytes wide, more than max_token_type_size=%d", fn, dtype_name(a.dtype),
                 static_cast<int>(dtype_size(a.dtype)), cfg_.max_token_type_size);
  if (a.num_tokens == 0) return;
  MORI_CHECK_ARG(a.input && a.indices, "%s: input and indices must not be null", fn);
  const int k = cfg_.num_experts_per_token, ne = cfg_.num_experts();
  for (int64_t i = 0, n = static_cast<int64_t>(a.num_tokens) * k; i < n; ++i) {
    int32_t e = a.indices[i];
    if (e < -1 || e >= ne)
      raise(Status::kInvalidArgument,
            "%s: indices[%lld, %lld] = %d is not an expert id: expected -1 (no expert) or 0..%d "
            "(world_size %d x num_experts_per_rank %d)",
            fn, static_cast<long long>(i / k), static_cast<long long>(i % k), e, ne - 1, cfg_.world_size,
            cfg_.num_experts_per_rank);
  }
}

void EpHandle::validate_combine(const CombineArgs& a, bool external, const RoutingView& layout) const {
  const char* fn = "EpDispatchCombineOp.combine";
  check_launch(a.launch, fn);
  MORI_CHECK_ARG(
      !a.routing || cfg_.kernel_type == KernelType::kIntraNode ||
          (cfg_.kernel_type == KernelType::kInterNodeV1 && (a.routing->node_sent || a.routing->cur_tokens == 0) &&
           a.routing->inbox_count && a.routing->inbox_meta),
      "%s: routing handles are implemented for IntraNode and InterNodeV1 here, not %s (or the handle "
      "lacks InterNodeV1's maps)",
      fn, kernel_type_name(cfg_.kernel_type));
  if (!a.routing && !dispatch_done_)
    raise(Status::kInvalidUsage, "%s: no completed dispatch to combine (call dispatch%s first)", fn,
          cfg_.kernel_type == KernelType::kAsyncLL ? " and dispatch_recv" : "");
  MORI_CHECK_ARG(a.hidden > 0 && a.hidden <= cfg_.hidden_dim, "%s: input hidden size %d must be in 1..hidden_dim=%d",
                 fn, a.hidden, cfg_.hidden_dim);
  MORI_CHECK_ARG(dtype_reducible(a.dtype), "%s: cannot sum %s tokens (use float32, bfloat16, float16 or fp8 e4m3)", fn,
                 dtype_name(a.dtype));
  MORI_CHECK_ARG(static_cast<int>(dtype_size(a.dtype)) <= cfg_.max_token_type_size,
                 "%s: input dtype %s is %d bytes wide, more than max_token_type_size=%d", fn, dtype_name(a.dtype),
                 static_cast<int>(dtype_size(a.dtype)), cfg_.max_token_type_size);
  if (cfg_.quant_type == QuantType::kFp8DirectCast) {
    MORI_CHECK_ARG(external,
                   "%s: quant_type='fp8_direct_cast' needs use_external_inp_buf=True (the zero-copy "
                   "buffer is read as is by peers)",
                   fn);
    MORI_CHECK_ARG(a.dtype == DataType::kBFloat16 || a.dtype == DataType::kFloat32 || a.dtype == DataType::kFloat16,
                   "%s: quant_type='fp8_direct_cast' casts bfloat16/float16/float32 input to fp8, got %s", fn,
                   dtype_name(a.dtype));
  }
  if (cfg_.blockwise()) {
    MORI_CHECK_ARG(external, "%s: blockwise combine quantizes the rows it pushes: it needs use_external_inp_buf=True",
                   fn);
    MORI_CHECK_ARG(a.dtype == DataType::kBFloat16 || a.dtype == DataType::kFloat32 || a.dtype == DataType::kFloat16,
                   "%s: blockwise combine quantizes bfloat16/float16/float32 input, got %s", fn, dtype_name(a.dtype));
  }
  const int32_t total = layout.total_recv;
  const bool in_registered = a.input == registered_combine_input();
  MORI_CHECK_ARG(in_registered || a.num_rows >= total,
                 "%s: input has %d rows but this rank received %d tokens in the last dispatch (pass the expert "
                 "outputs for every dispatched row)",
                 fn, a.num_rows, total);
  MORI_CHECK_ARG(a.num_rows <= cfg_.max_recv(), "%s: input has %d rows, more than max_num_tokens_to_recv()=%lld", fn,
                 a.num_rows, static_cast<long long>(cfg_.max_recv()));
  MORI_CHECK_ARG(total == 0 || a.input, "%s: input must not be null", fn);
  // MORI issue #475: combine needs this rank's own routing, not the dispatch output indices.
  const int k = cfg_.num_experts_per_token;
  if (a.num_tokens != layout.cur_tokens)
    raise(Status::kInvalidArgument,
          "%s: indices has %d rows but the %s had %d tokens: pass this rank's original "
          "[num_tokens, %d] routing (the indices given to dispatch), not dispatch's output indices (MORI issue #475)",
          fn, a.num_tokens, a.routing ? "routing handle's dispatch" : "last dispatch on this rank", layout.cur_tokens,
          k);
  if (layout.cur_tokens > 0 && layout.indices &&
      (!a.indices || std::memcmp(a.indices, layout.indices, static_cast<size_t>(layout.cur_tokens) * k * 4) != 0))
    raise(Status::kInvalidArgument,
          "%s: indices differ from the indices given to the %s: combine must receive this "
          "rank's original routing (MORI issue #475)",
          fn, a.routing ? "routing handle's dispatch" : "last dispatch on this rank");
}

void EpHandle::check_replay(const DispatchArgs& a) const {
  const char* fn = "EpDispatchCombineOp.dispatch(routing=...)";
  const bool v1 = cfg_.kernel_type == KernelType::kInterNodeV1;
  MORI_CHECK_ARG(cfg_.kernel_type == KernelType::kIntraNode || v1,
                 "%s: routing handles are implemented for "
                 "IntraNode and InterNodeV1 here, not %s",
                 fn, kernel_type_name(cfg_.kernel_type));
  MORI_CHECK_ARG(!v1 || a.replay_forward, "%s: InterNodeV1 replays need the handle's inter_node_disp_dest_tok_id_map",
                 fn);
  const int k = cfg_.num_experts_per_token, g = cfg_.pes_per_node(), my_node = cfg_.rank / g;
  const int64_t max_recv = cfg_.max_recv(), limit = static_cast<int64_t>(cfg_.world_size) * max_recv;
  for (int64_t i = 0, n = static_cast<int64_t>(a.num_tokens) * k; i < n; ++i) {
    const int64_t v = a.replay_dest_map[i];
    // InterNodeV1 keeps only the rows this PE put on its own node's PEs (the rest go through forwarders).
    const bool ok = v == -1 || (v >= 0 && v < limit && (!v1 || v / max_recv / g == my_node));
    if (!ok)
      raise(Status::kInvalidArgument,
            "%s: the routing's destination map entry [%lld, %lld] = %lld is not a slot "
            "(expected -1 or %s)",
            fn, static_cast<long long>(i / k), static_cast<long long>(i % k), static_cast<long long>(v),
            v1 ? "a slot on a PE of this node" : "0..world_size * max_num_tokens_to_recv - 1");
  }
  if (!v1) return;
  const int nodes = cfg_.num_nodes();
  const int64_t max_inp = cfg_.max_num_inp_token_per_rank;
  const int32_t* counts = a.replay_forward;
  const int32_t* slots = a.replay_forward + nodes + static_cast<size_t>(nodes) * max_inp * 2;
  for (int nd = 0; nd < nodes; ++nd) {
    if (counts[nd] < 0 || counts[nd] > max_inp || (nd == my_node && counts[nd] != 0))
      raise(Status::kInvalidArgument, "%s: the routing's inbox count from node %d is %d (expected 0..%lld)", fn, nd,
            counts[nd], static_cast<long long>(nd == my_node ? 0 : max_inp));
    for (int64_t j = 0; j < counts[nd]; ++j)
      for (int l = 0; l < g; ++l) {
        const int32_t v = slots[(nd * max_inp + j) * g + l];
        if (v < -1 || v >= max_recv)
          raise(Status::kInvalidArgument,
                "%s: the routing's forward slot (node %d, entry %lld, local rank %d) = %d "
                "is not a slot (expected -1 or 0..%lld)",
                fn, nd, static_cast<long long>(j), l, v, static_cast<long long>(max_recv - 1));
      }
  }
}

void EpHandle::enter_phase(Phase p) {
  if (last_phase_ == p) rt_->barrier_all();
  last_phase_ = p;
}

// ---------------------------------------------------------------- dispatch

DispatchResult EpHandle::dispatch(const DispatchArgs& a) {
  if (dispatch_pending_)
    raise(Status::kInvalidUsage, "EpDispatchCombineOp.dispatch: the previous dispatch_send has no dispatch_recv yet");
  if (combine_pending_)
    raise(Status::kInvalidUsage, "EpDispatchCombineOp.dispatch: the previous combine_send has no combine_recv yet");
  validate_dispatch(a);
  if (a.replay_dest_map) check_replay(a);
  enter_phase(Phase::kDispatch);
  cur_tokens_ = a.num_tokens;
  last_indices_.assign(a.indices, a.indices + static_cast<size_t>(a.num_tokens) * cfg_.num_experts_per_token);
  dispatch_done_ = false;
  last_row_bytes_ = static_cast<int64_t>(a.hidden) * dtype_size(a.dtype);
  if (cfg_.kernel_type == KernelType::kInterNodeV1) {
    dispatch_v1(a);
    dispatch_done_ = true;
  } else {
    if (a.replay_dest_map)
      dispatch_replay_flat(a);
    else
      dispatch_send_flat(a);
    dispatch_pending_ = true;
    if (cfg_.kernel_type != KernelType::kAsyncLL) dispatch_recv();
  }
  DispatchResult r;
  r.tokens = base_ + lay_->disp_tok;
  r.weights = at<float>(lay_->disp_w);
  r.scales = cfg_.scale_dim > 0 ? base_ + lay_->disp_scale : nullptr;
  r.indices = at<int32_t>(lay_->disp_idx);
  r.total_recv = at<int32_t>(lay_->total);
  return r;
}

void EpHandle::dispatch_recv() {
  if (!dispatch_pending_) {
    if (cfg_.kernel_type == KernelType::kAsyncLL)
      raise(Status::kInvalidUsage, "EpDispatchCombineOp.dispatch_recv: no dispatch_send in flight");
    return;
  }
  dispatch_pending_ = false;
  dispatch_recv_flat();
  dispatch_done_ = true;
}

void EpHandle::dispatch_send_flat(const DispatchArgs& a) {
  const int n = a.num_tokens, k = cfg_.num_experts_per_token, world = cfg_.world_size, me = cfg_.rank;
  const int epr = cfg_.num_experts_per_rank;
  const int64_t max_recv = cfg_.max_recv(), max_send = cfg_.max_send();
  const size_t row = static_cast<size_t>(a.hidden) * dtype_size(a.dtype), k4 = static_cast<size_t>(k) * 4;
  const size_t sc = (a.scales && cfg_.scale_dim > 0) ? cfg_.scale_bytes() : 0;
  const uint64_t round = ++disp_round_;
  const int par = static_cast<int>(round & 1);
  uint64_t* counter = at<uint64_t>(lay_->counter) + par;
  const char* in = static_cast<const char*>(a.input);
  const char* scales = static_cast<const char*>(a.scales);
  const int blocks = choose_blocks(a.launch.block_num, n, mover_ != Mover::kDirect);
  part_count_.assign(static_cast<size_t>(blocks) * world, 0);
  part_base_.assign(static_cast<size_t>(blocks) * world, 0);
  std::vector<uint8_t> overflow(static_cast<size_t>(blocks) * world, 0);
  std::vector<int32_t> src_pos(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t) src_pos[t] = static_cast<int32_t>(me * max_send + t);
  const bool direct = mover_ == Mover::kDirect;
  // A token goes to up to min(topk, world) PEs.
  const bool stream = direct && static_cast<size_t>(n) * row * std::min(k, world) >= kStreamMinBytes;
  auto populate_rows = [&](int d, uint64_t rows) {
    populate(kDispTok, d, lay_->disp_tok, rows * row);
    if (a.weights) populate(kDispW, d, lay_->disp_w, rows * k4);
    populate(kDispIdx, d, lay_->disp_idx, rows * k4);
    if (sc) populate(kDispScale, d, lay_->disp_scale, rows * sc);
    populate(kDispSrc, d, lay_->disp_src, rows * 4);
  };

  team_->run(blocks, [&](int b) {
    auto [lo, hi] = block_range(n, blocks, b);
    uint64_t* cnt = &part_count_[static_cast<size_t>(b) * world];
    // 1. route, dropping repeats of a destination PE within a token.
    for (int t = lo; t < hi; ++t) {
      int64_t* dm = &dest_map_[static_cast<size_t>(t) * k];
      const int32_t* idx = a.indices + static_cast<size_t>(t) * k;
      for (int j = 0; j < k; ++j) {
        // Until its slot is known, a destination d is held as -(d + 2); -1 means none.
        int d = idx[j] < 0 ? -1 : idx[j] / epr;
        for (int q = 0; q < j && d >= 0; ++q)
          if (dm[q] == -(d + 2)) d = -1;
        dm[j] = d >= 0 ? -(d + 2) : -1;
        if (d >= 0) ++cnt[d];
      }
    }
    // 2. one reservation per destination for this block.
    uint64_t* base = &part_base_[static_cast<size_t>(b) * world];
    uint8_t* ovf = &overflow[static_cast<size_t>(b) * world];
    for (int d = 0; d < world; ++d) {
      if (!cnt[d]) continue;
      base[d] = fetch_add(d, counter, cnt[d]);
      if (base[d] + cnt[d] > static_cast<uint64_t>(max_recv))
        ovf[d] = 1;
      else if (direct)
        populate_rows(d, base[d] + cnt[d]);
    }
    // 3. copy rows (slots are handed out in token order within the block's ranges).
    std::vector<uint64_t> next(base, base + world);
    if (mover_ == Mover::kPutPacked) {
      std::vector<char> pack;
      std::vector<int> toks;
      for (int d = 0; d < world; ++d) {
        if (!cnt[d] || ovf[d]) continue;
        toks.clear();
        for (int t = lo; t < hi; ++t)
          for (int j = 0; j < k; ++j)
            if (dest_map_[static_cast<size_t>(t) * k + j] == -(d + 2)) {
              dest_map_[static_cast<size_t>(t) * k + j] = d * max_recv + static_cast<int64_t>(next[d]++);
              toks.push_back(t);
            }
        const size_t m = toks.size();
        const size_t s0 = base[d];
        // One contiguous put per field: the block's rows for d are consecutive slots.
        auto put_field = [&](size_t dst_off, size_t width, auto fill) {
          if (!width) return;
          pack.resize(m * width);
          for (size_t i = 0; i < m; ++i) fill(pack.data() + i * width, toks[i]);
          rt_->put(base_ + dst_off + s0 * width, pack.data(), m * width, d, false);
        };
        put_field(lay_->disp_tok, row, [&](char* p, int t) { std::memcpy(p, in + t * row, row); });
        if (a.weights)
          put_field(lay_->disp_w, k4,
                    [&](char* p, int t) { std::memcpy(p, a.weights + static_cast<size_t>(t) * k, k4); });
        put_field(lay_->disp_idx, k4,
                  [&](char* p, int t) { std::memcpy(p, a.indices + static_cast<size_t>(t) * k, k4); });
        put_field(lay_->disp_scale, sc, [&](char* p, int t) { std::memcpy(p, scales + t * sc, sc); });
        put_field(lay_->disp_src, 4, [&](char* p, int t) { std::memcpy(p, &src_pos[t], 4); });
      }
      for (int t = lo; t < hi; ++t)  // rows that could not be placed
        for (int j = 0; j < k; ++j) {
          int64_t& v = dest_map_[static_cast<size_t>(t) * k + j];
          if (v < -1) v = -1;
        }
      return;
    }
    for (int t = lo; t < hi; ++t) {
      for (int j = 0; j < k; ++j) {
        int64_t& v = dest_map_[static_cast<size_t>(t) * k + j];
        if (v > -2) continue;
        int d = static_cast<int>(-v - 2);
        if (ovf[d]) {
          v = -1;
          continue;
        }
        uint64_t slot = next[d]++;
        v = d * max_recv + static_cast<int64_t>(slot);
        write(d, lay_->disp_tok + slot * row, in + t * row, row, direct, stream);
        if (a.weights) write(d, lay_->disp_w + slot * k4, a.weights + static_cast<size_t>(t) * k, k4, direct);
        write(d, lay_->disp_idx + slot * k4, a.indices + static_cast<size_t>(t) * k, k4, direct);
        if (sc) write(d, lay_->disp_scale + slot * sc, scales + t * sc, sc, direct);
        write(d, lay_->disp_src + slot * 4, &src_pos[t], 4, direct);
      }
    }
    if (stream) stream_fence();  // the rows are complete before the signal
  });
  if (mover_ != Mover::kDirect) rt_->quiet();

  publish_dispatch_counts(round, blocks, overflow, row + 2 * k4 + sc + 4);
}

void EpHandle::publish_dispatch_counts(uint64_t round, int blocks, const std::vector<uint8_t>& overflow,
                                       uint64_t row_bytes) {
  // Release: the rows are complete before the signal is visible.
  const int world = cfg_.world_size, me = cfg_.rank, par = static_cast<int>(round & 1);
  uint64_t* sig = at<uint64_t>(lay_->disp_sig) + static_cast<size_t>(par) * world;
  overflow_sent_ = false;
  uint64_t remote_rows = 0;
  for (int d = 0; d < world; ++d) {
    uint64_t c = 0;
    bool ovf = false;
    for (int b = 0; b < blocks; ++b) {
      size_t i = static_cast<size_t>(b) * world + d;
      if (overflow[i])
        ovf = true;
      else
        c += part_count_[i];
    }
    sent_to_[d] = static_cast<int32_t>(c);
    if (d != me) remote_rows += c;
    overflow_sent_ |= ovf;
    signal(d, &sig[me], (round << 32) | (ovf ? kOverflowFlag : 0) | c);
  }
  disp_remote_bytes_ = remote_rows * row_bytes;
}

// A routing handle's layout again: every row goes to the slot the handle names (no slot
// reservation), so the receivers see the same rows in the same places as in that dispatch.
void EpHandle::dispatch_replay_flat(const DispatchArgs& a) {
  const int n = a.num_tokens, k = cfg_.num_experts_per_token, world = cfg_.world_size, me = cfg_.rank;
  const int64_t max_recv = cfg_.max_recv(), max_send = cfg_.max_send();
  const size_t row = static_cast<size_t>(a.hidden) * dtype_size(a.dtype), k4 = static_cast<size_t>(k) * 4;
  const size_t sc = (a.scales && cfg_.scale_dim > 0) ? cfg_.scale_bytes() : 0;
  const uint64_t round = ++disp_round_;
  const char* in = static_cast<const char*>(a.input);
  const char* scales = static_cast<const char*>(a.scales);
  std::copy(a.replay_dest_map, a.replay_dest_map + static_cast<size_t>(n) * k, dest_map_.begin());
  const int blocks = choose_blocks(a.launch.block_num, n, mover_ != Mover::kDirect);
  part_count_.assign(static_cast<size_t>(blocks) * world, 0);
  const std::vector<uint8_t> overflow(static_cast<size_t>(blocks) * world, 0);
  const bool direct = mover_ == Mover::kDirect;
  const bool stream = direct && static_cast<size_t>(n) * row * std::min(k, world) >= kStreamMinBytes;
  team_->run(blocks, [&](int b) {
    auto [lo, hi] = block_range(n, blocks, b);
    uint64_t* cnt = &part_count_[static_cast<size_t>(b) * world];
    for (int t = lo; t < hi; ++t) {
      const int32_t src_pos = static_cast<int32_t>(me * max_send + t);
      for (int j = 0; j < k; ++j) {
        const int64_t v = dest_map_[static_cast<size_t>(t) * k + j];
        if (v < 0) continue;
        const int d = static_cast<int>(v / max_recv);
        const size_t slot = static_cast<size_t>(v % max_recv);
        ++cnt[d];
        write(d, lay_->disp_tok + slot * row, in + t * row, row, direct, stream);
        if (a.weights) write(d, lay_->disp_w + slot * k4, a.weights + static_cast<size_t>(t) * k, k4, direct);
        write(d, lay_->disp_idx + slot * k4, a.indices + static_cast<size_t>(t) * k, k4, direct);
        if (sc) write(d, lay_->disp_scale + slot * sc, scales + t * sc, sc, direct);
        write(d, lay_->disp_src + slot * 4, &src_pos, 4, direct);
      }
    }
    if (stream) stream_fence();
  });
  if (!direct) rt_->quiet();
  publish_dispatch_counts(round, blocks, overflow, row + 2 * k4 + sc + 4);
}

void EpHandle::dispatch_recv_flat() {
  const int world = cfg_.world_size;
  const uint64_t round = disp_round_;
  const int par = static_cast<int>(round & 1);
  const uint64_t* sig = at<uint64_t>(lay_->disp_sig) + static_cast<size_t>(par) * world;
  wait_signals(sig, all_pes_, round, false, "EpDispatchCombineOp.dispatch");
  uint64_t total = 0;
  int overflow_from = -1;
  for (int pe = 0; pe < world; ++pe) {
    uint64_t v = __atomic_load_n(&sig[pe], __ATOMIC_ACQUIRE);
    total += v & kCountMask;
    if ((v & kOverflowFlag) && overflow_from < 0) overflow_from = pe;
  }
  __atomic_store_n(at<uint64_t>(lay_->counter) + par, 0, __ATOMIC_RELEASE);
  __atomic_store_n(at<int32_t>(lay_->total), static_cast<int32_t>(total), __ATOMIC_RELEASE);
  if (overflow_from >= 0 || overflow_sent_) {
    dispatch_done_ = false;
    raise(Status::kInvalidArgument,
          "EpDispatchCombineOp.dispatch: %s more tokens than max_num_tokens_to_recv()=%lld rows "
          "(max_total_recv_tokens=%d caps each PE's receive buffer at %lld rows per source); the rows that did not "
          "fit were dropped. Raise max_total_recv_tokens or send fewer tokens",
          overflow_sent_ ? "a destination PE was sent" : "this PE was sent", static_cast<long long>(cfg_.max_recv()),
          cfg_.max_total_recv_tokens, static_cast<long long>(cfg_.max_recv_per_rank()));
  }
}

// ---------------------------------------------------------------- combine

CombineResult EpHandle::combine(const CombineArgs& a) {
  if (combine_pending_)
    raise(Status::kInvalidUsage, "EpDispatchCombineOp.combine: the previous combine_send has no combine_recv yet");
  if (dispatch_pending_)
    raise(Status::kInvalidUsage, "EpDispatchCombineOp.combine: call dispatch_recv() before combining");
  const bool external = a.use_external_inp_buf < 0 ? cfg_.use_external_inp_buf : a.use_external_inp_buf != 0;
  const bool v1 = cfg_.kernel_type == KernelType::kInterNodeV1;
  const RoutingView live{dest_map_.data(),
                         cur_tokens_,
                         last_indices_.data(),
                         total_recv(),
                         src_token_pos(),
                         v1 ? node_sent_.data() : nullptr,
                         v1 ? inbox_count_.data() : nullptr,
                         v1 ? inbox_meta() : nullptr};
  validate_combine(a, external, a.routing ? *a.routing : live);
  enter_phase(Phase::kCombine);
  comb_layout_ = a.routing ? *a.routing : live;
  comb_dtype_ = a.dtype;
  comb_wire_ = cfg_.quant_type == QuantType::kFp8DirectCast ? DataType::kFloat8E4M3FN : a.dtype;
  comb_hidden_ = a.hidden;
  comb_weights_ = a.weights != nullptr;
  comb_own_direct_ = comb_own_w_direct_ = false;
  pulled_rows_.assign(cfg_.world_size, nullptr);
  pulled_w_.assign(cfg_.world_size, nullptr);
  comb_published_ = false;
  if (cfg_.kernel_type == KernelType::kInterNodeV1) {
    combine_v1(a, external);
  } else {
    combine_send_flat(a, external);
    combine_pending_ = true;
    if (cfg_.kernel_type != KernelType::kAsyncLL) combine_recv();
  }
  CombineResult r;
  r.tokens = base_ + lay_->comb_out;
  r.weights = a.weights ? at<float>(lay_->comb_out_w) : nullptr;
  return r;
}

void EpHandle::combine_recv() {
  if (!combine_pending_) {
    if (cfg_.kernel_type == KernelType::kAsyncLL)
      raise(Status::kInvalidUsage, "EpDispatchCombineOp.combine_recv: no combine_send in flight");
    return;
  }
  combine_pending_ = false;
  combine_recv_flat();
}

void EpHandle::combine_send_flat(const CombineArgs& a, bool external) {
  const int k = cfg_.num_experts_per_token, me = cfg_.rank;
  const int64_t max_inp = cfg_.max_num_inp_token_per_rank, max_send = cfg_.max_send();
  const size_t row = static_cast<size_t>(a.hidden) * dtype_size(a.dtype), k4 = static_cast<size_t>(k) * 4;
  const bool blockwise = cfg_.blockwise();
  const BlockwiseLayout bl =
      blockwise_layout(cfg_.quant_type == QuantType::kFp4Blockwise, a.hidden, std::max(1, blockwise_scale_dim_));
  const size_t wire_row = blockwise ? bl.row_bytes() : static_cast<size_t>(a.hidden) * dtype_size(comb_wire_);
  const size_t stage_row = blockwise ? wire_row : row;  // stage rows keep the input row size otherwise
  const bool cast = comb_wire_ != a.dtype || blockwise;
  const int total = comb_layout_.total_recv;
  const uint64_t round = ++comb_round_;
  const int32_t* src = comb_layout_.src_pos;
  const char* in = static_cast<const char*>(a.input);
  comb_pull_ = !external;
  // The sum reads my own rows from the input where it runs in this same call (not AsyncLL,
  // whose combine_recv comes later), they are not cast, and the input is private memory: a view
  // of symmetric memory (the dispatch output itself, as with an identity expert) may be
  // rewritten by a peer's next dispatch once that peer has my combine signal.
  // The weights likewise (usually they are the dispatch's output view: then mine are staged).
  comb_own_direct_ = external && !cast && cfg_.kernel_type != KernelType::kAsyncLL && !rt_->is_symmetric(in);
  comb_own_w_direct_ = comb_own_direct_ && a.weights && !rt_->is_symmetric(a.weights);
  comb_input_ = in;
  comb_input_w_ = a.weights;
  uint64_t remote_rows = 0;
  // An input in my shared tensor arena is read in place by its sources (rows not cast).
  comb_published_ = external && !cast && publish_pull_source(a, row, k4, total);
  if (comb_published_) {
    const bool stage_w = a.weights && at<PullSource>(lay_->comb_pull)->weights == PullSource::kStaged;
    for (int i = 0; i < total; ++i) {
      const int s = static_cast<int>(src[i] / max_send);
      if (s != me) ++remote_rows;
      // Weights that stay private go to the source's staging rows (mine too, unless summed
      // straight from the input).
      if (a.weights && (s != me ? stage_w : !comb_own_w_direct_)) {
        const size_t slot = static_cast<size_t>(me * max_inp + src[i] % max_send);
        write(s, lay_->comb_stage_w + slot * k4, a.weights + static_cast<size_t>(i) * k, k4, true);
      }
    }
  } else if (external) {
    const bool direct = mover_ == Mover::kDirect;
    const bool stream = direct && !cast && static_cast<size_t>(total) * row >= kStreamMinBytes;
    const int blocks = choose_blocks(a.launch.block_num, total, !direct);
    std::vector<uint64_t> remote(static_cast<size_t>(blocks), 0);
    if (direct) {  // my staging rows on each source: (me, token) for the tokens it sent me
      std::vector<int64_t> rows(cfg_.world_size, 0);
      for (int i = 0; i < total; ++i) {
        int64_t& r = rows[src[i] / max_send];
        r = std::max(r, src[i] % max_send + 1);
      }
      const size_t mine = static_cast<size_t>(me * max_inp);
      for (int s = 0; s < cfg_.world_size; ++s) {
        if (!rows[s]) continue;
        populate(kStage, s, lay_->comb_stage + mine * stage_row, static_cast<size_t>(rows[s]) * stage_row);
        if (a.weights) populate(kStageW, s, lay_->comb_stage_w + mine * k4, static_cast<size_t>(rows[s]) * k4);
      }
    }
    team_->run(blocks, [&](int b) {
      auto [lo, hi] = block_range(total, blocks, b);
      std::vector<uint8_t> scratch(cast && !direct ? wire_row : 0);
      for (int i = lo; i < hi; ++i) {
        int s = static_cast<int>(src[i] / max_send);
        int64_t t = src[i] % max_send;
        size_t slot = static_cast<size_t>(me * max_inp + t);
        if (s == me && comb_own_direct_) {
          if (a.weights && !comb_own_w_direct_)
            std::memcpy(base_ + lay_->comb_stage_w + slot * k4, a.weights + static_cast<size_t>(i) * k, k4);
          continue;
        }
        size_t off = lay_->comb_stage + slot * stage_row;
        if (s != me) ++remote[b];
        if (cast) {
          uint8_t* dst = direct ? reinterpret_cast<uint8_t*>(peer(s) + off) : scratch.data();
          if (blockwise)
            quantize_row_blockwise(dst, in + i * row, a.dtype, bl);
          else
            cast_row_to_fp8(dst, in + i * row, a.dtype, a.hidden);
          if (!direct) rt_->put(base_ + off, scratch.data(), wire_row, s, false);
        } else {
          write(s, off, in + i * row, row, direct, stream);
        }
        if (a.weights) write(s, lay_->comb_stage_w + slot * k4, a.weights + static_cast<size_t>(i) * k, k4, direct);
      }
      if (stream) stream_fence();  // the rows are complete before the signal
    });
    if (!direct) rt_->quiet();
    for (auto r : remote) remote_rows += r;
  } else {
    // Zero-copy: peers read my registered buffer; copy the input there unless it already is.
    char* reg = base_ + lay_->comb_inp;
    if (in != reg && total > 0) std::memmove(reg, in, static_cast<size_t>(total) * row);
    float* regw = at<float>(lay_->comb_inp_w);
    if (a.weights && a.weights != regw && total > 0) std::memmove(regw, a.weights, static_cast<size_t>(total) * k4);
    for (int i = 0; i < total; ++i)
      if (src[i] / max_send != me) ++remote_rows;
  }
  comb_remote_bytes_ = remote_rows * (wire_row + (a.weights ? k4 : 0));
  uint64_t* sig = at<uint64_t>(lay_->comb_sig);
  for (int pe : all_pes_) signal(pe, &sig[me], round);
}

void EpHandle::combine_recv_flat() {
  wait_signals(at<uint64_t>(lay_->comb_sig), all_pes_, comb_round_, true, "EpDispatchCombineOp.combine");
  if (!comb_pull_) find_pull_sources();
  reduce_own_tokens(comb_pull_);
  finish_pulls();
}

bool EpHandle::publish_pull_source(const CombineArgs& a, size_t row, size_t k4, int total) {
  const SharedArena* arena = SharedArena::existing();
  // Sources read in place only through a mapping of this host (IntraNode kinds map every PE).
  if (!arena || total <= 0 || mover_ != Mover::kDirect || cfg_.kernel_type == KernelType::kInterNodeV1 ||
      !arena->contains(a.input, static_cast<size_t>(total) * row) ||
      arena->handle().size() >= sizeof(PullSource::arena_handle))
    return false;
  auto* ps = at<PullSource>(lay_->comb_pull);
  ps->input_offset = arena->offset_of(a.input);
  ps->rows = static_cast<uint64_t>(total);
  ps->row_bytes = row;
  ps->weights = PullSource::kNone;
  if (a.weights) {
    const size_t wbytes = static_cast<size_t>(total) * k4;
    const char* w = reinterpret_cast<const char*>(a.weights);
    if (arena->contains(w, wbytes)) {
      ps->weights = PullSource::kArena;
      ps->weights_offset = arena->offset_of(w);
    } else {
      // Private weights, and weights in the op buffers too (usually the dispatch's weights
      // output): k floats a row still go to the source. Op buffers are not read in place: a
      // third PE holding every combine signal starts its next dispatch, which rewrites them,
      // while sources may still be summing from this PE.
      ps->weights = PullSource::kStaged;
    }
  }
  ps->arena_size = arena->size();
  std::memset(ps->arena_handle, 0, sizeof(ps->arena_handle));
  std::memcpy(ps->arena_handle, arena->handle().data(), arena->handle().size());
  // Release: a source that sees my combine signal sees all of this.
  __atomic_store_n(&ps->round, comb_round_, __ATOMIC_RELEASE);
  return true;
}

namespace {

// The arena a peer's published handle names (`room` bytes, NUL-terminated), mapped; anything
// else is a RemoteError naming the PE and the field.
SharedArena::PeerMapping map_published_arena(int pe, const char* handle, size_t room) {
  const size_t len = strnlen(handle, room);
  if (len == 0 || len == room)
    raise(Status::kRemote, "EpDispatchCombineOp.combine: PE %d published a combine input whose arena_handle is %s", pe,
          len ? "not terminated" : "empty");
  std::string shown(handle, len);  // quoted in errors: the peer's bytes, printable only
  for (char& c : shown)
    if (c < 0x20 || c > 0x7e) c = '?';
  try {
    return SharedArena::map_peer(std::string(handle, len));
  } catch (const Error& e) {
    raise(Status::kRemote,
          "EpDispatchCombineOp.combine: PE %d published a combine input whose arena_handle (%s) names no shared "
          "tensor arena: %s",
          pe, shown.c_str(), e.what());
  }
}

}  // namespace

void EpHandle::find_pull_sources() {
  // The rows this PE reads on each holder: slots below its published row count.
  std::vector<int64_t> rows_read;
  const size_t esize = static_cast<size_t>(dtype_size(comb_dtype_));
  const size_t row = static_cast<size_t>(comb_hidden_) * esize;
  const uint64_t k4 = static_cast<uint64_t>(cfg_.num_experts_per_token) * 4;
  for (int r = 0; r < cfg_.world_size; ++r) {
    if (r == cfg_.rank || !peer_base_[r]) continue;
    const auto* published = reinterpret_cast<const PullSource*>(peer_base_[r] + lay_->comb_pull);
    if (__atomic_load_n(&published->round, __ATOMIC_ACQUIRE) != comb_round_) continue;
    // The peer may rewrite its record at any moment: every check and every use below reads
    // this one copy, and nothing is read through it before all of it is checked against
    // what this process really mapped.
    PullSource ps;
    std::memcpy(static_cast<void*>(&ps), published, sizeof(ps));
    if (rows_read.empty()) {
      rows_read.assign(cfg_.world_size, 0);
      const int64_t max_recv = cfg_.max_recv();
      const size_t entries = static_cast<size_t>(comb_layout_.cur_tokens) * cfg_.num_experts_per_token;
      for (size_t i = 0; i < entries; ++i) {
        const int64_t v = comb_layout_.dest_map[i];
        if (v >= 0) rows_read[v / max_recv] = std::max(rows_read[v / max_recv], v % max_recv + 1);
      }
    }
    const SharedArena::PeerMapping arena = map_published_arena(r, ps.arena_handle, sizeof(ps.arena_handle));
    auto refuse = [&](const char* field, const std::string& why) {
      raise(Status::kRemote, "EpDispatchCombineOp.combine: PE %d published a combine input whose %s %s", r, field,
            why.c_str());
    };
    using ull = unsigned long long;
    if (ps.arena_size != arena.size)
      refuse("arena_size", format("(%llu bytes) is not the size of the arena it names (%zu bytes)",
                                  static_cast<ull>(ps.arena_size), arena.size));
    if (ps.row_bytes != row)
      refuse("row_bytes", format("(%llu) differs from this PE's rows (%zu bytes): were the PEs given different "
                                 "hidden sizes or dtypes?",
                                 static_cast<ull>(ps.row_bytes), row));
    if (ps.input_offset > arena.size || ps.input_offset % esize)
      refuse("input_offset", format("(%llu) is not a row's start inside its %zu-byte arena",
                                    static_cast<ull>(ps.input_offset), arena.size));
    if (ps.rows > (arena.size - ps.input_offset) / row)
      refuse("rows", format("(%llu rows of %zu bytes at input_offset %llu) run past its %zu-byte arena",
                            static_cast<ull>(ps.rows), row, static_cast<ull>(ps.input_offset), arena.size));
    if (ps.rows < static_cast<uint64_t>(rows_read[r]))
      refuse("rows", format("(%llu) are fewer than the %lld rows this PE sent it", static_cast<ull>(ps.rows),
                            static_cast<long long>(rows_read[r])));
    // Where its weights lie: in its arena, staged to each source, or not at all.
    size_t w_room = 0;
    if (ps.weights == PullSource::kArena)
      w_room = arena.size;
    else if (ps.weights != PullSource::kNone && ps.weights != PullSource::kStaged)
      refuse("weights", format("(%llu) is none of the places weights can be", static_cast<ull>(ps.weights)));
    if (w_room && (ps.weights_offset > w_room || ps.weights_offset % 4 || ps.rows > (w_room - ps.weights_offset) / k4))
      refuse("weights_offset",
             format("(%llu) does not hold %llu rows of %llu-byte weights inside its %zu-byte arena",
                    static_cast<ull>(ps.weights_offset), static_cast<ull>(ps.rows), static_cast<ull>(k4), w_room));
    pulled_rows_[r] = arena.base + ps.input_offset;
    if (ps.weights == PullSource::kArena) pulled_w_[r] = reinterpret_cast<const float*>(arena.base + ps.weights_offset);
  }
}

void EpHandle::finish_pulls() {
  const int me = cfg_.rank;
  for (int r = 0; r < cfg_.world_size; ++r) {
    if (!pulled_rows_[r]) continue;
    signal(r, at<uint64_t>(lay_->comb_done) + me, comb_round_);
  }
  if (!comb_published_) return;
  // The caller may free or overwrite its input once combine returns: not before every source
  // has summed from it.
  std::vector<int> others;
  for (int pe : all_pes_)
    if (pe != me) others.push_back(pe);
  wait_signals(at<uint64_t>(lay_->comb_done), others, comb_round_, true,
               "EpDispatchCombineOp.combine (peers summing from this PE's shared input)");
}

void EpHandle::reduce_own_tokens(bool pull) {
  const int k = cfg_.num_experts_per_token, n = comb_layout_.cur_tokens, hidden = comb_hidden_;
  const int64_t* dest_map = comb_layout_.dest_map;
  const int64_t max_inp = cfg_.max_num_inp_token_per_rank, max_recv = cfg_.max_recv();
  const size_t esize = static_cast<size_t>(dtype_size(comb_dtype_));
  const size_t row = static_cast<size_t>(hidden) * esize, k4 = static_cast<size_t>(k) * 4;
  const bool v1 = cfg_.kernel_type == KernelType::kInterNodeV1;
  const int nodes = cfg_.num_nodes(), g = cfg_.pes_per_node(), lr = cfg_.rank % g;
  const int lanes = dtype_lanes(comb_dtype_);
  const bool weights = comb_weights_;
  const bool blockwise = cfg_.blockwise() && !pull;
  const BlockwiseLayout bl =
      blockwise_layout(cfg_.quant_type == QuantType::kFp4Blockwise, hidden, std::max(1, blockwise_scale_dim_));
  const size_t stage_row = blockwise ? bl.row_bytes() : row;
  const bool own_direct = comb_own_direct_ && !pull;
  char* out = base_ + lay_->comb_out;
  float* out_w = at<float>(lay_->comb_out_w);
  // The output is read by the caller after the whole combine: big ones bypass the caches.
  const bool stream = static_cast<size_t>(n) * row >= kStreamMinBytes;
  // The sum runs over column tiles, so the fp32 accumulator stays in L1 while every source row
  // streams through once. Blockwise rows are decoded whole (their scales are per block).
  const int tile = blockwise ? hidden : std::min(hidden, 1024);
  // A row that adds into the token: its first byte, its element type (blockwise: the codes).
  struct Source {
    const char* row;
    DataType type;
    bool blockwise;
  };
  const int max_sources = k + (v1 ? nodes : 0);
  const int blocks = choose_blocks(-1, n, false);
  team_->run(blocks, [&](int b) {
    auto [lo, hi] = block_range(n, blocks, b);
    std::vector<float> acc(static_cast<size_t>(tile) * lanes), wacc(static_cast<size_t>(k));
    std::vector<Source> srcs;
    std::vector<const float*> wsrcs;
    srcs.reserve(static_cast<size_t>(max_sources));
    wsrcs.reserve(static_cast<size_t>(max_sources));
    std::vector<char> pulled;  // rows read over RMA (pull without a mapping)
    std::vector<char> out_row(stream ? row : 0);
    std::vector<const uint16_t*> bf16_rows;
    for (int t = lo; t < hi; ++t) {
      srcs.clear();
      wsrcs.clear();
      size_t pulled_used = 0;
      for (int j = 0; j < k; ++j) {
        int64_t v = dest_map[static_cast<size_t>(t) * k + j];
        if (v < 0) continue;
        int r = static_cast<int>(v / max_recv);
        size_t slot = static_cast<size_t>(v % max_recv);
        if (pull) {
          if (peer_base_[r] && mover_ == Mover::kDirect) {
            srcs.push_back({peer_base_[r] + lay_->comb_inp + slot * row, comb_dtype_, false});
            wsrcs.push_back(reinterpret_cast<const float*>(peer_base_[r] + lay_->comb_inp_w + slot * k4));
          } else {
            pulled.resize(static_cast<size_t>(k) * (row + k4));
            char* dst = pulled.data() + pulled_used;
            pulled_used += row + k4;
            read(r, lay_->comb_inp + slot * row, dst, row);
            if (weights) read(r, lay_->comb_inp_w + slot * k4, dst + row, k4);
            srcs.push_back({dst, comb_dtype_, false});
            wsrcs.push_back(reinterpret_cast<const float*>(dst + row));
          }
        } else if (pulled_rows_[r]) {
          srcs.push_back({pulled_rows_[r] + slot * row, comb_dtype_, false});
          wsrcs.push_back(pulled_w_[r] ? pulled_w_[r] + slot * k
                                       : at<float>(lay_->comb_stage_w + static_cast<size_t>(r * max_inp + t) * k4));
        } else if (own_direct && r == cfg_.rank) {
          srcs.push_back({comb_input_ + slot * row, comb_dtype_, false});
          wsrcs.push_back(comb_own_w_direct_
                              ? comb_input_w_ + slot * k
                              : at<float>(lay_->comb_stage_w + static_cast<size_t>(r * max_inp + t) * k4));
        } else {
          size_t st = static_cast<size_t>(r * max_inp + t);
          srcs.push_back({base_ + lay_->comb_stage + st * stage_row, comb_wire_, blockwise});
          wsrcs.push_back(at<float>(lay_->comb_stage_w + st * k4));
        }
      }
      if (v1) {
        // Partial sums from the PEs that forwarded this token inside other nodes.
        for (int nd = 0; nd < nodes; ++nd) {
          if (!comb_layout_.node_sent[static_cast<size_t>(t) * nodes + nd]) continue;
          size_t st = static_cast<size_t>((nd * g + lr) * max_inp + t);
          srcs.push_back({base_ + lay_->comb_stage + st * row, comb_dtype_, false});
          wsrcs.push_back(at<float>(lay_->comb_stage_w + st * k4));
        }
      }
      char* dst_row = stream ? out_row.data() : out + static_cast<size_t>(t) * row;
      bool all_bf16 = comb_dtype_ == DataType::kBFloat16;
      for (const Source& src : srcs) all_bf16 &= src.type == DataType::kBFloat16 && !src.blockwise;
      if (all_bf16) {
        bf16_rows.clear();
        for (const Source& src : srcs) bf16_rows.push_back(reinterpret_cast<const uint16_t*>(src.row));
        sum_rows_bf16(reinterpret_cast<uint16_t*>(dst_row), bf16_rows.data(), static_cast<int>(bf16_rows.size()),
                      hidden);
      }
      for (int c0 = 0; c0 < hidden && !all_bf16; c0 += tile) {
        const int cn = std::min(tile, hidden - c0);
        std::fill(acc.begin(), acc.begin() + static_cast<size_t>(cn) * lanes, 0.0f);
        for (const Source& src : srcs) {
          if (src.blockwise)
            accumulate_row_blockwise(acc.data(), reinterpret_cast<const uint8_t*>(src.row), bl);
          else
            accumulate_row(acc.data(), src.row + static_cast<size_t>(c0) * dtype_size(src.type), src.type, cn);
        }
        store_row(dst_row + static_cast<size_t>(c0) * esize, acc.data(), comb_dtype_, cn);
      }
      if (stream) copy_streaming(out + static_cast<size_t>(t) * row, out_row.data(), row);
      if (weights) {
        std::fill(wacc.begin(), wacc.end(), 0.0f);
        for (const float* w : wsrcs)
          for (int q = 0; q < k; ++q) wacc[q] += w[q];
        std::memcpy(out_w + static_cast<size_t>(t) * k, wacc.data(), k4);
      }
    }
    if (stream) stream_fence();
  });
}

}  // namespace mori::ep
