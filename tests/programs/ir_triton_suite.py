# SPDX-License-Identifier: MIT
"""MORI-IR checks: Triton kernels calling mori_shmem_device.* on every PE of a job.

    mori run -n 2 python ir_triton_suite.py [check ...]     # default: every check
    mori run -n 2 python ir_triton_suite.py pingpong        # 8-byte put+signal round trip, Triton vs CUDA C++

(Put and all-reduce times, Triton against CUDA C++: `mori bench ir`.)

Each PE binds GPU LOCAL_RANK % device_count (PEs may share a GPU), inits shmem, installs the
MORI-IR Triton hook, and runs the checks; every PE seeds the same generator per check, so each
can rebuild what its peers sent and compare exactly. Prints "PASS <check>" per check.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import triton
import triton.language as tl

LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))
torch.cuda.set_device(LOCAL_RANK % torch.cuda.device_count())

import mori.shmem as sh  # noqa: E402
from mori.ir import AMO_TYPES, SIGNAL_SET  # noqa: E402
from mori.ir.triton import get_extern_libs, install_hook, mori_shmem_device as msd  # noqa: E402
from mori.shmem.tensor_utils import mori_shmem_create_tensor, mori_shmem_free_tensor  # noqa: E402
from mori.apps.bench.ir_kernels import (
    oneshot_allreduce_kernel,
    put_kernel,
    ring_allreduce_kernel,  # noqa: E402
    thread_id,
)

LIBS: dict = {}


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(f"PE {sh.shmem_mype()}: {what}")


def sym_zeros(n: int, dtype: torch.dtype) -> torch.Tensor:
    t = mori_shmem_create_tensor((n,), dtype)
    t.zero_()
    torch.cuda.synchronize()
    sh.shmem_barrier_all()
    return t


# ---------------------------------------------------------------- kernels


@triton.jit
def query_kernel(out):
    tl.store(out, msd.my_pe())
    tl.store(out + 1, msd.n_pes())


@triton.jit
def read_neighbour_kernel(sym, out, n, BLOCK: tl.constexpr):
    me = msd.my_pe()
    peer = (me + 1) % msd.n_pes()
    remote = msd.ptr_p2p(sym, me, peer).to(tl.pointer_type(tl.int32))
    beyond = msd.ptr_p2p(sym, me, msd.n_pes())  # a PE that does not exist: 0
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(remote + offs, mask=offs < n), mask=offs < n)
    tl.store(out + n, beyond.to(tl.int32))


@triton.jit
def put_signal_kernel(dst, src, sig, out, nbytes, round_, sig_op, n, BLOCK: tl.constexpr):
    me = msd.my_pe()
    peer = (me + 1) % msd.n_pes()
    msd.putmem_nbi_signal_block(dst, src, nbytes, sig, round_, sig_op, peer, 0)
    seen = msd.uint64_wait_until_greater_than(sig, round_ - 1)
    offs = tl.arange(0, BLOCK)
    for start in range(0, n, BLOCK):
        m = start + offs < n
        tl.store(out + start + offs, tl.load(dst + start + offs, mask=m, volatile=True), mask=m)
    tl.store(out + n, seen.to(tl.uint8))


@triton.jit
def fetch_add_kernel(counter, olds, value, target_pe):
    if thread_id() == 0:
        old = msd.uint64_atomic_fetch_add_thread(counter, value, target_pe, 0)
        tl.store(olds, old)
    msd.barrier_all_block()


@triton.jit
def generic_amo_kernel(
    counter,
    slots,
    word,
    small,
    operand32,
    olds,
    value,
    value64,
    swap_new,
    miss,
    target_pe,
    amo_fetch_add,
    amo_fetch,
    amo_cas,
    amo_add,
):
    # MORI's generic forms, amo_type given at run time (the wrappers' switch picks the operation)
    if thread_id() == 0:
        me = msd.my_pe()
        tl.store(olds, msd.atomic_uint64_fetch_thread(counter, value, 0, amo_fetch_add, target_pe, 0))
        # a compare-swap that cannot match returns the slot and leaves it; a matching one swaps
        tl.store(olds + 1, msd.atomic_uint64_fetch_thread(slots + me, swap_new, miss, amo_cas, target_pe, 0))
        cur = msd.atomic_uint64_fetch_thread(slots + me, 0, 0, amo_fetch, target_pe, 0)
        tl.store(olds + 2, msd.atomic_uint64_fetch_thread(slots + me, swap_new, cur, amo_cas, target_pe, 0))
        msd.atomic_int64_nonfetch_thread(word, value64, amo_add, target_pe, 0)
        msd.atomic_size_nonfetch_thread(small, operand32, 4, amo_add, target_pe, 0)
        msd.quiet_thread_pe_qp(target_pe, 0)


@triton.jit
def bad_amo_kernel(counter, olds, amo_type):
    if thread_id() == 0:
        tl.store(olds, msd.atomic_uint64_fetch_thread(counter, 1, 0, amo_type, 0, 0))


@triton.jit
def size_imm_kernel(imm, src, right):
    # 1, 2, 4 and 8 bytes at offsets 1, 2, 4 and 8 of the right neighbour's buffer (byte 0 untouched)
    if thread_id() == 0:
        for k in tl.static_range(4):
            msd.put_size_imm_nbi_thread(imm + (1 << k), src + (1 << k), 1 << k, right, 0)
        msd.fence_thread_pe_qp(right, 0)


@triton.jit
def barrier_kernel(slots, rounds):
    # Each round: store the round into my slot on the right neighbour, barrier, read my own slot
    # (written by the left neighbour before its barrier), check it, barrier again before reuse.
    me = msd.my_pe()
    npes = msd.n_pes()
    right = (me + 1) % npes
    bad = 0
    for r in range(1, rounds + 1):
        if thread_id() == 0:
            msd.int64_p(slots + me, (r * 1000 + me).to(tl.int64), right, 0)
        msd.barrier_all_block()
        left = (me + npes - 1) % npes
        got = tl.load(slots + left, volatile=True)
        bad += (got != r * 1000 + left).to(tl.int32)
        msd.barrier_all_block()
    tl.store(slots + npes, bad.to(tl.int64))


@triton.jit
def _globaltimer():
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.uint64, is_pure=False, pack=1)


@triton.jit
def pingpong_kernel(data, sig, scratch, out, iters, peer, role, sig_op):
    # 8-byte put + signal round trips between two PEs, one thread each (as the CUDA C++ selftest).
    if thread_id() == 0:
        start = _globaltimer()
        bad = 0
        for i in range(1, iters + 1):
            if i == 2:
                start = _globaltimer()
            v = i.to(tl.uint64)
            if role == 0:
                tl.store(scratch, v)
                msd.putmem_nbi_signal_thread(data, scratch, 8, sig, v, sig_op, peer, 0)
                msd.uint64_wait_until(sig, 5, v)  # 5 = CMP_GE
                bad += (tl.load(data, volatile=True) != v).to(tl.int32)
            else:
                msd.uint64_wait_until(sig, 5, v)
                bad += (tl.load(data, volatile=True) != v).to(tl.int32)
                tl.store(scratch, v)
                msd.putmem_nbi_signal_thread(data, scratch, 8, sig, v, sig_op, peer, 0)
        tl.store(out, ((_globaltimer() - start) // (iters - 1).to(tl.uint64)).to(tl.int64))
        tl.store(out + 1, bad.to(tl.int64))


# ---------------------------------------------------------------- checks


def check_query(me: int, n: int) -> None:
    out = torch.full((2,), -7, dtype=torch.int32, device="cuda")
    query_kernel[(1,)](out, extern_libs=LIBS)
    torch.cuda.synchronize()
    expect(out.tolist() == [me, n], f"my_pe/n_pes from Triton {out.tolist()} != {[me, n]}")


def check_ptr_p2p(me: int, n: int) -> None:
    count = 100_003
    sym = sym_zeros(count, torch.int32)
    gen = torch.Generator().manual_seed(31)
    every = [torch.randint(-(2**31), 2**31 - 1, (count,), generator=gen, dtype=torch.int32) for _ in range(n)]
    sym.copy_(every[me].cuda())
    torch.cuda.synchronize()
    sh.shmem_barrier_all()
    out = torch.zeros(count + 1, dtype=torch.int32, device="cuda")
    read_neighbour_kernel[(triton.cdiv(count, 1024),)](sym, out, count, BLOCK=1024, extern_libs=LIBS)
    torch.cuda.synchronize()
    expect(torch.equal(out[:count].cpu(), every[(me + 1) % n]), "ptr_p2p read of the neighbour's buffer differs")
    expect(int(out[count]) == 0, f"ptr_p2p of PE n_pes gave {int(out[count])}, not 0")
    sh.shmem_barrier_all()
    mori_shmem_free_tensor(sym)


def check_put_signal(me: int, n: int) -> None:
    size = (1 << 20) + 13
    dst, sig = sym_zeros(size, torch.uint8), sym_zeros(1, torch.int64)
    for round_ in (1, 2, 3):
        gen = torch.Generator().manual_seed(1000 + round_)
        every = [torch.randint(0, 256, (size,), generator=gen, dtype=torch.uint8) for _ in range(n)]
        src = every[me].cuda()
        out = torch.zeros(size + 1, dtype=torch.uint8, device="cuda")
        put_signal_kernel[(1,)](
            dst, src, sig, out, size, round_, SIGNAL_SET, size, BLOCK=4096, num_warps=8, extern_libs=LIBS
        )
        torch.cuda.synchronize()
        expect(torch.equal(out[:size].cpu(), every[(me - 1) % n]), f"round {round_}: data after the signal differs")
        expect(int(out[size]) == round_, f"round {round_}: wait returned {int(out[size])}")
        expect(torch.equal(dst.cpu(), every[(me - 1) % n]), f"round {round_}: received buffer differs")
        sh.shmem_barrier_all()
    mori_shmem_free_tensor(dst)
    mori_shmem_free_tensor(sig)


def check_fetch_add(me: int, n: int) -> None:
    gen = torch.Generator().manual_seed(77)
    values = torch.randint(1, 1 << 40, (n,), generator=gen, dtype=torch.int64).tolist()
    start = int(torch.randint(0, 1 << 40, (1,), generator=gen, dtype=torch.int64))
    counter = sym_zeros(1, torch.int64)
    counter.fill_(start)
    torch.cuda.synchronize()
    sh.shmem_barrier_all()
    olds = torch.zeros(1, dtype=torch.int64, device="cuda")
    fetch_add_kernel[(1,)](counter, olds, values[me], 0, extern_libs=LIBS)
    torch.cuda.synchronize()
    sh.shmem_barrier_all()
    # every PE's old value is the start plus the values of some subset of the other PEs
    others = [v for i, v in enumerate(values) if i != me]
    possible = {start + sum(v for b, v in enumerate(others) if mask >> b & 1) for mask in range(1 << len(others))}
    old = int(olds.item())
    expect(old in possible, f"fetch_add returned {old}, not the start plus some of the other PEs' values")
    if me == 0:
        expect(int(counter.item()) == start + sum(values), f"counter {int(counter.item())} != {start + sum(values)}")
    sh.shmem_barrier_all()
    mori_shmem_free_tensor(counter)


def check_generic_amo(me: int, n: int) -> None:
    """Every PE, on PE 0's words: generic fetch-add, compare-swap (one that misses, one that hits),
    int64 non-fetching add of signed values, 4-byte add by size with the operand in local memory."""
    gen = torch.Generator().manual_seed(91)
    values = torch.randint(1, 1 << 40, (n,), generator=gen, dtype=torch.int64).tolist()
    values64 = torch.randint(-(1 << 40), 1 << 40, (n,), generator=gen, dtype=torch.int64).tolist()
    values32 = torch.randint(1, 1 << 31, (n,), generator=gen, dtype=torch.int64).tolist()
    start, start64, start32 = (int(x) for x in torch.randint(0, 1 << 40, (3,), generator=gen, dtype=torch.int64))
    start32 %= 1 << 32
    slot_init = torch.randint(0, 1 << 62, (n,), generator=gen, dtype=torch.int64)
    swap_new = torch.randint(0, 1 << 62, (n,), generator=gen, dtype=torch.int64).tolist()
    counter, slots, word = sym_zeros(1, torch.int64), sym_zeros(n, torch.int64), sym_zeros(1, torch.int64)
    small = sym_zeros(1, torch.int32)
    counter.fill_(start)
    slots.copy_(slot_init.cuda())
    word.fill_(start64)
    small.fill_(start32 - (1 << 32) if start32 >= 1 << 31 else start32)  # the uint32's bits in an int32
    operand32 = torch.tensor([values32[me]], dtype=torch.int32, device="cuda")  # < 2**31
    olds = torch.zeros(3, dtype=torch.int64, device="cuda")
    torch.cuda.synchronize()
    sh.shmem_barrier_all()
    miss = int(slot_init[me]) + 1
    generic_amo_kernel[(1,)](
        counter,
        slots,
        word,
        small,
        operand32,
        olds,
        values[me],
        values64[me],
        swap_new[me],
        miss,
        0,
        AMO_TYPES["AMO_FETCH_ADD"],
        AMO_TYPES["AMO_FETCH"],
        AMO_TYPES["AMO_COMPARE_SWAP"],
        AMO_TYPES["AMO_ADD"],
        extern_libs=LIBS,
    )
    torch.cuda.synchronize()
    sh.shmem_barrier_all()
    others = [v for i, v in enumerate(values) if i != me]
    possible = {start + sum(v for b, v in enumerate(others) if mask >> b & 1) for mask in range(1 << len(others))}
    got = olds.tolist()
    expect(got[0] in possible, f"generic fetch_add returned {got[0]}, not the start plus some of the others' values")
    expect(got[1] == int(slot_init[me]), f"compare-swap that misses returned {got[1]}, not {int(slot_init[me])}")
    expect(got[2] == int(slot_init[me]), f"compare-swap that hits returned {got[2]}, not {int(slot_init[me])}")
    if me == 0:
        expect(int(counter.item()) == start + sum(values), f"counter {int(counter.item())} != {start + sum(values)}")
        expect(slots.cpu().tolist() == swap_new, f"slots after compare-swap {slots.cpu().tolist()} != {swap_new}")
        want64 = start64 + sum(values64)
        expect(int(word.item()) == want64, f"int64 add: {int(word.item())} != {want64}")
        want32 = (start32 + sum(values32)) % (1 << 32)
        got32 = int(small.item()) % (1 << 32)
        expect(got32 == want32, f"4-byte add by size: {got32} != {want32}")
    sh.shmem_barrier_all()
    for t in (counter, slots, word, small):
        mori_shmem_free_tensor(t)


def check_size_imm(me: int, n: int) -> None:
    imm = sym_zeros(16, torch.uint8)
    every = [
        torch.randint(0, 256, (16,), generator=torch.Generator().manual_seed(40 + pe), dtype=torch.uint8)
        for pe in range(n)
    ]
    size_imm_kernel[(1,)](imm, every[me].cuda(), (me + 1) % n, extern_libs=LIBS)
    torch.cuda.synchronize()
    sh.shmem_barrier_all()
    want = every[(me - 1) % n].clone()
    want[0] = 0
    expect(
        torch.equal(imm.cpu(), want), f"size_imm puts from the left neighbour: {imm.cpu().tolist()} != {want.tolist()}"
    )
    sh.shmem_barrier_all()
    mori_shmem_free_tensor(imm)


def check_bad_amo(me: int, n: int) -> None:
    """A fetching atomic given a non-fetching amo_type (AMO_ADD) traps: the launch fails."""
    counter = sym_zeros(1, torch.int64)
    olds = torch.zeros(1, dtype=torch.int64, device="cuda")
    try:
        bad_amo_kernel[(1,)](counter, olds, AMO_TYPES["AMO_ADD"], extern_libs=LIBS)
        torch.cuda.synchronize()
    except Exception as exc:  # the sticky CUDA error, as in check_bad_pe
        print(f"TRAPPED PE {me}: {type(exc).__name__}: {str(exc).splitlines()[0]}", flush=True)
        sys.stdout.flush()
        os._exit(0)
    raise AssertionError(f"PE {me}: atomic_uint64_fetch_thread with amo_type AMO_ADD returned {int(olds.item())}")


def check_barrier(me: int, n: int) -> None:
    slots = sym_zeros(n + 1, torch.int64)
    barrier_kernel[(1,)](slots, 50, extern_libs=LIBS)
    torch.cuda.synchronize()
    expect(int(slots[n]) == 0, f"{int(slots[n])} of 50 rounds saw a stale slot after barrier_all_block")
    sh.shmem_barrier_all()
    mori_shmem_free_tensor(slots)


def check_allreduce(me: int, n: int) -> None:
    count = 65_537
    gather, sig = sym_zeros(n * count, torch.bfloat16), sym_zeros(1, torch.int64)
    for epoch in (1, 2):
        gen = torch.Generator().manual_seed(500 + epoch)
        # small integers: every partial sum is exact in fp32 and bf16, so torch's order matches ours
        every = [torch.randint(-64, 64, (count,), generator=gen).to(torch.bfloat16) for _ in range(n)]
        data = every[me].cuda()
        out = torch.zeros(count, dtype=torch.bfloat16, device="cuda")
        oneshot_allreduce_kernel[(1,)](
            data, gather, sig, out, epoch, count, npes_c=n, BLOCK=2048, num_warps=8, extern_libs=LIBS
        )
        torch.cuda.synchronize()
        ref = torch.stack(every).float().sum(0).to(torch.bfloat16)
        expect(torch.equal(out.cpu(), ref), f"epoch {epoch}: all-reduce differs from torch")
        sh.shmem_barrier_all()
    mori_shmem_free_tensor(gather)
    mori_shmem_free_tensor(sig)


def check_bad_pe(me: int, n: int) -> None:
    """A put to a PE that does not exist traps in the kernel (message from device.cuh): the launch
    fails, nothing is written silently. The context is dead afterwards: report and leave at once."""
    buf = sym_zeros(1024, torch.uint8)
    src = torch.ones(1024, dtype=torch.uint8, device="cuda")
    try:
        put_kernel[(1,)](buf, src, 1024, n, num_warps=4, extern_libs=LIBS)
        torch.cuda.synchronize()
    except Exception as exc:  # torch/triton raise RuntimeError or their own on the sticky CUDA error
        print(f"TRAPPED PE {me}: {type(exc).__name__}: {str(exc).splitlines()[0]}", flush=True)
        sys.stdout.flush()
        os._exit(0)
    raise AssertionError(f"PE {me}: a put to PE {n} of {n} completed without an error")


def check_ring_allreduce(me: int, n: int) -> None:
    """Ring all-reduce (reduce-scatter + all-gather by put-with-signal), 3 back-to-back calls with
    no host barrier between them, on 1 and 3 programs and a count no chunk split divides evenly."""
    count = 3 * 65_537 + 5
    rs, ag = sym_zeros(count, torch.bfloat16), sym_zeros(count, torch.bfloat16)
    for programs in (1, 3):
        sig, ack = sym_zeros(programs, torch.int64), sym_zeros(programs, torch.int64)
        outs, refs = [], []
        for epoch in (1, 2, 3):
            gen = torch.Generator().manual_seed(700 + 10 * programs + epoch)
            # small integers: every partial sum is exact in fp32 and bf16, whatever the order
            every = [torch.randint(-64, 64, (count,), generator=gen).to(torch.bfloat16) for _ in range(n)]
            data, work = every[me].cuda(), torch.zeros(count, dtype=torch.bfloat16, device="cuda")
            out = torch.zeros(count, dtype=torch.bfloat16, device="cuda")
            ring_allreduce_kernel[(programs,)](
                data, work, rs, ag, sig, ack, out, epoch, count, npes_c=n, BLOCK=1024, num_warps=4, extern_libs=LIBS
            )
            outs.append((data, work, out))
            refs.append(torch.stack(every).float().sum(0).to(torch.bfloat16))
        torch.cuda.synchronize()
        for epoch, ((_, _, out), ref) in enumerate(zip(outs, refs), 1):
            expect(torch.equal(out.cpu(), ref), f"{programs} programs, call {epoch}: ring all-reduce differs")
        sh.shmem_barrier_all()
        mori_shmem_free_tensor(sig)
        mori_shmem_free_tensor(ack)
    mori_shmem_free_tensor(rs)
    mori_shmem_free_tensor(ag)


CHECKS = {
    "query": check_query,
    "ptr_p2p": check_ptr_p2p,
    "put_signal": check_put_signal,
    "fetch_add": check_fetch_add,
    "barrier": check_barrier,
    "allreduce": check_allreduce,
    "ring_allreduce": check_ring_allreduce,
    "generic_amo": check_generic_amo,
    "size_imm": check_size_imm,
}
FATAL_CHECKS = {"bad_pe": check_bad_pe, "bad_amo": check_bad_amo}  # they leave the CUDA context dead


# ---------------------------------------------------------------- benchmark


def pingpong_bench(me: int, n: int, iters: int = 2000) -> dict:
    """Round-trip time of an 8-byte put with signal, PE 0 <-> PE 1: Triton vs CUDA C++ (selftest)."""
    from mori.shmem import selftest

    data, sig = sym_zeros(1, torch.int64), sym_zeros(1, torch.int64)
    scratch, out = torch.zeros(1, dtype=torch.int64, device="cuda"), torch.zeros(2, dtype=torch.int64, device="cuda")
    result = {}
    for impl in ("triton", "cuda", "triton", "cuda"):  # twice each: the first Triton run includes its compile
        sig.zero_()
        torch.cuda.synchronize()
        sh.shmem_barrier_all()
        if me >= 2:
            pass  # only PEs 0 and 1 play
        elif impl == "triton":
            pingpong_kernel[(1,)](data, sig, scratch, out, iters, 1 - me, me, SIGNAL_SET, num_warps=1, extern_libs=LIBS)
        else:
            selftest.pingpong(me, data.data_ptr(), sig.data_ptr(), iters, 1 - me, out.data_ptr())
        torch.cuda.synchronize()
        expect(int(out[1]) == 0, f"pingpong ({impl}): {int(out[1])} payloads were not visible with their signal")
        if me == 0:
            result[f"{impl}_rtt_ns"] = int(out[0])
        sh.shmem_barrier_all()
    if me == 0:
        print(f"BENCH pingpong {json.dumps(result)}", flush=True)
    return result


def main(argv: list[str]) -> int:
    sh.shmem_init()
    install_hook()
    LIBS.update(get_extern_libs())
    me, n = sh.shmem_mype(), sh.shmem_npes()
    if argv[:1] == ["pingpong"]:
        if torch.cuda.device_count() >= 2 and n >= 2:
            pingpong_bench(me, n)
        elif me == 0:
            print("BENCH pingpong skipped: needs 2 PEs on 2 GPUs (PEs sharing a GPU take turns)", flush=True)
    else:
        for name in argv or list(CHECKS):
            t0 = time.time()
            (FATAL_CHECKS.get(name) or CHECKS[name])(me, n)
            sh.shmem_barrier_all()
            print(f"PASS {name} ({time.time() - t0:.1f} s)", flush=True)
    sh.shmem_finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
