# SPDX-License-Identifier: MIT
"""Triton kernels over MORI-IR (``mori.ir.triton.mori_shmem_device``) that ``mori bench ir`` times and
the GPU tests check: a block put, a put with signal, a one-shot and a ring all-reduce.

Launch them with ``extern_libs=mori.ir.triton.get_extern_libs()`` after shmem init and
``mori.ir.triton.install_hook()``. The all-reduces sum in fp32 and store the input's dtype.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mori import ir, shmem
from mori.ir.triton import mori_shmem_device as msd

# constexpr copies: a @triton.jit function sees module globals only as constexprs
CMP_GE = tl.constexpr(shmem.CMP_GE)
SIGNAL_ADD = tl.constexpr(ir.SIGNAL_ADD)
SIGNAL_SET = tl.constexpr(ir.SIGNAL_SET)


@triton.jit
def thread_id():
    """This thread's index in its program (%tid.x): guards a call that must happen once per program."""
    return tl.inline_asm_elementwise("mov.u32 $0, %tid.x;", "=r", [], dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def put_kernel(dst, src, nbytes_per_program, pe):
    """Program i puts bytes [i*share, (i+1)*share) of src to dst on `pe` (putmem_nbi_block)."""
    off = tl.program_id(0).to(tl.int64) * nbytes_per_program
    msd.putmem_nbi_block(dst + off, src + off, nbytes_per_program, pe, 0)


@triton.jit
def put_signal_kernel(dst, src, sig, nbytes_per_program, pe):
    """As put_kernel, then each program ADDs 1 to `sig` on `pe` (putmem_nbi_signal_block)."""
    off = tl.program_id(0).to(tl.int64) * nbytes_per_program
    msd.putmem_nbi_signal_block(dst + off, src + off, nbytes_per_program, sig, 1, SIGNAL_ADD, pe, 0)


@triton.jit
def oneshot_allreduce_kernel(data, gather, sig, out, epoch, n, npes_c: tl.constexpr, BLOCK: tl.constexpr):
    """One program per PE: put my chunk into slot `me` of every peer's gather buffer with an ADD to its
    signal, wait until every peer's put of this epoch landed, sum the slots in fp32.
    `epoch` counts calls from 1; the opening barrier keeps a fast PE's next call from overwriting a
    gather slot a slow PE is still reading."""
    me = msd.my_pe()
    msd.barrier_all_block()
    nbytes = n * data.dtype.element_ty.primitive_bitwidth // 8
    for i in range(1, npes_c):
        peer = (me + i) % npes_c
        msd.putmem_nbi_signal_block(gather + me * n, data, nbytes, sig, 1, SIGNAL_ADD, peer, 0)
    msd.uint64_wait_until_greater_than(sig, epoch * (npes_c - 1) - 1)
    offs = tl.arange(0, BLOCK)
    for start in range(0, n, BLOCK):
        m = start + offs < n
        acc = tl.load(data + start + offs, mask=m, other=0).to(tl.float32)  # my own chunk, never put
        for p in tl.static_range(npes_c):
            acc += tl.load(gather + p * n + start + offs, mask=m & (p != me), other=0, volatile=True).to(tl.float32)
        tl.store(out + start + offs, acc.to(out.dtype.element_ty), mask=m)


@triton.jit
def _stripe(c, chunk, stripe, pid, n):
    """Element range [lo, hi) of chunk c that program pid owns (hi <= lo when empty). chunk and
    stripe are multiples of 8 elements, so lo is: Triton can then use 16-byte accesses (it does
    when it also knows n % 16 == 0, its launch-time specialization)."""
    lo = c * chunk + pid * stripe
    hi = tl.minimum(tl.minimum(lo + stripe, (c + 1) * chunk), n)
    return tl.multiple_of(lo, 8), hi


@triton.jit
def ring_allreduce_kernel(data, work, rs, ag, sig, ack, out, epoch, n, npes_c: tl.constexpr, BLOCK: tl.constexpr):
    """Ring all-reduce of n elements: npes-1 reduce-scatter steps (put my partial chunk to the right
    neighbour's `rs` with a signal; when the left one's arrives, add it to my data into `work`), then
    npes-1 all-gather steps (forward the reduced chunks into the right neighbour's `ag`). Each chunk is
    split into one stripe per program, each program with its own signal `sig[pid]`.

    data, work, out: local (n elements); rs, ag: symmetric (n elements); sig, ack: symmetric uint64,
    one per program, zero before the first call; `epoch` counts calls from 1. A program writes into its
    right neighbour only after that neighbour acknowledged the previous epoch (`ack[pid]`), so back to
    back calls never overwrite a buffer still being read. Chunks and stripes are rounded up to whole
    8-element (16-byte) units, the last ones shorter or empty."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    me = msd.my_pe()
    right = (me + 1) % npes_c
    left = (me + npes_c - 1) % npes_c
    esize = data.dtype.element_ty.primitive_bitwidth // 8
    chunk = tl.cdiv(tl.cdiv(n, npes_c), 8).to(tl.int64) * 8
    stripe = tl.cdiv(tl.cdiv(chunk, programs), 8) * 8
    base = (epoch - 1) * 2 * (npes_c - 1)
    offs = tl.arange(0, BLOCK)
    msd.uint64_wait_until(ack + pid, CMP_GE, epoch - 1)  # the right neighbour is done with the last call
    # reduce-scatter
    for s in tl.static_range(npes_c - 1):
        lo, hi = _stripe((me - s + npes_c) % npes_c, chunk, stripe, pid, n)
        nbytes = tl.maximum(hi - lo, 0) * esize
        if s == 0:
            msd.putmem_nbi_signal_block(rs + lo, data + lo, nbytes, sig + pid, 1, SIGNAL_ADD, right, 0)
        else:
            tl.debug_barrier()  # every thread's adds into work are in before the block's put reads them
            msd.putmem_nbi_signal_block(rs + lo, work + lo, nbytes, sig + pid, 1, SIGNAL_ADD, right, 0)
        msd.uint64_wait_until(sig + pid, CMP_GE, base + s + 1)
        lo, hi = _stripe((me - s - 1 + 2 * npes_c) % npes_c, chunk, stripe, pid, n)
        for start in range(lo, hi, BLOCK):
            m = start + offs < hi
            acc = tl.load(data + start + offs, mask=m, other=0).to(tl.float32)
            acc += tl.load(rs + start + offs, mask=m, other=0, volatile=True).to(tl.float32)
            tl.store(work + start + offs, acc.to(work.dtype.element_ty), mask=m)
    # all-gather: work holds the reduced chunk me+1; the others arrive in ag
    tl.debug_barrier()
    for s in tl.static_range(npes_c - 1):
        lo, hi = _stripe((me + 1 - s + npes_c) % npes_c, chunk, stripe, pid, n)
        nbytes = tl.maximum(hi - lo, 0) * esize
        if s == 0:
            msd.putmem_nbi_signal_block(ag + lo, work + lo, nbytes, sig + pid, 1, SIGNAL_ADD, right, 0)
        else:
            msd.putmem_nbi_signal_block(ag + lo, ag + lo, nbytes, sig + pid, 1, SIGNAL_ADD, right, 0)
        msd.uint64_wait_until(sig + pid, CMP_GE, base + npes_c + s)
    for c in tl.static_range(npes_c):
        lo, hi = _stripe(c, chunk, stripe, pid, n)
        mine = c == (me + 1) % npes_c
        theirs = c != (me + 1) % npes_c
        for start in range(lo, hi, BLOCK):
            m = start + offs < hi
            v = tl.load(work + start + offs, mask=m & mine, other=0)
            v += tl.load(ag + start + offs, mask=m & theirs, other=0, volatile=True)
            tl.store(out + start + offs, v, mask=m)
    tl.debug_barrier()  # every thread read its rs/ag before the left neighbour may write them again
    if thread_id() == 0:  # one system-scope release to the peer, not one per thread
        msd.signal_op(ack + pid, epoch, SIGNAL_SET, left)
