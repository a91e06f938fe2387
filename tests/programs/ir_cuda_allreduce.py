# SPDX-License-Identifier: MIT
"""The CUDA C++ all-reduces that `mori bench ir` times against the Triton ones
(mori.shmem.selftest.allreduce_oneshot / allreduce_ring, over device.cuh), checked exactly
against torch on every PE of a job:

    mori run -n 2 python ir_cuda_allreduce.py [oneshot] [ring]     # default: both

Each PE binds GPU LOCAL_RANK % device_count (PEs may share a GPU). Every PE seeds the same
generator per call, so each rebuilds every peer's input. Prints "PASS <check>" per check.
No Triton: these are the baseline kernels, usable where Triton is not installed.
"""

from __future__ import annotations

import os
import sys

import torch

LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))
torch.cuda.set_device(LOCAL_RANK % torch.cuda.device_count())

import mori.shmem as sh  # noqa: E402
from mori.shmem import selftest  # noqa: E402
from mori.shmem.tensor_utils import mori_shmem_create_tensor, mori_shmem_free_tensor  # noqa: E402


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(f"PE {sh.shmem_mype()}: {what}")


def sym_zeros(n: int, dtype: torch.dtype) -> torch.Tensor:
    t = mori_shmem_create_tensor((n,), dtype)
    t.zero_()
    torch.cuda.synchronize()
    sh.shmem_barrier_all()
    return t


def inputs(seed: int, count: int, n: int) -> list[torch.Tensor]:
    """Every PE's input: integers whose every partial sum stays within +-256, which bf16 holds
    exactly, so any summation order gives torch's result bit for bit."""
    gen = torch.Generator().manual_seed(seed)
    bound = 256 // n
    return [torch.randint(-bound, bound, (count,), generator=gen).to(torch.bfloat16) for _ in range(n)]


def check_oneshot(me: int, n: int) -> None:
    """Two epochs of 65,537 elements (odd: the tail takes the element-wise path) and one of 8 (a
    single partial step), back to back without a host barrier between them."""
    counts = (65_537, 65_537, 8)
    gather, sig = sym_zeros(n * max(counts), torch.bfloat16), sym_zeros(1, torch.int64)
    outs, refs = [], []
    for epoch, count in enumerate(counts, 1):
        every = inputs(500 + epoch, count, n)
        data = every[me].cuda()
        out = torch.full((count,), float("nan"), dtype=torch.bfloat16, device="cuda")
        selftest.allreduce_oneshot(data.data_ptr(), gather.data_ptr(), sig.data_ptr(), out.data_ptr(), epoch, count)
        outs.append((data, out))
        refs.append(torch.stack(every).float().sum(0).to(torch.bfloat16))
    torch.cuda.synchronize()
    for epoch, ((_, out), ref) in enumerate(zip(outs, refs), 1):
        expect(
            torch.equal(out.cpu(), ref),
            f"one-shot call {epoch}: differs from torch's sum "
            f"({int((out.cpu() != ref).sum())} of {ref.numel()} elements)",
        )
    sh.shmem_barrier_all()
    mori_shmem_free_tensor(gather)
    mori_shmem_free_tensor(sig)


def check_ring(me: int, n: int) -> None:
    """Ring all-reduce on 1, 3 and 8 blocks, 3 back-to-back calls each with no host barrier between
    them, on a count that no chunk or stripe split divides evenly (and a stripe start that is not
    16-byte aligned: the element-wise path)."""
    count = 3 * 65_537 + 5
    rs, ag = sym_zeros(count, torch.bfloat16), sym_zeros(count, torch.bfloat16)
    for blocks in (1, 3, 8):
        sig, ack = sym_zeros(blocks, torch.int64), sym_zeros(blocks, torch.int64)
        outs, refs = [], []
        for epoch in (1, 2, 3):
            every = inputs(700 + 10 * blocks + epoch, count, n)
            data, work = every[me].cuda(), torch.zeros(count, dtype=torch.bfloat16, device="cuda")
            out = torch.full((count,), float("nan"), dtype=torch.bfloat16, device="cuda")
            selftest.allreduce_ring(
                data.data_ptr(),
                work.data_ptr(),
                rs.data_ptr(),
                ag.data_ptr(),
                sig.data_ptr(),
                ack.data_ptr(),
                out.data_ptr(),
                epoch,
                count,
                blocks=blocks,
            )
            outs.append((data, work, out))
            refs.append(torch.stack(every).float().sum(0).to(torch.bfloat16))
        torch.cuda.synchronize()
        for epoch, ((_, _, out), ref) in enumerate(zip(outs, refs), 1):
            expect(
                torch.equal(out.cpu(), ref),
                f"ring on {blocks} blocks, call {epoch}: differs from torch's sum "
                f"({int((out.cpu() != ref).sum())} of {ref.numel()} elements)",
            )
        sh.shmem_barrier_all()
        mori_shmem_free_tensor(sig)
        mori_shmem_free_tensor(ack)
    mori_shmem_free_tensor(rs)
    mori_shmem_free_tensor(ag)


CHECKS = {"oneshot": check_oneshot, "ring": check_ring}


def main(argv: list[str]) -> int:
    sh.shmem_init()
    me, n = sh.shmem_mype(), sh.shmem_npes()
    for name in argv or list(CHECKS):
        CHECKS[name](me, n)
        sh.shmem_barrier_all()
        print(f"PASS {name}", flush=True)
    sh.shmem_finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
