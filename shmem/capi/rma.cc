// SPDX-License-Identifier: MIT
// RMA and AMO entry points shared by every typed routine, plus the ordering routines.
#include "capi/typed_helpers.h"
#include "mori/core/status.h"

namespace mori::capi {

void put(shmem_ctx_t ctx, void* dest, const void* source, size_t bytes, int pe, bool nbi, const char* fn) noexcept {
  if (bytes == 0 || ctx == SHMEM_CTX_INVALID) return;  // zero-length RMA is a no-op, even on NULL
  MORI_CAPI_TRY
  rt(fn).put(dest, source, bytes, world_pe(ctx, pe, fn), nbi);
  MORI_CAPI_CATCH(fn)
}

void get(shmem_ctx_t ctx, void* dest, const void* source, size_t bytes, int pe, bool nbi, const char* fn) noexcept {
  if (bytes == 0 || ctx == SHMEM_CTX_INVALID) return;
  MORI_CAPI_TRY
  rt(fn).get(dest, source, bytes, world_pe(ctx, pe, fn), nbi);
  MORI_CAPI_CATCH(fn)
}

void iput(shmem_ctx_t ctx, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, size_t elem,
          int pe, const char* fn) noexcept {
  if (nelems == 0 || ctx == SHMEM_CTX_INVALID) return;
  MORI_CAPI_TRY
  auto& r = rt(fn);
  r.iput(dest, source, dst, sst, nelems, elem, world_pe(ctx, pe, fn));
  r.quiet();  // a blocking iput returns with the data delivered
  MORI_CAPI_CATCH(fn)
}

void iget(shmem_ctx_t ctx, void* dest, const void* source, ptrdiff_t dst, ptrdiff_t sst, size_t nelems, size_t elem,
          int pe, const char* fn) noexcept {
  if (nelems == 0 || ctx == SHMEM_CTX_INVALID) return;
  MORI_CAPI_TRY
  rt(fn).iget(dest, source, dst, sst, nelems, elem, world_pe(ctx, pe, fn));
  MORI_CAPI_CATCH(fn)
}

void put_signal(shmem_ctx_t ctx, void* dest, const void* source, size_t bytes, uint64_t* sig_addr, uint64_t signal,
                int sig_op, int pe, bool nbi, const char* fn) noexcept {
  if (ctx == SHMEM_CTX_INVALID) return;
  MORI_CAPI_TRY
  if (sig_op != SHMEM_SIGNAL_SET && sig_op != SHMEM_SIGNAL_ADD)
    raise(Status::kInvalidArgument, "sig_op must be SHMEM_SIGNAL_SET or SHMEM_SIGNAL_ADD, got %d", sig_op);
  rt(fn).put_signal(dest, source, bytes, sig_addr, signal, sig_op == SHMEM_SIGNAL_SET ? SignalOp::kSet : SignalOp::kAdd,
                    world_pe(ctx, pe, fn), nbi);
  MORI_CAPI_CATCH(fn)
}

uint64_t amo(shmem_ctx_t ctx, void* target, AmoOp op, size_t width, uint64_t operand, uint64_t cond, int pe,
             const char* fn) noexcept {
  if (ctx == SHMEM_CTX_INVALID) return 0;
  MORI_CAPI_TRY
  return rt(fn).atomic(target, op, static_cast<int>(width), operand, cond, world_pe(ctx, pe, fn), fn);
  MORI_CAPI_CATCH(fn)
}

}  // namespace mori::capi

using namespace mori::capi;

extern "C" {

void shmem_fence(void) {
  MORI_CAPI_TRY
  rt("shmem_fence").fence();
  MORI_CAPI_CATCH("shmem_fence")
}

void shmem_quiet(void) {
  MORI_CAPI_TRY
  rt("shmem_quiet").quiet();
  MORI_CAPI_CATCH("shmem_quiet")
}

void shmem_ctx_fence(shmem_ctx_t ctx) {
  if (ctx == SHMEM_CTX_INVALID) return;
  shmem_fence();
}

void shmem_ctx_quiet(shmem_ctx_t ctx) {
  if (ctx == SHMEM_CTX_INVALID) return;
  shmem_quiet();
}

}  // extern "C"
