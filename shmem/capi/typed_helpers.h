// SPDX-License-Identifier: MIT
// What the generated typed routines (typed_gen.cc) forward to: byte-level RMA,
// word-level AMOs and waits, and typed reductions. Every helper is noexcept: it
// reports a failure through capi::fail, naming the public routine `fn`.
#pragma once

#include <shmem.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "capi/collectives.h"
#include "capi/inbox.h"
#include "mori/core/reduce.h"
#include "mori/core/status.h"
#include "capi/state.h"

namespace mori::capi {

// ---- bit casts between an element and the 64-bit operand word of the runtime
template <typename T>
inline uint64_t bits(T v) {
  static_assert(sizeof(T) <= 8);
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof(T));
  return u;
}
template <typename T>
inline T from_bits(uint64_t u) {
  T v;
  std::memcpy(&v, &u, sizeof(T));
  return v;
}
template <typename T>
constexpr mori::shmem::Word word_of() {
  using mori::shmem::Num;
  return {static_cast<int>(sizeof(T)),
          std::is_floating_point_v<T> ? Num::kFloat : (std::is_signed_v<T> ? Num::kSigned : Num::kUnsigned)};
}

// ---- RMA (bytes)
void put(shmem_ctx_t ctx, void* dest, const void* source, size_t bytes, int pe, bool nbi, const char* fn) noexcept;
void get(shmem_ctx_t ctx, void* dest, const void* source, size_t bytes, int pe, bool nbi, const char* fn) noexcept;
void iput(shmem_ctx_t ctx, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, size_t elem,
          int pe, const char* fn) noexcept;
void iget(shmem_ctx_t ctx, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, size_t elem,
          int pe, const char* fn) noexcept;
// OpenSHMEM 1.6 interleaved blocks: nblocks blocks of bsize contiguous elements, block k
// starting k * dst (dest) and k * sst (source) elements from the start.
void ibput(shmem_ctx_t ctx, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks,
           size_t elem, int pe, const char* fn) noexcept;
void ibget(shmem_ctx_t ctx, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks,
           size_t elem, int pe, const char* fn) noexcept;
void put_signal(shmem_ctx_t ctx, void* dest, const void* source, size_t bytes, uint64_t* sig_addr, uint64_t signal,
                int sig_op, int pe, bool nbi, const char* fn) noexcept;
// ---- AMO on a 4- or 8-byte word; returns the old value for fetching ops
uint64_t amo(shmem_ctx_t ctx, void* target, mori::AmoOp op, size_t width, uint64_t operand, uint64_t cond, int pe,
             const char* fn) noexcept;

// ---- point-to-point synchronization
void wait_until(const void* ivar, int cmp, uint64_t value, mori::shmem::Word w, const char* fn) noexcept;
int test(const void* ivar, int cmp, uint64_t value, mori::shmem::Word w, const char* fn) noexcept;
enum class Many { kAll, kAny, kSome };
// Returns: all -> 1 when satisfied; any -> index or SIZE_MAX; some -> count (indices filled).
// `values` (vector forms) holds one comparison value per element, else `scalar` is used.
size_t wait_until_many(Many kind, const void* ivars, size_t elem, size_t n, size_t* indices, const int* status,
                       int cmp, const void* values, uint64_t scalar, mori::shmem::Word w, const char* fn) noexcept;
size_t test_many(Many kind, const void* ivars, size_t elem, size_t n, size_t* indices, const int* status, int cmp,
                 const void* values, uint64_t scalar, mori::shmem::Word w, const char* fn) noexcept;

// ---- team collectives (bytes); return 0, or -1 when called by a PE outside the team
int broadcast(shmem_team_t team, void* dest, const void* source, size_t bytes, int root, const char* fn) noexcept;
int collect(shmem_team_t team, void* dest, const void* source, size_t bytes, const char* fn) noexcept;
int fcollect(shmem_team_t team, void* dest, const void* source, size_t bytes, const char* fn) noexcept;
int alltoall(shmem_team_t team, void* dest, const void* source, size_t bytes, const char* fn) noexcept;
int alltoalls(shmem_team_t team, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems,
              size_t elem, const char* fn) noexcept;

