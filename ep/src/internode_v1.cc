// SPDX-License-Identifier: MIT
// InterNodeV1: node-level dedup. PEs are grouped into nodes of pes_per_node() (gpu_per_node)
// consecutive ranks. A token bound for several PEs of another node crosses the network once,
// to the PE with my local rank on that node (its "rail" peer), which forwards it inside its
// node; combine runs the other way: the PEs of a node push their rows to the forwarder, which
// sums them and sends one partial row back.
//
// Dispatch, round r:
//   1. route: unique destination PEs per token; PEs of my node get the row directly, other
//      nodes get one inbox entry (row, weights, indices, scales, token id, local-rank mask).
//   2. inbox puts to each rail peer (packed, one put per field), direct rows inside my node.
//   3. signal the rail peers (inbox count of round r); forward every entry of my inbox to its
//      local destinations (one slot reservation per source node and destination).
//   4. signal my node's PEs with the rows I placed on them; receive from my node's PEs.
// A replay (routing handle) runs the same rounds without reserving slots: own-node rows go to the
// handle's dest map, forwarded rows to the slots the handle's forwarder took (each PE replays its
// own handle, so each forwarder knows its slots); the inbox it receives must be the handle's.
// Combine, round c:
//   1. each received row goes to its source if the source is in my node, else to the
//      forwarder's staging slot (source node, token, my local rank); signal my node.
//   2. forwarders sum the rows of each inbox token and put the partial row into the source's
//      staging slot (forwarder PE, token); signal the source.
//   3. each PE sums its own-node rows and the partial rows of every node the token visited.
#include <cstring>

#include "mori/core/status.h"
#include "mori/ep/handle.h"
#include "mori/shmem/runtime.h"
#include "src/layout.h"

