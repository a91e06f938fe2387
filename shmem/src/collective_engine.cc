// SPDX-License-Identifier: MIT
// The host collective engine (mori/shmem/collective_engine.h): the group barrier, staging,
// and the algorithms over symmetric and over published buffers.
#include "mori/shmem/collective_engine.h"

#include <cstring>
#include <memory>
#include <string>

#include "mori/core/status.h"

namespace mori::shmem::coll {

namespace {

// Same host: the runtime's barrier (Runtime::barrier_same_host) on the group's words.
void central_barrier(Group& g, Runtime& r, const char* fn) {
  r.barrier_same_host(g.pes, g.n, g.me, g.arrived, g.released, 0, fn);
}

// Across hosts (or over ucx) a large broadcast is pushed: each member tells the root that its
// dest is free (one notify on the root's arrival counter); the root waits for all of them, then
// the data goes down a binomial tree, each PE putting it into its children's dest with a
// signal on their release word (the root to members n/2, n/4, ..., 1 away, each of those on to
// its own subtree), so the root sends log2(n) copies, not n - 1, and the subtrees' copies run
// at once. Only the root waits for notices: the counter is consumed by n - 1, so it is zero
// between broadcasts, and a member sends its next notice only after this broadcast's data
// reached it, so no notice of the next one is counted in this one (a forwarding PE needs no
// notice of its own: every dest was free before the root sent anything).
void push_broadcast(Group& g, void* dest, const void* source, size_t bytes, int root, bool root_copies,
                    const char* fn) {
  auto& r = Runtime::get(fn);
  const int n = g.n, rel = (g.me - root + n) % n;  // position in the tree, the root at 0
  auto send_subtrees = [&](const void* data, int below) {
    // Children at rel + m for m = below/2, below/4, ..., 1: the biggest subtree first.
    bool sent = false;
    for (int m = below >> 1; m >= 1; m >>= 1) {
      if (rel + m >= n) continue;
      const int pe = g.pes[(rel + m + root) % n];
      if (bytes)
        r.put_signal(dest, data, bytes, g.released, 1, SignalOp::kSet, pe, true);
      else
        r.notify(nullptr, nullptr, 0, g.released, 1, SignalOp::kSet, pe, fn);
      sent = true;
    }
    if (sent) r.quiet();  // the data (source, or this PE's dest) may be reused on return
  };
  if (rel == 0) {
    uint64_t* ready = g.arrived;
    const uint64_t others = static_cast<uint64_t>(n - 1);
    bool rung = true;
    for (int k = 0; k < n; ++k) rung = rung && (k == g.me || r.rings_on_delivery(g.pes[k]));
    tuned_wait(
        r, [&] { return __atomic_load_n(ready, __ATOMIC_ACQUIRE) >= others; }, fn, ready, WaitFrom{-1, 0, rung},
        [&] {
          return "the broadcast's members to free their dest (" +
                 std::to_string(__atomic_load_n(ready, __ATOMIC_ACQUIRE)) + " of " + std::to_string(others) + ")";
        });
    __atomic_fetch_sub(ready, others, __ATOMIC_ACQ_REL);
    int top = 1;
    while (top < n) top <<= 1;
    send_subtrees(source, top);
    if (root_copies && dest != source) std::memmove(dest, source, bytes);
    return;
  }
  r.notify(nullptr, nullptr, 0, g.arrived, 1, SignalOp::kAdd, g.pes[root], fn);
  const int low = rel & -rel;  // the parent is rel - low
  const int from = g.pes[(rel - low + root) % n];
  uint64_t* mine = g.released;
  tuned_wait(
      r, [&] { return __atomic_load_n(mine, __ATOMIC_ACQUIRE) != 0; }, fn, mine, WaitFrom{from, 0, false},
      [&] { return "PE " + std::to_string(from) + " to pass on the broadcast of PE " + std::to_string(g.pes[root]); });
  __atomic_store_n(mine, 0, __ATOMIC_RELAXED);
  send_subtrees(dest, low);
}

// Same host, parts past the inbox: every member copies the root's source straight into its
// own dest (direct loads from the mapped heap), with one wait each instead of the two barriers
// around a get (which made each member also wait for every other one): the root adds one to
// each member's ready counter, and each member, once it has copied, one to the root's done
// counter, which the root waits for before returning (its source may be reused then). Counts,
// not flags: a member that finished this broadcast may already be the root of the next one
// and count up a slow member's ready counter before this root's increment landed there; any
// count tells that member that the root of its next broadcast has entered it (that root must
// have finished every earlier collective of the group), so it may read that root's source,
// and the root stays until it has read it. Both counters are back at zero after each
// broadcast. They are the dissemination barrier's last two rounds, which no job reaches
// (2^30 PEs).
constexpr int kPullReady = kBarrierRounds - 1;
constexpr int kPullDone = kBarrierRounds - 2;

void pull_broadcast(Group& g, void* dest, const void* source, size_t bytes, int root, bool root_copies,
                    const char* fn) {
  auto& r = Runtime::get(fn);
  if (g.me == root) {
    for (int k = 1; k < g.n; ++k)
      r.notify(nullptr, nullptr, 0, &g.counters[kPullReady], 1, SignalOp::kAdd, g.pes[(root + k) % g.n], fn);
    if (root_copies && dest != source) std::memmove(dest, source, bytes);
    uint64_t* done = &g.counters[kPullDone];
    const uint64_t others = static_cast<uint64_t>(g.n - 1);
    bool rung = true;
    for (int k = 0; k < g.n; ++k) rung = rung && (k == g.me || r.rings_on_delivery(g.pes[k]));
    tuned_wait(
        r, [&] { return __atomic_load_n(done, __ATOMIC_ACQUIRE) >= others; }, fn, done, WaitFrom{-1, 0, rung},
        [&] {
          return "the broadcast's members to copy its data (" +
                 std::to_string(__atomic_load_n(done, __ATOMIC_ACQUIRE)) + " of " + std::to_string(others) + ")";
        });
    __atomic_fetch_sub(done, others, __ATOMIC_ACQ_REL);
    return;
  }
  const int from = g.pes[root];
  uint64_t* ready = &g.counters[kPullReady];
  tuned_wait(
      r, [&] { return __atomic_load_n(ready, __ATOMIC_ACQUIRE) != 0; }, fn, ready,
      WaitFrom{from, 0, r.rings_on_delivery(from)},
      [&] { return "PE " + std::to_string(from) + " (the root) to enter the broadcast"; });
  __atomic_fetch_sub(ready, 1, __ATOMIC_ACQ_REL);
  pull(g, dest, source, root, bytes);
  r.notify(nullptr, nullptr, 0, &g.counters[kPullDone], 1, SignalOp::kAdd, from, fn);
}

// The library's world group, per runtime generation.
struct LibraryWorld {
  uint64_t generation = 0;
  GroupWords* words = nullptr;
  std::vector<int> pes;
  Group group;
};
LibraryWorld& library_state() {
  // Never destroyed: at process exit the runtime may be gone, and its words with it.
  static LibraryWorld* w = new LibraryWorld();
  return *w;
}

}  // namespace

Group& library_world(Runtime& r) {
  LibraryWorld& w = library_state();
  const uint64_t gen = Runtime::generation();
  if (w.generation == gen) return w.group;
  // Collective: every PE makes it in its first library collective after an init. A stale one
  // belongs to a finalized runtime whose heap is gone: forget it unfreed.
  w.words = static_cast<GroupWords*>(r.malloc(sizeof(GroupWords), 64, "mori collectives (group words)", false));
  std::memset(w.words, 0, sizeof(GroupWords));
  if (!inbox().ready_for(gen)) inbox().setup(r);  // the C API sets it up at shmem_init
  w.pes.resize(r.n_pes());
  for (int i = 0; i < r.n_pes(); ++i) w.pes[i] = i;
  Group& g = w.group;
  g.pes = w.pes.data();
  g.n = r.n_pes();
  g.me = r.my_pe();
  g.counters = w.words->counters;
  g.chain = &w.words->chain;
  g.arrived = &w.words->arrived;
  g.released = &w.words->released;
  g.world = true;
  g.channel = kLibraryChannel;
  inbox().restart_stages(kLibraryChannel);
  r.barrier_all();  // nobody signals a peer's words or inbox before the peer cleared them
  w.generation = gen;
  return g;
}

bool shares_this_host(const Group& g, Runtime& r) { return r.shares_host(g.pes, g.n, g.arrived); }

void barrier(Group& g, const char* fn, bool sync_only) {
  auto& r = Runtime::get(fn);
  if (!sync_only) r.quiet();
  if (g.n == 1) return;
  // Two members meet in one dissemination round, one wake-up each already, without the
  // shared arrival word's extra cache-line trip (as Runtime::barrier_all decides).
  if (g.n > 2 && shares_this_host(g, r)) return central_barrier(g, r, fn);
  r.barrier_dissemination(g.pes, g.n, g.me, g.counters, 0, fn);
}

StagedParts stage_and_meet(Group& g, const void* part, size_t bytes, const char* fn) {
  auto& r = Runtime::get(fn);
  // Two members exchange small parts through the inbox instead: one message each way is one
  // wait each too, without the shared arrival word (faster when each PE has its own core).
  // From kStagePairMin bytes staging wins: a message crosses between the cores twice (the
  // sender's stores take the slot's lines from the receiver, which then reads them back), a
  // staged part once (2-PE alltoall of 1 KiB blocks 0.75 -> 0.65 us, of 8 B 0.27 either way).
  constexpr size_t kStagePairMin = 512;
  if (g.n < 2 || (g.n == 2 && bytes < kStagePairMin) || !inbox().stageable(g, bytes, r) || !shares_this_host(g, r))
    return {};
  const uint64_t parity = inbox().next_stage(g);
  if (part && bytes) std::memcpy(inbox().staged_part(g, g.me, parity, r), part, bytes);
  central_barrier(g, r, fn);  // its release publishes every member's part
  StagedParts parts;
  parts.first = inbox().staged_part(g, 0, parity, r);
  parts.stride = static_cast<size_t>(inbox().staged_part(g, 1, parity, r) - parts.first);
  return parts;
}

// ---------------------------------------------------------------- symmetric buffers

void broadcast(Group& g, void* dest, const void* source, size_t bytes, int root, bool root_copies, const char* fn) {
  if (root < 0 || root >= g.n) raise(Status::kInvalidArgument, "PE_root %d is out of range for %d PEs", root, g.n);
  auto& r = Runtime::get(fn);
  // Parts that fit a message go root to member, so that only the members wait, and each for
  // the root alone. Where this host's PEs outnumber its cores and 3 or more members share it,
  // the same-host pull below serves them too: there every wait is a yield or a sleep, and a
  // message's copy into the member's slot and back out, with its acknowledgement, cost more
  // than the pull's one copy and the root's one wait (4 PEs on 2 cores, 8 B-1 KiB
  // broadcast+barrier 1.5-6.3 x faster by the median in each of 17 size rows over two
  // alternated runs of 4, beside other jobs, load average 11-17).
  if (inbox().usable(g, bytes, r) && !(g.n > 2 && inbox().host_crowded() && shares_this_host(g, r))) {
    if (g.me == root) {
      for (int k = 1; k < g.n; ++k) inbox().send(g, (root + k) % g.n, source, bytes, fn);
      if (root_copies && dest != source) std::memmove(dest, source, bytes);
    } else {
      inbox().receive(g, root, dest, bytes, fn);
    }
    return;
  }
  // Larger parts are not staged: staging copies the data twice and meets every member with
  // every other (4 PEs on 2 cores, 2-16 KiB broadcast+barrier 1.7-4.3 x faster pulled, 5
  // alternated runs beside other jobs).
  if (!shares_this_host(g, r)) return push_broadcast(g, dest, source, bytes, root, root_copies, fn);
  pull_broadcast(g, dest, source, bytes, root, root_copies, fn);
}

void fcollect(Group& g, void* dest, const void* source, size_t bytes, const char* fn) {
  auto& r = Runtime::get(fn);
  if (StagedParts parts = stage_and_meet(g, source, bytes, fn); parts.valid()) {
    for (int j = 0; j < g.n; ++j)
      std::memcpy(static_cast<char*>(dest) + static_cast<size_t>(j) * bytes, parts.part(j), bytes);
    return;
  }
  if (inbox().usable(g, bytes, r)) {
    char* out = static_cast<char*>(dest);
    for (int k = 1; k < g.n; ++k) inbox().send(g, (g.me + k) % g.n, source, bytes, fn);
    std::memmove(out + static_cast<size_t>(g.me) * bytes, source, bytes);
    for (int k = 1; k < g.n; ++k) {
      int j = (g.me - k + g.n) % g.n;  // in the order the others sent to me
      inbox().receive(g, j, out + static_cast<size_t>(j) * bytes, bytes, fn);
    }
    return;
  }
  if (!shares_this_host(g, r)) {
    // Off shared memory every member reads the others' parts: gets that overlap beat puts
    // that do (64 KiB parts on 2 cores, AMD VM, over UCX's tcp: 4 PEs 1.44 -> 0.72 ms, 8 PEs
    // 9.5 -> 4.7 ms; over MORI's tcp 0.91 -> 0.69 and 4.3 -> 3.4 ms; alternated runs).
    barrier(g, fn);  // every source is ready, every dest free
    if (bytes) {
      char* out = static_cast<char*>(dest);
      std::memmove(out + static_cast<size_t>(g.me) * bytes, source, bytes);
      for (int k = 1; k < g.n; ++k) {
        const int j = (g.me + k) % g.n;  // start at different peers to spread the traffic
        r.get(out + static_cast<size_t>(j) * bytes, source, bytes, g.pes[j], true);
      }
    }
    return barrier(g, fn);  // its quiet completes the gets: the sources may be reused
  }
  barrier(g, fn);
  if (bytes) {
    char* at = static_cast<char*>(dest) + static_cast<size_t>(g.me) * bytes;
    for (int k = 0; k < g.n; ++k) {
      int j = (g.me + k) % g.n;  // start at different peers to spread the traffic
      r.put(at, source, bytes, g.pes[j], true);
    }
  }
  barrier(g, fn);
}

void collect(Group& g, void* dest, const void* source, size_t bytes, const char* fn) {
  auto& r = Runtime::get(fn);
  barrier(g, fn);
  // Running offset: member k waits for k-1's end offset (stored +1 so zero means "not yet").
  uint64_t offset = 0;
  if (g.me > 0) {
    uint64_t* mine = g.chain;
    int from = g.pes[g.me - 1];
    tuned_wait(
        r, [&] { return __atomic_load_n(mine, __ATOMIC_ACQUIRE) != 0; }, fn, mine,
        WaitFrom{from, 0, r.rings_on_delivery(from)},
        [&] { return "PE " + std::to_string(from) + " to pass on the running offset of collect"; });
    offset = __atomic_load_n(mine, __ATOMIC_ACQUIRE) - 1;
    __atomic_store_n(mine, 0, __ATOMIC_RELEASE);
  }
  if (g.me + 1 < g.n) r.notify(nullptr, nullptr, 0, g.chain, offset + bytes + 1, SignalOp::kSet, g.pes[g.me + 1], fn);
  if (bytes) {
    char* at = static_cast<char*>(dest) + offset;
    for (int k = 0; k < g.n; ++k) r.put(at, source, bytes, g.pes[(g.me + k) % g.n], true);
  }
  barrier(g, fn);
}

void alltoalls(Group& g, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, size_t elem,
               const char* fn) {
  auto& r = Runtime::get(fn);
  const size_t block = nelems * elem;
  if (dst == 1 && sst == 1) {
    // Member i stages its n blocks; member j takes block j of every member's part.
    if (StagedParts parts = stage_and_meet(g, source, block * g.n, fn); parts.valid()) {
      for (int i = 0; i < g.n; ++i)
        std::memcpy(static_cast<char*>(dest) + static_cast<size_t>(i) * block,
                    parts.part(i) + static_cast<size_t>(g.me) * block, block);
      return;
    }
  }
  if (dst == 1 && sst == 1 && inbox().usable(g, block, r)) {
    char* out = static_cast<char*>(dest);
    const char* in = static_cast<const char*>(source);
    for (int k = 1; k < g.n; ++k) {
      int j = (g.me + k) % g.n;
      inbox().send(g, j, in + static_cast<size_t>(j) * block, block, fn);
    }
    std::memmove(out + static_cast<size_t>(g.me) * block, in + static_cast<size_t>(g.me) * block, block);
    for (int k = 1; k < g.n; ++k) {
      int j = (g.me - k + g.n) % g.n;
      inbox().receive(g, j, out + static_cast<size_t>(j) * block, block, fn);
    }
    return;
  }
  barrier(g, fn);
  if (nelems) {
    for (int k = 0; k < g.n; ++k) {
      int j = (g.me + k) % g.n;
      char* d = static_cast<char*>(dest) + static_cast<ptrdiff_t>(j * nelems * elem) * dst;
      const char* s = static_cast<const char*>(source) + static_cast<ptrdiff_t>(g.me * nelems * elem) * sst;
      if (dst == 1 && sst == 1)
        r.get(d, s, nelems * elem, g.pes[j], true);
      else
        r.iget(d, s, dst, sst, nelems, elem, g.pes[j]);
    }
  }
  barrier(g, fn);  // its quiet completes the gets
}

// ---------------------------------------------------------------- published buffers

void meet(Group& g, const void* mine, void* all, size_t bytes, const char* fn) {
  auto& r = Runtime::get(fn);
  char* out = static_cast<char*>(all);
  if (StagedParts parts = stage_and_meet(g, mine, bytes, fn); parts.valid()) {
    for (int j = 0; j < g.n; ++j) std::memcpy(out + static_cast<size_t>(j) * bytes, parts.part(j), bytes);
    return;
  }
  std::memcpy(out + static_cast<size_t>(g.me) * bytes, mine, bytes);
  // On one host (2 members) a barrier and direct loads of the descriptors cost less than the
  // inbox's message, copy and acknowledgement each way; across hosts the messages save a
  // get's round trip per member.
  if (!shares_this_host(g, r) && inbox().usable(g, bytes, r)) {
    // A member sends only after finishing its previous collective, so its message here also
    // says that (what meet promises).
    for (int k = 1; k < g.n; ++k) inbox().send(g, (g.me + k) % g.n, mine, bytes, fn);
    for (int k = 1; k < g.n; ++k) {
      int j = (g.me - k + g.n) % g.n;  // in the order the others sent to me
      inbox().receive(g, j, out + static_cast<size_t>(j) * bytes, bytes, fn);
    }
    return;
  }
  barrier(g, fn);
  for (int k = 1; k < g.n; ++k) {
    const int j = (g.me + k) % g.n;
    pull(g, out + static_cast<size_t>(j) * bytes, mine, j, bytes);
  }
}

void pull(Group& g, void* dst, const void* sym, int member, size_t n, Traffic* traffic, bool nbi) {
  if (n == 0) return;
  if (member == g.me) {
    if (dst != sym) std::memcpy(dst, sym, n);
    return;
  }
  auto& r = Runtime::get("mori collectives");
  const int pe = g.pes[member];
  if (void* p = r.ptr(sym, pe)) {
    std::memcpy(dst, p, n);
    if (traffic) traffic->direct += n;
  } else {
    r.get(dst, sym, n, pe, nbi);
    if (traffic) traffic->transport += n;
  }
}

void reduce_parts(Group& g, const Combiner& c, void* dst, const char* const* src_of, int nsrc, size_t count,
                  std::vector<char>& fetched, Traffic* traffic) {
  const size_t e = c.elem;
  if (nsrc == 0) {
    std::memset(dst, 0, count * e);  // an exclusive scan's first member: nothing combined
    return;
  }
  auto& r = Runtime::get("mori collectives");
  std::vector<const char*> mapped(static_cast<size_t>(nsrc));
  std::vector<size_t> slot(static_cast<size_t>(nsrc));  // an unmapped member's place in `fetched`
  size_t remote = 0;
  for (int j = 0; j < nsrc; ++j) {
    mapped[j] = j == g.me ? src_of[j] : static_cast<const char*>(r.ptr(src_of[j], g.pes[j]));
    if (!mapped[j]) slot[j] = remote++;
  }
  constexpr size_t kWindowBytes = 1 << 20;
  const size_t chunk = std::max<size_t>(1, std::min(count, kWindowBytes / e / std::max<size_t>(remote, 1)));
  if (fetched.size() < chunk * remote * e) fetched.resize(chunk * remote * e);
  std::vector<const void*> srcs(static_cast<size_t>(nsrc));
  for (size_t off = 0; off < count; off += chunk) {
    const size_t len = std::min(chunk, count - off);
    if (remote) {
      for (int j = 0; j < nsrc; ++j)
        if (!mapped[j]) r.get(fetched.data() + slot[j] * chunk * e, src_of[j] + off * e, len * e, g.pes[j], true);
      r.quiet();
      if (traffic) traffic->transport += remote * len * e;
    }
    for (int j = 0; j < nsrc; ++j)
      srcs[j] = mapped[j] ? static_cast<const void*>(mapped[j] + off * e) : fetched.data() + slot[j] * chunk * e;
    if (traffic) traffic->direct += (static_cast<size_t>(nsrc) - remote - (g.me < nsrc ? 1 : 0)) * len * e;
    c(static_cast<char*>(dst) + off * e, srcs.data(), nsrc, len);
  }
}

void allreduce_parts(Group& g, const Combiner& c, void* out, const char* const* src_of, char* result, size_t count,
                     std::vector<char>& fetched, Traffic* traffic, const char* fn) {
  const size_t e = c.elem;
  constexpr size_t kLine = 64;
  const size_t line_elems = std::max<size_t>(kLine / e, 1);
  const size_t n = static_cast<size_t>(g.n);
  // Slices aligned to cache lines, so that no two members write one line of `result`.
  const size_t slice = ((count + n - 1) / n + line_elems - 1) / line_elems * line_elems;
  auto lo = [&](size_t j) { return std::min(count, j * slice); };
  auto hi = [&](size_t j) { return std::min(count, j * slice + slice); };
  const size_t me = static_cast<size_t>(g.me);
  if (hi(me) > lo(me)) {
    std::vector<const char*> from(n);
    for (size_t j = 0; j < n; ++j) from[j] = src_of[j] + lo(me) * e;
    reduce_parts(g, c, result + lo(me) * e, from.data(), g.n, hi(me) - lo(me), fetched, traffic);
  }
  barrier(g, fn);  // every slice is combined
  char* o = static_cast<char*>(out);
  for (size_t step = 0; step < n; ++step) {
    const size_t j = (me + step) % n;  // start at different members to spread the traffic
    if (hi(j) > lo(j))
      pull(g, o + lo(j) * e, result + lo(j) * e, static_cast<int>(j), (hi(j) - lo(j)) * e, traffic, true);
  }
  Runtime::get(fn).quiet();  // the pulls through a transport overlapped; they are complete now
}

}  // namespace mori::shmem::coll