// ---- reductions: the core's engine (mori/core/reduce.h) on the C types, combined natively
using OpAnd = mori::Combine<mori::ReduceOp::kAnd>;
using OpOr = mori::Combine<mori::ReduceOp::kOr>;
using OpXor = mori::Combine<mori::ReduceOp::kXor>;
using OpMax = mori::Combine<mori::ReduceOp::kMax>;
using OpMin = mori::Combine<mori::ReduceOp::kMin>;
using OpSum = mori::Combine<mori::ReduceOp::kSum>;
using OpProd = mori::Combine<mori::ReduceOp::kProd>;

// acc[i] = Op(acc[i], in[i]) for i < n.
template <typename T, typename Op>
inline void combine_into(T* acc, const T* in, size_t n) {
  mori::combine_into<mori::NativeElement<T>, Op::kOp>(acc, in, n);
}

// Off shared memory, a reduction over 3 or more members splits the work (a reduce-scatter, then
// an allgather): member i combines block i of every member's source, in team order, into block
// i of its dest, then every member reads the others' blocks from their dest. Each PE receives
// 2 (n - 1) / n of the data instead of n - 1 times it, and each block is combined once, on one
// PE, so results are bit-identical everywhere. Block i of a source is read by member i alone
// and block i of dest written by it alone, after reading, so dest may alias source.
// 64 KiB of int64 on 2 cores, AMD VM, over UCX's tcp: 4 PEs 0.98 -> 0.68 ms, 8 PEs 4.7 -> 3.5 ms;
// over MORI's tcp, whose barriers cost more (the split has three), no gain: 0.91 -> 1.11 and
// 3.95 -> 4.24 ms, one run each.
template <typename T, typename Op>
void reduce_split(Group& g, T* dest, const T* source, size_t n, const char* fn) {
  auto& r = rt(fn);
  const int m = g.n;
  auto begin = [&](int i) { return n * static_cast<size_t>(i) / static_cast<size_t>(m); };
  const size_t lo = begin(g.me), len = begin(g.me + 1) - lo;
  group_barrier(g, fn);  // every source is ready, every dest free
  // The other members' parts of my block are fetched a window at a time, with overlapping gets.
  constexpr size_t kWindowBytes = 1 << 20;
  const size_t chunk = std::max<size_t>(1, std::min(len, kWindowBytes / sizeof(T) / static_cast<size_t>(m - 1)));
  std::vector<T> fetched(chunk * static_cast<size_t>(m - 1));
  std::vector<T> acc(len);
  for (size_t off = 0; off < len; off += chunk) {
    const size_t c = std::min(chunk, len - off);
    for (int k = 1; k < m; ++k)  // the member k after me goes to slot k - 1
      r.get(fetched.data() + static_cast<size_t>(k - 1) * chunk, source + lo + off, c * sizeof(T),
            g.pes[(g.me + k) % m], true);
    r.quiet();
    for (int j = 0; j < m; ++j) {
      const T* in = j == g.me ? source + lo + off : fetched.data() + static_cast<size_t>((j - g.me + m) % m - 1) * chunk;
      T* out = acc.data() + off;
      if (j == 0) std::copy(in, in + c, out);
      else combine_into<T, Op>(out, in, c);
    }
  }
  std::copy(acc.begin(), acc.end(), dest + lo);
  group_barrier(g, fn);  // every block is combined, and nobody reads a source any more
  for (int k = 1; k < m; ++k) {
    const int j = (g.me + k) % m;
    const size_t at = begin(j), cnt = begin(j + 1) - at;
    if (cnt) r.get(dest + at, dest + at, cnt * sizeof(T), g.pes[j], true);
  }
  group_barrier(g, fn);  // its quiet completes the gets; then nobody reads this PE's dest any more
}

