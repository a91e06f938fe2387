// SPDX-License-Identifier: MIT
// The host collective engine: every collective of the host heap runs here, over a group of
// PEs (the world, a team, an active set). It owns the group barrier (the same-host central
// barrier or a dissemination barrier), the inbox (message slots and staging for small parts)
// and the algorithms. Its two users only check arguments and describe their buffers:
//   - the OpenSHMEM C API (shmem/capi): teams and active sets, symmetric buffers;
//   - MORI-CCL's host path (collectives/): the world, buffers that may be private (it stages
//     them into the symmetric heap, and the engine's "published" collectives read each PE's
//     part where that PE says it is).
// Reductions combine with the core's one reduction engine (mori/core/reduce.h).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "mori/core/reduce.h"
#include "mori/shmem/runtime.h"
#include "mori/shmem/tuned_wait.h"

namespace mori::shmem::coll {

constexpr int kBarrierRounds = 32;                  // dissemination rounds: enough for 2^32 members
constexpr int kTeamChannels = 64;                   // one inbox channel per team slot of the C API
constexpr int kActiveSetChannel = kTeamChannels;    // every active set of the C API shares one
constexpr int kLibraryChannel = kTeamChannels + 1;  // the library's world group (MORI-CCL)
constexpr int kChannels = kTeamChannels + 2;

// The PE group a collective runs over, and the symmetric words it synchronizes with (the same
// offset on every member; all zero between collectives).
struct Group {
  std::vector<int> storage;  // a group may own its PE list (active sets)
  const int* pes = nullptr;  // world PE of each member
  int n = 0;
  int me = -1;                   // my index, -1 when not a member
  uint64_t* counters = nullptr;  // dissemination barrier counters (kBarrierRounds words)
  uint64_t* chain = nullptr;     // running-offset word of collect
  uint64_t* arrived = nullptr;   // same-host barrier: arrival mask (on member 0)
  uint64_t* released = nullptr;  // same-host barrier: this member's release flag
  bool world = false;
  int channel = -1;  // the inbox channel (kChannels of them)
};

// The symmetric words of one group, laid out as the C API's team slots and pSync use them.
struct alignas(64) GroupWords {
  uint64_t counters[kBarrierRounds];
  uint64_t chain;
  uint64_t scratch;
  uint64_t arrived;
  uint64_t released;
};

// The world as the library's own group (MORI-CCL): words and inbox channel of its own, so it
// never shares a sequence with the C API's world team. Collective on first use after an init
// (every PE of the world must make it; it allocates and clears symmetric memory).
Group& library_world(Runtime& r);

// Barrier over the group: completes this PE's outstanding RMA first (quiet) unless `sync_only`.
// Three or more members that all share this host (at most 64) meet at a central arrival mask
// and sleep until the last one wakes them (one wake-up each per barrier); others (two members,
// or members across hosts) run a dissemination barrier (log2(n) rounds of point-to-point
// signals).
void barrier(Group& g, const char* fn, bool sync_only = false);

// Whether every member of `g` is a PE of this host reached through shared memory (the same
// answer on every member).
bool shares_this_host(const Group& g, Runtime& r);

// Same-host small collectives: when the group's 3 or more members are all on this host (shared
// memory) and a part fits the inbox, each member copies its `bytes` of `part` (nullptr:
// nothing) into member 0's staging, the members meet at the central barrier, and the parts are
// then read from there (one wake-up per PE per collective). `valid()` false: the caller takes
// another path.
struct StagedParts {
  const char* first = nullptr;
  size_t stride = 0;
  bool valid() const { return first != nullptr; }
  const char* part(int member) const { return first + static_cast<size_t>(member) * stride; }
};
StagedParts stage_and_meet(Group& g, const void* part, size_t bytes, const char* fn);

// ---- byte collectives over symmetric buffers (source and dest at the same offset everywhere)

// dest on every member = source of member `root` (root_copies: the root's dest too). Small
// parts go through the inbox; on one host the members otherwise copy straight from the root's
// source (each waits for the root alone, the root for all of them), across hosts the data is
// pushed down a binomial tree.
void broadcast(Group& g, void* dest, const void* source, size_t bytes, int root, bool root_copies, const char* fn);
// dest = the members' sources concatenated in member order (sizes may differ).
void collect(Group& g, void* dest, const void* source, size_t bytes, const char* fn);
// dest = the members' sources (each `bytes`) in member order.
void fcollect(Group& g, void* dest, const void* source, size_t bytes, const char* fn);
// Block j of source (nelems elements of `elem` bytes, strides sst/dst in elements) goes to
// member j, which stores it as its block me.
void alltoalls(Group& g, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, size_t elem,
               const char* fn);

// ---- published collectives: each member's part lies in symmetric memory where that member
// says (an offset from the heap base, exchanged by `meet`), and results go to private memory.

// Descriptor exchange: every member contributes `bytes` at `mine` (symmetric; callers
// alternate two copies between calls) and gets every member's in `all` (n * bytes, private).
// Small ones are staged and met when 3 or more members share this host, go one message per
// pair through the inbox across hosts, and are read after a barrier otherwise (2 members on
// one host, or past the inbox's limits). When it returns, every member has published what it wrote before
// calling (its staged data), and every member has finished whatever it did before its previous
// meet on `g`: data staged for the meet before the previous one may be overwritten.
void meet(Group& g, const void* mine, void* all, size_t bytes, const char* fn);
// Bytes a collective moved from other PEs: by direct loads from mapped heaps, or through the
// transport (Runtime::get).
struct Traffic {
  uint64_t direct = 0;
  uint64_t transport = 0;
};
// Copies `n` bytes at local symmetric address `sym` (its counterpart on member `member`) to
// `dst`: direct loads where the member's heap is mapped here, else a get (non-blocking with
// `nbi`: the caller quiets).
void pull(Group& g, void* dst, const void* sym, int member, size_t n, Traffic* traffic = nullptr, bool nbi = false);

// How a reduction combines arrays: dst = op over nsrc arrays, in order (the core's loops, so
// every PE that combines the same arrays gets the same bits).
struct Combiner {
  size_t elem = 0;  // bytes per element
  void (*fn)(const Combiner&, void* dst, const void* const* srcs, int nsrc, size_t count) = nullptr;
  DataType type{};
  ReduceOp op{};
  void operator()(void* dst, const void* const* srcs, int nsrc, size_t count) const {
    fn(*this, dst, srcs, nsrc, count);
  }
};
// By DataType (MORI-CCL): the core's reduce_arrays.
inline Combiner combiner(DataType t, ReduceOp op) {
  return {dtype_size(t),
          [](const Combiner& c, void* d, const void* const* s, int n, size_t k) {
            reduce_arrays(c.type, c.op, d, s, n, k);
          },
          t, op};
}
// On a C type (the C API's reductions, long double and char included).
template <typename T, ReduceOp Op>
Combiner combiner() {
  return {sizeof(T),
          [](const Combiner&, void* d, const void* const* s, int n, size_t k) {
            reduce_sources<NativeElement<T>, Op>(static_cast<T*>(d), reinterpret_cast<const T* const*>(s), n, k);
          },
          {},
          Op};
}

// dst (count elements, private) = the combination of the first `nsrc` members' arrays, member
// j's at local symmetric address src_of[j], in member order (zeros when nsrc is 0). Mapped
// members are read in place; the others are fetched into `fetched` a window (1 MiB over them
// all) at a time, one non-blocking get per member and one quiet, so that their round trips
// overlap. dst may alias this PE's own array.
void reduce_parts(Group& g, const Combiner& c, void* dst, const char* const* src_of, int nsrc, size_t count,
                  std::vector<char>& fetched, Traffic* traffic = nullptr);
// All-reduce with the work split (a reduce-scatter, then an allgather): member i combines
// slice i (cache-line aligned) of every member's array into its `result` (symmetric, count
// elements), the members meet at a barrier, and every member pulls every slice into `out`.
// Each element is combined once, on one PE, so results are bit-identical everywhere; each PE
// receives 2 (n - 1) / n of the data, not n - 1 times it. Slice i of an array is read by
// member i alone and slice i of `result` written by it alone, after reading, so `result` may
// alias the arrays (and `out` may be `result`). The arrays must be ready on entry (the
// caller's barrier or meet); on return this PE's pulls are complete, but others may still
// read its `result`.
void allreduce_parts(Group& g, const Combiner& c, void* out, const char* const* src_of, char* result, size_t count,
                     std::vector<char>& fetched, Traffic* traffic, const char* fn);

// ---- the inbox: small collectives without barriers
//
// A barrier-based collective costs two barriers plus the data, and when PEs outnumber cores
// each barrier costs every waiting PE a sleep and a wake-up. Instead, each PE keeps per
// channel (a group) and per sender two message slots in the symmetric heap: a sender puts its
// part straight into the receiver's slot with a sequence number as the signal, and the receiver
// copies it out and acknowledges. A sender reuses a slot only once its previous message there
// was acknowledged, so a fast PE can run at most two collectives ahead of a slow one, and
// nobody waits for anybody else's arrival: a small fcollect, broadcast, alltoall or reduction is
// one message per pair (a broadcast: root to member; but see broadcast() where PEs outnumber
// cores). The users' dest buffers are only written by their owner, so a program
// may fill dest right before the call (as many do) without a barrier.
class Inbox {
 public:
  static constexpr size_t kMessageBytes = 1024;         // largest part that travels through a slot
  static constexpr int kMaxPes = 64;                    // the slots take kChannels * 2 * ~1 KiB per PE of the job
  static constexpr size_t kWideStageBytes = 64 * 1024;  // a wide channel's parts, all members together

