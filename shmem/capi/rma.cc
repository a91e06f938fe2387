// SPDX-License-Identifier: MIT
// RMA and AMO entry points shared by every typed routine, plus the ordering routines.
#include "capi/typed_helpers.h"
#include "mori/core/status.h"

namespace mori::capi {
namespace {

// OpenSHMEM 1.6 shmem_(ctx_)pe_quiet: the PEs are checked (team-relative for a team context;
// the list is not read when npes is 0), then everything is completed: the runtime's quiet is
// per PE, not per target, and completing more than asked is allowed.
void pe_quiet(shmem_ctx_t ctx, const int* target_pes, size_t npes, const char* fn) noexcept {
  return capi_call(fn, [&] {
    if (ctx == SHMEM_CTX_INVALID) return;
    auto& r = rt(fn);
    if (npes && !target_pes) raise(Status::kInvalidArgument, "target_pes is NULL with npes %zu", npes);
    for (size_t i = 0; i < npes; ++i) {
      try {
        r.check_pe(world_pe(ctx, target_pes[i], fn), fn);
      } catch (const std::exception& e) {
        raise(Status::kInvalidArgument, "target_pes[%zu] (%d): %s", i, target_pes[i], e.what());
      }
    }
    r.quiet();
  });
}

}  // namespace

void put(shmem_ctx_t ctx, void* dest, const void* source, size_t bytes, int pe, bool nbi, const char* fn) noexcept {
  if (bytes == 0 || ctx == SHMEM_CTX_INVALID) return;  // zero-length RMA is a no-op, even on NULL
  return capi_call(fn, [&] { rt(fn).put(dest, source, bytes, world_pe(ctx, pe, fn), nbi); });
}

void get(shmem_ctx_t ctx, void* dest, const void* source, size_t bytes, int pe, bool nbi, const char* fn) noexcept {
  if (bytes == 0 || ctx == SHMEM_CTX_INVALID) return;
  return capi_call(fn, [&] { rt(fn).get(dest, source, bytes, world_pe(ctx, pe, fn), nbi); });
}

void iput(shmem_ctx_t ctx, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, size_t elem,
          int pe, const char* fn) noexcept {
  if (nelems == 0 || ctx == SHMEM_CTX_INVALID) return;
  return capi_call(fn, [&] {
    auto& r = rt(fn);
    r.iput(dest, source, dst, sst, nelems, elem, world_pe(ctx, pe, fn));
    r.quiet();  // a blocking iput returns with the data delivered
  });
}

void iget(shmem_ctx_t ctx, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, size_t elem,
          int pe, const char* fn) noexcept {
  if (nelems == 0 || ctx == SHMEM_CTX_INVALID) return;
  return capi_call(fn, [&] { rt(fn).iget(dest, source, dst, sst, nelems, elem, world_pe(ctx, pe, fn)); });
}

namespace {

// Byte offset of block k (k < nblocks) at a stride of `stride` elements, checked for overflow.
size_t block_offset(ptrdiff_t stride, size_t nblocks, size_t bsize, size_t elem, const char* name) {
  if (stride < 1) raise(Status::kInvalidArgument, "%s must be >= 1, got %td", name, stride);
  size_t span = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(stride), nblocks - 1, &span) ||
      __builtin_add_overflow(span, bsize, &span) || __builtin_mul_overflow(span, elem, &span))
    raise(Status::kInvalidArgument, "%s %td with %zu blocks of %zu elements overflows the address space", name, stride,
          nblocks, bsize);
  return static_cast<size_t>(stride) * elem;
}

}  // namespace

void ibput(shmem_ctx_t ctx, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks,
           size_t elem, int pe, const char* fn) noexcept {
  if (bsize == 0 || nblocks == 0 || ctx == SHMEM_CTX_INVALID) return;
  return capi_call(fn, [&] {
    size_t dstep = block_offset(dst, nblocks, bsize, elem, "dst"),
           sstep = block_offset(sst, nblocks, bsize, elem, "sst");
    auto& r = rt(fn);
    int wpe = world_pe(ctx, pe, fn);
    for (size_t k = 0; k < nblocks; ++k)
      r.put(static_cast<char*>(dest) + k * dstep, static_cast<const char*>(source) + k * sstep, bsize * elem, wpe,
            false);
  });
}

void ibget(shmem_ctx_t ctx, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t bsize, size_t nblocks,
           size_t elem, int pe, const char* fn) noexcept {
  if (bsize == 0 || nblocks == 0 || ctx == SHMEM_CTX_INVALID) return;
  return capi_call(fn, [&] {
    size_t dstep = block_offset(dst, nblocks, bsize, elem, "dst"),
           sstep = block_offset(sst, nblocks, bsize, elem, "sst");
    auto& r = rt(fn);
    int wpe = world_pe(ctx, pe, fn);
    for (size_t k = 0; k < nblocks; ++k)
      r.get(static_cast<char*>(dest) + k * dstep, static_cast<const char*>(source) + k * sstep, bsize * elem, wpe,
            false);
  });
}

void put_signal(shmem_ctx_t ctx, void* dest, const void* source, size_t bytes, uint64_t* sig_addr, uint64_t signal,
                int sig_op, int pe, bool nbi, const char* fn) noexcept {
  if (ctx == SHMEM_CTX_INVALID) return;
  return capi_call(fn, [&] {
    if (sig_op != SHMEM_SIGNAL_SET && sig_op != SHMEM_SIGNAL_ADD)
      raise(Status::kInvalidArgument, "sig_op must be SHMEM_SIGNAL_SET or SHMEM_SIGNAL_ADD, got %d", sig_op);
    rt(fn).put_signal(dest, source, bytes, sig_addr, signal,
                      sig_op == SHMEM_SIGNAL_SET ? SignalOp::kSet : SignalOp::kAdd, world_pe(ctx, pe, fn), nbi);
  });
}

uint64_t amo(shmem_ctx_t ctx, void* target, AmoOp op, size_t width, uint64_t operand, uint64_t cond, int pe,
             const char* fn) noexcept {
  if (ctx == SHMEM_CTX_INVALID) return 0;
  return capi_call(
      fn, [&] { return rt(fn).atomic(target, op, static_cast<int>(width), operand, cond, world_pe(ctx, pe, fn), fn); });
}

}  // namespace mori::capi

using namespace mori::capi;

extern "C" {

void shmem_fence(void) {
  return capi_call("shmem_fence", [&] { rt("shmem_fence").fence(); });
}

void shmem_quiet(void) {
  return capi_call("shmem_quiet", [&] { rt("shmem_quiet").quiet(); });
}

void shmem_ctx_fence(shmem_ctx_t ctx) {
  if (ctx == SHMEM_CTX_INVALID) return;
  shmem_fence();
}

void shmem_ctx_quiet(shmem_ctx_t ctx) {
  if (ctx == SHMEM_CTX_INVALID) return;
  shmem_quiet();
}

void shmem_ctx_pe_quiet(shmem_ctx_t ctx, const int* target_pes, size_t npes) {
  pe_quiet(ctx, target_pes, npes, "shmem_ctx_pe_quiet");
}
void shmem_pe_quiet(const int* target_pes, size_t npes) {
  pe_quiet(SHMEM_CTX_DEFAULT, target_pes, npes, "shmem_pe_quiet");
}

}  // extern "C"