// Every member combines the members' sources in team order, so floating-point
// results are bit-identical on all PEs. Sources are read in place when the peer is
// mapped (shm), else fetched in chunks. `upto` members are combined: all of them for a
// reduction, the first me+1 (inclusive scan) or me (exclusive scan: none gives zeros).
template <typename T, typename Op>
void reduce_group(Group& g, T* dest, const T* source, size_t n, const char* fn, int upto = -1) {
  auto& r = rt(fn);
  const bool reduction = upto < 0;  // a scan's `upto` differs per member: it never splits
  if (reduction) upto = g.n;
  if (StagedParts parts = stage_and_meet(g, source, n * sizeof(T), fn); parts.valid()) {
    // Every member combines the staged parts in team order (they stay put until everyone
    // arrived at the next meeting), so dest may alias source.
    std::vector<T> acc(n);
    std::vector<T> in(n);
    for (int j = 0; j < upto; ++j) {
      std::memcpy(j == 0 ? acc.data() : in.data(), parts.part(j), n * sizeof(T));
      if (j > 0) combine_into<T, Op>(acc.data(), in.data(), n);
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
      if (j == 0) std::copy(parts.begin(), parts.begin() + static_cast<ptrdiff_t>(n), acc.begin());
      else combine_into<T, Op>(acc.data(), parts.data() + static_cast<size_t>(j) * n, n);
    }
    std::copy(acc.begin(), acc.end(), dest);
    return;
  }
  if (reduction && g.n > 2 && n >= static_cast<size_t>(g.n) && !shares_this_host(g, r))
    return reduce_split<T, Op>(g, dest, source, n, fn);
  group_barrier(g, fn);
  std::vector<T> acc(n);  // value-initialized: zeros
  // Sources of unmapped members are fetched a window at a time, every member's chunk with a
  // non-blocking get and one quiet, so that their round trips overlap instead of adding up.
  std::vector<const T*> mapped(static_cast<size_t>(upto));
  std::vector<size_t> slot(static_cast<size_t>(upto));  // an unmapped member's place in `fetched`
  int remote = 0;
  for (int j = 0; j < upto; ++j) {
    mapped[j] = static_cast<const T*>(r.ptr(source, g.pes[j]));
    if (!mapped[j]) slot[j] = static_cast<size_t>(remote++);
  }
  constexpr size_t kWindowBytes = 1 << 20;
  const size_t chunk = std::max<size_t>(1, std::min(n, kWindowBytes / sizeof(T) / std::max(remote, 1)));
  std::vector<T> fetched(chunk * static_cast<size_t>(remote));
  for (size_t off = 0; off < n; off += chunk) {
    const size_t len = std::min(chunk, n - off);
    if (remote) {
      for (int j = 0; j < upto; ++j)
        if (!mapped[j]) r.get(fetched.data() + slot[j] * chunk, source + off, len * sizeof(T), g.pes[j], true);
      r.quiet();
    }
    for (int j = 0; j < upto; ++j) {
      const T* in = mapped[j] ? mapped[j] + off : fetched.data() + slot[j] * chunk;
      if (j == 0) std::copy(in, in + len, acc.begin() + static_cast<ptrdiff_t>(off));
      else combine_into<T, Op>(acc.data() + off, in, len);
    }
  }
  group_barrier(g, fn);  // every member has read every source: dest may alias source now
  std::copy(acc.begin(), acc.end(), dest);
}

template <typename T, typename Op>
int reduce(shmem_team_t team, T* dest, const T* source, size_t n, const char* fn) noexcept {
  return capi_call(fn, [&] {
  Group g = team_group(team, fn);
  if (g.me < 0) return -1;
  if (n) check_symmetric(dest, n * sizeof(T), fn), check_symmetric(source, n * sizeof(T), fn);
  reduce_group<T, Op>(g, dest, source, n, fn);
  return 0;
  });
}

// OpenSHMEM 1.6 shmem_TYPENAME_sum_inscan / _exscan: prefix sums over the team's members.
template <typename T, bool kInclusive>
int sum_scan(shmem_team_t team, T* dest, const T* source, size_t n, const char* fn) noexcept {
  return capi_call(fn, [&] {
  Group g = team_group(team, fn);
  if (g.me < 0) return -1;
  if (n) check_symmetric(dest, n * sizeof(T), fn), check_symmetric(source, n * sizeof(T), fn);
  reduce_group<T, OpSum>(g, dest, source, n, fn, kInclusive ? g.me + 1 : g.me);
  return 0;
  });
}

template <typename T, typename Op>
void reduce_active(T* dest, const T* source, int nreduce, int start, int log_stride, int size, long* psync,
                   const char* fn) noexcept {
  return capi_call(fn, [&] {
  if (nreduce < 0) mori::raise(mori::Status::kInvalidArgument, "nreduce is negative (%d)", nreduce);
  Group g = active_group(start, log_stride, size, psync, fn);
  if (nreduce) check_symmetric(dest, nreduce * sizeof(T), fn), check_symmetric(source, nreduce * sizeof(T), fn);
  reduce_group<T, Op>(g, dest, source, static_cast<size_t>(nreduce), fn);
  });
}

}  // namespace mori::capi