  // Collective over the world (at shmem_init, or on the library's first collective): allocates
  // and clears this PE's slots; the caller's barrier orders that before any peer's message.
  void setup(Runtime& r);
  void teardown();
  // Whether setup ran for the live runtime (a finalize + init needs a new one).
  bool ready_for(uint64_t generation) const { return generation_ == generation; }

  // Whether a collective over `g` moving parts of `bytes` goes through the slots. Every
  // member gives the same answer (same arguments, same topology, same job size).
  bool usable(const Group& g, size_t bytes, Runtime& r) const;

  // Whether a collective over `g` with parts of `bytes` may stage them (same host is the
  // caller's check). Parts up to kMessageBytes on every channel; on the wide channels (the
  // world team's, the active sets' and the library's) up to kWideStageBytes / job size (an
  // alltoall of 1 KiB blocks at 8 PEs stages 8 KiB a member), which keeps those stagings at
  // 256 KiB a PE each for any job size, but only where this host's PEs outnumber its cores
  // (see wide_staging_).
  bool stageable(const Group& g, size_t bytes, Runtime& r) const;
  // Same host: where member `member`'s part of the next staged collective on `g`'s channel goes,
  // in member 0's memory (mapped here). Members write their parts there, meet at the central
  // barrier, and read every part from there: one wake-up per PE per collective, as a barrier.
  // Two parities alternate, so a part is never overwritten while a slow member still reads it
  // (writing parity p again needs everyone's arrival at the meeting in between).
  char* staged_part(const Group& g, int member, uint64_t parity, Runtime& r) const;
  // The parity of the next staged collective on `g`'s channel (every member counts alike: the
  // active sets' channel stages only for sets of the whole job, and a team's channel counts
  // from 0 when the team is made).
  uint64_t next_stage(const Group& g) { return staged_[g.channel]++ & 1; }
  void restart_stages(int channel) {
    if (channel >= 0 && static_cast<size_t>(channel) < staged_.size()) staged_[channel] = 0;
  }