namespace mori::ep {

namespace {
struct InboxMeta {
  int32_t token;  // token id on the source PE
  uint32_t mask;  // local ranks of this node that get the token
};
constexpr uint64_t kOverflowFlag = uint64_t{1} << 31;
constexpr uint64_t kCountMask = kOverflowFlag - 1;
static_assert(sizeof(InboxMeta) == 8, "RoutingView::inbox_meta holds (token, mask) int32 pairs");
}  // namespace

const int32_t* EpHandle::inbox_meta() const { return at<int32_t>(lay_->inbox_meta); }

void EpHandle::dispatch_v1(const DispatchArgs& a) {
  const int n = a.num_tokens, k = cfg_.num_experts_per_token, me = cfg_.rank, epr = cfg_.num_experts_per_rank;
  const int g = cfg_.pes_per_node(), nodes = cfg_.num_nodes(), my_node = me / g, lr = me % g;
  const int64_t max_recv = cfg_.max_recv(), max_send = cfg_.max_send(), max_inp = cfg_.max_num_inp_token_per_rank;
  const size_t row = static_cast<size_t>(a.hidden) * dtype_size(a.dtype), k4 = static_cast<size_t>(k) * 4;
  const size_t sc = (a.scales && cfg_.scale_dim > 0) ? cfg_.scale_bytes() : 0;
  const size_t sc_all = cfg_.scale_bytes();
  const char* in = static_cast<const char*>(a.input);
  const char* scales = static_cast<const char*>(a.scales);
  const uint64_t round = ++disp_round_;
  const int par = static_cast<int>(round & 1);
  uint64_t* counter = at<uint64_t>(lay_->counter) + par;
  uint64_t remote_bytes = 0;
  const bool replay = a.replay_dest_map != nullptr;
  const int32_t* replay_count = a.replay_forward;
  const InboxMeta* replay_meta = replay ? reinterpret_cast<const InboxMeta*>(a.replay_forward + nodes) : nullptr;
  const int32_t* replay_slot = replay ? a.replay_forward + nodes + static_cast<size_t>(nodes) * max_inp * 2 : nullptr;

  // 1. route.
  std::fill(node_sent_.begin(), node_sent_.begin() + static_cast<size_t>(n) * nodes, 0);
  std::vector<uint32_t> node_mask(static_cast<size_t>(n) * nodes, 0);
  std::vector<uint64_t> local_cnt(g, 0);
  std::vector<int> dests(k);
  for (int t = 0; t < n; ++t) {
    int64_t* dm = &dest_map_[static_cast<size_t>(t) * k];
    for (int j = 0; j < k; ++j) {
      int32_t e = a.indices[static_cast<size_t>(t) * k + j];
      int d = e < 0 ? -1 : e / epr;
      for (int q = 0; q < j && d >= 0; ++q)
        if (dests[q] == d) d = -1;
      dests[j] = d;
      dm[j] = -1;
      if (d < 0) continue;
      if (d / g == my_node) {
        dm[j] = -(d + 2);
        ++local_cnt[d % g];
        if (replay) {
          const int64_t v = a.replay_dest_map[static_cast<size_t>(t) * k + j];
          if (v >= 0 && v / max_recv != d)
            raise(Status::kInvalidArgument,
                  "EpDispatchCombineOp.dispatch(routing=...): the routing's destination "
                  "map sends token %d, expert %d to PE %lld, its indices to PE %d (a handle replays one routing)",
                  t, j, static_cast<long long>(v / max_recv), d);
          dm[j] = v;  // -1: the handle's dispatch dropped it (overflow)
        }
      } else {
        node_sent_[static_cast<size_t>(t) * nodes + d / g] = 1;
        node_mask[static_cast<size_t>(t) * nodes + d / g] |= 1u << (d % g);
      }
    }
  }

  // 2a. inbox entries for every other node's rail peer: packed, one put per field.
  std::vector<int32_t> inbox_sent(nodes, 0);
  {
    std::vector<char> pack;
    std::vector<int> toks;
    for (int nd = 0; nd < nodes; ++nd) {
      if (nd == my_node) continue;
      const int p = nd * g + lr;
      toks.clear();
      for (int t = 0; t < n; ++t)
        if (node_sent_[static_cast<size_t>(t) * nodes + nd]) toks.push_back(t);
      const size_t m = toks.size(), first = static_cast<size_t>(my_node) * max_inp;
      inbox_sent[nd] = static_cast<int32_t>(m);
      if (!m) continue;
      auto put_field = [&](size_t dst_off, size_t width, auto fill) {
        if (!width) return;
        pack.resize(m * width);
        for (size_t i = 0; i < m; ++i) fill(pack.data() + i * width, toks[i]);
        rt_->put(base_ + dst_off + first * width, pack.data(), m * width, p, false);
        remote_bytes += m * width;
      };
      put_field(lay_->inbox_tok, row, [&](char* q, int t) { std::memcpy(q, in + t * row, row); });
      if (a.weights)
        put_field(lay_->inbox_w, k4,
                  [&](char* q, int t) { std::memcpy(q, a.weights + static_cast<size_t>(t) * k, k4); });
      put_field(lay_->inbox_idx, k4,
                [&](char* q, int t) { std::memcpy(q, a.indices + static_cast<size_t>(t) * k, k4); });
      put_field(lay_->inbox_scale, sc, [&](char* q, int t) { std::memcpy(q, scales + t * sc, sc); });
      put_field(lay_->inbox_meta, sizeof(InboxMeta), [&](char* q, int t) {
        InboxMeta mt{t, node_mask[static_cast<size_t>(t) * nodes + nd]};
        std::memcpy(q, &mt, sizeof(mt));
      });
    }
  }

  // 2b. rows for the PEs of my node, straight into their receive buffers.
  std::vector<int32_t> src_pos(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t) src_pos[t] = static_cast<int32_t>(me * max_send + t);
  std::vector<uint64_t> next(g, 0);
  std::vector<uint8_t> ovf(g, 0);
  for (int l = 0; l < g && !replay; ++l) {
    if (!local_cnt[l]) continue;
    next[l] = fetch_add(my_node * g + l, counter, local_cnt[l]);
    if (next[l] + local_cnt[l] > static_cast<uint64_t>(max_recv)) ovf[l] = 1;
  }
  std::fill(sent_to_.begin(), sent_to_.end(), 0);
  for (int t = 0; t < n; ++t) {
    for (int j = 0; j < k; ++j) {
      int64_t& v = dest_map_[static_cast<size_t>(t) * k + j];
      int d;
      uint64_t slot;
      if (replay) {
        if (v < 0) continue;
        d = static_cast<int>(v / max_recv);
        slot = static_cast<uint64_t>(v % max_recv);
      } else {
        if (v > -2) continue;
        d = static_cast<int>(-v - 2);
        const int l = d % g;
        if (ovf[l]) {
          v = -1;
          continue;
        }
        slot = next[l]++;
        v = d * max_recv + static_cast<int64_t>(slot);
      }
      write(d, lay_->disp_tok + slot * row, in + t * row, row, true);
      if (a.weights) write(d, lay_->disp_w + slot * k4, a.weights + static_cast<size_t>(t) * k, k4, true);
      write(d, lay_->disp_idx + slot * k4, a.indices + static_cast<size_t>(t) * k, k4, true);
      if (sc) write(d, lay_->disp_scale + slot * sc, scales + t * sc, sc, true);
      write(d, lay_->disp_src + slot * 4, &src_pos[t], 4, true);
      ++sent_to_[d];
      if (d != me) remote_bytes += row + 2 * k4 + sc + 4;
    }
  }
  rt_->quiet();

  // 3. tell the rail peers how many inbox entries they got, then forward mine.
  uint64_t* inbox_sig = at<uint64_t>(lay_->inbox_sig) + static_cast<size_t>(par) * nodes;
  std::vector<int> other_nodes;
  for (int nd = 0; nd < nodes; ++nd)
    if (nd != my_node) {
      other_nodes.push_back(nd);
      signal(nd * g + lr, &inbox_sig[my_node], (round << 32) | static_cast<uint64_t>(inbox_sent[nd]));
    }
  wait_signals(inbox_sig, other_nodes, round, false, "EpDispatchCombineOp.dispatch (InterNodeV1 inbox)");
  const InboxMeta* meta = at<InboxMeta>(lay_->inbox_meta);
  int replay_mismatch = -1;  // a node whose inbox differs from the handle's (reported after the rounds)
  for (int nd : other_nodes) {
    const int m = static_cast<int>(__atomic_load_n(&inbox_sig[nd], __ATOMIC_ACQUIRE) & kCountMask);
    inbox_count_[nd] = m;
    const int src_pe = nd * g + lr;
    int32_t* fslot = &fwd_slot_[static_cast<size_t>(nd) * max_inp * g];
    if (replay) {
      bool same = m == replay_count[nd];
      for (int j = 0; j < m && same; ++j) {
        const InboxMeta got = meta[nd * max_inp + j], want = replay_meta[nd * max_inp + j];
        same = got.token == want.token && got.mask == want.mask;
      }
      if (!same) {
        // Forward nothing from that node (the rounds still complete, so no peer hangs).
        if (replay_mismatch < 0) replay_mismatch = nd;
        std::fill(fslot, fslot + static_cast<size_t>(m) * g, -1);
        continue;
      }
      std::copy(replay_slot + static_cast<size_t>(nd) * max_inp * g,
                replay_slot + (static_cast<size_t>(nd) * max_inp + m) * g, fslot);
    }
    std::vector<uint64_t> cnt(g, 0);
    for (int j = 0; j < m; ++j)
      for (int l = 0; l < g; ++l)
        if (meta[nd * max_inp + j].mask & (1u << l)) ++cnt[l];
    std::vector<uint64_t> fnext(g, 0);
    std::vector<uint8_t> fovf(g, 0);
    for (int l = 0; l < g && !replay; ++l) {
      if (!cnt[l]) continue;
      fnext[l] = fetch_add(my_node * g + l, counter, cnt[l]);
      if (fnext[l] + cnt[l] > static_cast<uint64_t>(max_recv)) fovf[l] = ovf[l] = 1;
    }
    std::vector<int32_t> pos(static_cast<size_t>(m));  // stays valid until the quiet below
    for (int j = 0; j < m; ++j) {
      const size_t e = static_cast<size_t>(nd) * max_inp + j;
      const InboxMeta mt = meta[e];
      pos[j] = static_cast<int32_t>(src_pe * max_send + mt.token);
      for (int l = 0; l < g; ++l) {
        int32_t& fs = fslot[j * g + l];
        if (!(mt.mask & (1u << l)) || fovf[l]) {
          if (!replay) fs = -1;
          continue;
        }
        if (replay && fs < 0) continue;  // the handle's dispatch dropped it (overflow)
        const int d = my_node * g + l;
        const uint64_t slot = replay ? static_cast<uint64_t>(fs) : fnext[l]++;
        fs = static_cast<int32_t>(slot);
        write(d, lay_->disp_tok + slot * row, base_ + lay_->inbox_tok + e * row, row, true);
        // Weights and scales are whatever the source PE put in the inbox (it may have sent
        // them even if this PE, with no tokens of its own, passed none).
        write(d, lay_->disp_w + slot * k4, base_ + lay_->inbox_w + e * k4, k4, true);
        write(d, lay_->disp_idx + slot * k4, base_ + lay_->inbox_idx + e * k4, k4, true);
        write(d, lay_->disp_scale + slot * sc_all, base_ + lay_->inbox_scale + e * sc_all, sc_all, true);
        // The row carries the original source position, not mine.
        write(d, lay_->disp_src + slot * 4, &pos[j], 4, true);
        ++sent_to_[d];
        if (d != me) remote_bytes += row + 2 * k4 + sc_all + 4;
      }
    }
    rt_->quiet();
  }

  // 4. publish counts to my node, then receive from it.
  uint64_t* sig = at<uint64_t>(lay_->disp_sig) + static_cast<size_t>(par) * cfg_.world_size;
  overflow_sent_ = false;
  for (int l = 0; l < g; ++l) {
    overflow_sent_ |= ovf[l] != 0;
    const int d = my_node * g + l;
    signal(d, &sig[me], (round << 32) | (ovf[l] ? kOverflowFlag : 0) | static_cast<uint64_t>(sent_to_[d]));
  }
  disp_remote_bytes_ = remote_bytes;
  wait_signals(sig, node_pes_, round, false, "EpDispatchCombineOp.dispatch");
  uint64_t total = 0;
  bool overflow_in = false;
  for (int pe : node_pes_) {
    uint64_t v = __atomic_load_n(&sig[pe], __ATOMIC_ACQUIRE);
    total += v & kCountMask;
    overflow_in |= (v & kOverflowFlag) != 0;
  }
  __atomic_store_n(counter, 0, __ATOMIC_RELEASE);
  __atomic_store_n(at<int32_t>(lay_->total), static_cast<int32_t>(total), __ATOMIC_RELEASE);
  if (replay_mismatch >= 0)
    raise(Status::kInvalidArgument,
          "EpDispatchCombineOp.dispatch(routing=...): the tokens forwarded from node %d differ from the routing "
          "handle's (every PE must replay the handle of the same dispatch); they were not delivered",
          replay_mismatch);
  if (overflow_in || overflow_sent_)
    raise(Status::kInvalidArgument,
          "EpDispatchCombineOp.dispatch: a PE was sent more tokens than max_num_tokens_to_recv()=%lld rows "
          "(max_total_recv_tokens=%d); the rows that did not fit were dropped",
          static_cast<long long>(max_recv), cfg_.max_total_recv_tokens);
}

void EpHandle::combine_v1(const CombineArgs& a, bool external) {
  (void)external;  // zero-copy or not, the rows are read from `input` (the registered buffer when zero-copy)
  const int k = cfg_.num_experts_per_token, me = cfg_.rank;
  const int g = cfg_.pes_per_node(), nodes = cfg_.num_nodes(), my_node = me / g, lr = me % g;
  const int64_t max_inp = cfg_.max_num_inp_token_per_rank, max_send = cfg_.max_send();
  const size_t row = static_cast<size_t>(a.hidden) * dtype_size(a.dtype), k4 = static_cast<size_t>(k) * 4;
  const size_t wire_row = static_cast<size_t>(a.hidden) * dtype_size(comb_wire_);
  const bool cast = comb_wire_ != a.dtype;
  const int total = comb_layout_.total_recv;
  const int32_t* src = comb_layout_.src_pos;
  const char* in = static_cast<const char*>(a.input);
  const float* inw = a.weights;
  if (!external) {
    in = in ? in : base_ + lay_->comb_inp;
  }
  const uint64_t round = ++comb_round_;
  uint64_t remote_bytes = 0;
  std::vector<uint8_t> wire(cast ? wire_row : 0);

  // 1. rows back to my node's sources, or to the forwarder of their node.
  for (int i = 0; i < total; ++i) {
    const int s = static_cast<int>(src[i] / max_send);
    const int64_t t = src[i] % max_send;
    int dst_pe;
    size_t off, woff;
    if (s / g == my_node) {
      dst_pe = s;
      size_t slot = static_cast<size_t>(me * max_inp + t);
      off = lay_->comb_stage + slot * row;
      woff = lay_->comb_stage_w + slot * k4;
    } else {
      dst_pe = my_node * g + s % g;
      size_t slot = static_cast<size_t>(((s / g) * max_inp + t) * g + lr);
      off = lay_->fwd_stage + slot * row;
      woff = lay_->fwd_stage_w + slot * k4;
    }
    const char* src_row = in + static_cast<size_t>(i) * row;
    if (cast) {
      cast_row_to_fp8(wire.data(), src_row, a.dtype, a.hidden);
      write(dst_pe, off, wire.data(), wire_row, true);
      rt_->quiet();  // the scratch row is reused
    } else {
      write(dst_pe, off, src_row, row, true);
    }
    if (inw) write(dst_pe, woff, inw + static_cast<size_t>(i) * k, k4, true);
    if (dst_pe != me) remote_bytes += wire_row + (inw ? k4 : 0);
  }
  rt_->quiet();
  uint64_t* sig = at<uint64_t>(lay_->comb_sig);
  for (int pe : node_pes_) signal(pe, &sig[me], round);
  wait_signals(sig, node_pes_, round, true, "EpDispatchCombineOp.combine");

  // 2. as forwarder: one partial row per inbox token, back to its source.
  const InboxMeta* meta = reinterpret_cast<const InboxMeta*>(comb_layout_.inbox_meta);
  std::vector<float> acc(static_cast<size_t>(a.hidden) * dtype_lanes(a.dtype)), wacc(static_cast<size_t>(k));
  std::vector<char> out_row(row);
  std::vector<int> other_nodes;
  for (int nd = 0; nd < nodes; ++nd) {
    if (nd == my_node) continue;
    other_nodes.push_back(nd);
    const int s = nd * g + lr;
    for (int j = 0; j < comb_layout_.inbox_count[nd]; ++j) {
      const InboxMeta mt = meta[static_cast<size_t>(nd) * max_inp + j];
      std::fill(acc.begin(), acc.end(), 0.0f);
      std::fill(wacc.begin(), wacc.end(), 0.0f);
      for (int l = 0; l < g; ++l) {
        if (!(mt.mask & (1u << l))) continue;
        size_t slot = static_cast<size_t>((nd * max_inp + mt.token) * g + l);
        accumulate_row(acc.data(), base_ + lay_->fwd_stage + slot * row, comb_wire_, a.hidden);
        if (inw) {
          const float* w = at<float>(lay_->fwd_stage_w + slot * k4);
          for (int q = 0; q < k; ++q) wacc[q] += w[q];
        }
      }
      store_row(out_row.data(), acc.data(), a.dtype, a.hidden);
      size_t slot = static_cast<size_t>(me * max_inp + mt.token);
      write(s, lay_->comb_stage + slot * row, out_row.data(), row, true);
      if (inw) write(s, lay_->comb_stage_w + slot * k4, wacc.data(), k4, true);
      rt_->quiet();  // scratch rows are reused
      remote_bytes += row + (inw ? k4 : 0);
    }
  }
  uint64_t* node_sig = at<uint64_t>(lay_->node_comb_sig);
  for (int nd : other_nodes) signal(nd * g + lr, &node_sig[my_node], round);
  wait_signals(node_sig, other_nodes, round, true, "EpDispatchCombineOp.combine (InterNodeV1 partial sums)");
  comb_remote_bytes_ = remote_bytes;

  // 3. own tokens: my node's rows plus one partial row per visited node.
  reduce_own_tokens(false);
}

}  // namespace mori::ep
