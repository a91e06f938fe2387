// SPDX-License-Identifier: MIT
// What the generated typed routines (typed_gen.cc) forward to: byte-level RMA,
// word-level AMOs and waits, and typed reductions. Every helper is noexcept: it
// reports a failure through capi::fail, naming the public routine `fn`.
#pragma once

#include <shmem.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "capi/collectives.h"
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
size_t wait_until_many(Many kind, const void* ivars, size_t elem, size_t n, size_t* indices, const int* status, int cmp,
                       const void* values, uint64_t scalar, mori::shmem::Word w, const char* fn) noexcept;
size_t test_many(Many kind, const void* ivars, size_t elem, size_t n, size_t* indices, const int* status, int cmp,
                 const void* values, uint64_t scalar, mori::shmem::Word w, const char* fn) noexcept;

// ---- team collectives (bytes); return 0, or -1 when called by a PE outside the team
int broadcast(shmem_team_t team, void* dest, const void* source, size_t bytes, int root, const char* fn) noexcept;
int collect(shmem_team_t team, void* dest, const void* source, size_t bytes, const char* fn) noexcept;
int fcollect(shmem_team_t team, void* dest, const void* source, size_t bytes, const char* fn) noexcept;
int alltoall(shmem_team_t team, void* dest, const void* source, size_t bytes, const char* fn) noexcept;
int alltoalls(shmem_team_t team, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems,
              size_t elem, const char* fn) noexcept;

// ---- reductions: the collective engine's (mori/shmem/collective_engine.h) on the C types,
// combined natively by the core's reduction engine (mori/core/reduce.h)
using OpAnd = mori::Combine<mori::ReduceOp::kAnd>;
using OpOr = mori::Combine<mori::ReduceOp::kOr>;
using OpXor = mori::Combine<mori::ReduceOp::kXor>;
using OpMax = mori::Combine<mori::ReduceOp::kMax>;
using OpMin = mori::Combine<mori::ReduceOp::kMin>;
using OpSum = mori::Combine<mori::ReduceOp::kSum>;
using OpProd = mori::Combine<mori::ReduceOp::kProd>;

template <typename T, typename Op>
int reduce(shmem_team_t team, T* dest, const T* source, size_t n, const char* fn) noexcept {
  return capi_call(fn, [&] {
    Group g = team_group(team, fn);
    if (g.me < 0) return -1;
    if (n) check_symmetric(dest, n * sizeof(T), fn), check_symmetric(source, n * sizeof(T), fn);
    coll::reduce<T, Op::kOp>(g, dest, source, n, fn);
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
    coll::reduce<T, OpSum::kOp>(g, dest, source, n, fn, kInclusive ? g.me + 1 : g.me);
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
    coll::reduce<T, Op::kOp>(g, dest, source, static_cast<size_t>(nreduce), fn);
  });
}

}  // namespace mori::capi