  // Whether this host's PEs outnumber its cores (then every wait yields or sleeps); the same
  // answer on every PE of the host.
  bool host_crowded() const { return wide_staging_; }

  // Sends `bytes` (<= kMessageBytes) to member `to` of `g`.
  void send(const Group& g, int to, const void* data, size_t bytes, const char* fn);
  // Waits for the next message from member `from` of `g` and copies `bytes` of it to `out`.
  void receive(const Group& g, int from, void* out, size_t bytes, const char* fn);

 private:
  struct alignas(64) Slot {
    uint64_t seq;  // the message's number on its channel (1, 2, ...); written last
    unsigned char data[kMessageBytes];
  };
  struct alignas(64) Ack {
    uint64_t seq;  // the last message number the receiver took out of its slot
  };
  Slot* slot(int channel, int sender, uint64_t seq) const;
  Ack* ack(int channel, int receiver) const;
  size_t index(int channel, int pe) const { return static_cast<size_t>(channel) * n_pes_ + pe; }
  static constexpr int kWideChannels = 3;
  // Index into wide_stages_ of a channel (-1: it stages in stages_).
  static int wide_index(int channel) {
    return channel == 0 ? 0 : channel == kActiveSetChannel ? 1 : channel == kLibraryChannel ? 2 : -1;
  }

  Slot* slots_ = nullptr;                 // [channel][sender][2], on every PE at the same offset
  unsigned char* stages_ = nullptr;       // [channel][member][2][kMessageBytes]: staged parts (member 0's used)
  unsigned char* wide_stages_ = nullptr;  // [wide channel][member][2][wide_part_]: the same, wider
  size_t wide_part_ = 0;
  // Wide parts stage only when the host's PEs outnumber its cores. Staging writes every part
  // into lines the other cores read in the previous collective, one ownership transfer per 64 B
  // line that the writer waits for, while the direct path's gets only read lines that stay
  // shared: 2 PEs with a core each, broadcast+barrier of 16-32 KiB took 14-33 us staged, 2.0-8.4
  // direct (fcollect 13-48 against 2.5-9.6; 2-core AMD VM, alternated runs), the cliff below the
  // 64 KiB rows. With PEs sharing cores the barriers the staging saves cost more (4 PEs on 2
  // cores: 2-16 KiB broadcast+barrier 26-38 us staged, 30-81 direct). Decided from the host's
  // PE and core counts, the same on every PE of it (not the affinity mask, which may differ).
  bool wide_staging_ = false;
  Ack* acks_ = nullptr;  // [channel][receiver]: what each receiver took from this PE
  int n_pes_ = 0;
  int my_pe_ = -1;
  uint64_t generation_ = 0;         // the runtime's generation at setup (0: none)
  std::vector<uint64_t> sent_;      // [channel][receiver]: messages sent
  std::vector<uint64_t> received_;  // [channel][sender]: messages taken
  std::vector<uint64_t> staged_;    // [channel]: staged collectives run
};

Inbox& inbox();

// ---- typed reductions over symmetric buffers (the C API's)

// Every member combines the members' sources in member order, so floating-point results are
// bit-identical on all PEs. `upto` members are combined: all of them for a reduction, the
// first me+1 (inclusive scan) or me (exclusive scan: none gives zeros). Small parts go staged
// or through the inbox; off shared memory a reduction over 3 or more members splits the work
// (allreduce_parts: 64 KiB of int64 on 2 cores, AMD VM, over UCX's tcp: 4 PEs 0.98 -> 0.68 ms,
// 8 PEs 4.7 -> 3.5 ms; over MORI's tcp, whose barriers cost more (the split has three), no
// gain: 0.91 -> 1.11 and 3.95 -> 4.24 ms, one run each); otherwise every member reads every
// source (reduce_parts) between two barriers. dest may alias source on every path.
template <typename T, ReduceOp Op>
void reduce(Group& g, T* dest, const T* source, size_t n, const char* fn, int upto = -1) {
  auto& r = Runtime::get(fn);
  const bool reduction = upto < 0;  // a scan's `upto` differs per member: it never splits
  if (reduction) upto = g.n;
  if (StagedParts parts = stage_and_meet(g, source, n * sizeof(T), fn); parts.valid()) {
    // Every member combines the staged parts in member order (they stay put until everyone
    // arrived at the next meeting), so dest may alias source.
    std::vector<T> acc(n);
    std::vector<T> in(n);
    for (int j = 0; j < upto; ++j) {
      std::memcpy(j == 0 ? acc.data() : in.data(), parts.part(j), n * sizeof(T));
      if (j > 0) combine_into<NativeElement<T>, Op>(acc.data(), in.data(), n);
    }
    std::copy(acc.begin(), acc.end(), dest);
    return;
  }
  if (inbox().usable(g, n * sizeof(T), r)) {
    // Every member sends its source to every other one and combines what it received; the
    // parts are copied out of the slots, so dest may alias source.
    std::vector<T> parts(static_cast<size_t>(g.n) * n);
    for (int k = 1; k < g.n; ++k) inbox().send(g, (g.me + k) % g.n, source, n * sizeof(T), fn);
    std::copy(source, source + n, parts.begin() + static_cast<ptrdiff_t>(g.me * n));
    for (int k = 1; k < g.n; ++k) {
      int j = (g.me - k + g.n) % g.n;
      inbox().receive(g, j, parts.data() + static_cast<size_t>(j) * n, n * sizeof(T), fn);
    }
    std::vector<T> acc(n);  // zeros when nothing is combined (an exclusive scan's first member)
    for (int j = 0; j < upto; ++j) {
      if (j == 0)
        std::copy(parts.begin(), parts.begin() + static_cast<ptrdiff_t>(n), acc.begin());
      else
        combine_into<NativeElement<T>, Op>(acc.data(), parts.data() + static_cast<size_t>(j) * n, n);
    }
    std::copy(acc.begin(), acc.end(), dest);
    return;
  }
  const std::vector<const char*> src_of(static_cast<size_t>(g.n), reinterpret_cast<const char*>(source));
  std::vector<char> fetched;
  barrier(g, fn);  // every source is ready, every dest free
  if (reduction && g.n > 2 && n >= static_cast<size_t>(g.n) && !shares_this_host(g, r)) {
    allreduce_parts(g, combiner<T, Op>(), dest, src_of.data(), reinterpret_cast<char*>(dest), n, fetched, nullptr, fn);
    barrier(g, fn);  // nobody reads this PE's dest any more
    return;
  }
  std::vector<T> acc(n);
  reduce_parts(g, combiner<T, Op>(), acc.data(), src_of.data(), upto, n, fetched);
  barrier(g, fn);  // every member has read every source: dest may alias source now
  std::copy(acc.begin(), acc.end(), dest);
}

}  // namespace mori::shmem::coll
