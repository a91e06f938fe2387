# SPDX-License-Identifier: MIT
"""The copy-engine allgather on CUDA tensors, one GPU per PE:

    mori run -n 2 python ccl_gpu_suite.py

Every dtype and odd byte sizes (vector and byte copy kernels), symmetric (zero-copy) inputs,
a side stream, and a captured CUDA graph replayed with new data. Bit-exact checks.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import torch

import mori.ccl as ccl
import mori.shmem as sh
from mori.collectives import gpu

DTYPES = [torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64, torch.complex64, torch.complex128]


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(f"PE {sh.my_pe()}: {what}")


def rand(g: torch.Generator, dtype: torch.dtype, count: int) -> torch.Tensor:
    raw = torch.randint(0, 256, (count * torch.empty((), dtype=dtype).element_size(),), generator=g,
                        dtype=torch.uint8)
    if dtype == torch.bool:
        return (raw & 1).bool()
    return raw.view(dtype)


def bytes_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.contiguous().view(torch.uint8).cpu(), b.contiguous().view(torch.uint8).cpu())


def main() -> int:
    dev = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(dev)
    with sh.init() as s:
        me, n = s.my_pe, s.n_pes
        g = torch.Generator().manual_seed(4242)
        for dtype in DTYPES:
            for count in (1, 3, 1001, 65536 + 7, 1 << 20):
                xs = [rand(g, dtype, count) for _ in range(n)]
                out = torch.empty(n * count, dtype=dtype, device="cuda")
                ccl.all_gather_into_tensor(out, xs[me].cuda())
                expect(bytes_equal(out, torch.cat(xs)), f"cuda all_gather {dtype} x{count}")
        # side stream + async-style use
        side = torch.cuda.Stream()
        x = torch.arange(4096, device="cuda", dtype=torch.float32) + 10000 * me
        out = torch.empty(n * 4096, device="cuda")
        with torch.cuda.stream(side):
            side.wait_stream(torch.cuda.current_stream())
            ccl.all_gather_single(out, x)
        torch.cuda.current_stream().wait_stream(side)
        want = torch.cat([torch.arange(4096, dtype=torch.float32) + 10000 * p for p in range(n)])
        expect(torch.equal(out.cpu(), want), "side stream")
        # symmetric input: read in place by the peers
        sym = gpu.symmetric_input(5000, torch.bfloat16)
        before = gpu.stats()["zero_copy"]
        sym.copy_(torch.full((5000,), float(me + 1), dtype=torch.bfloat16))
        out = torch.empty(n * 5000, dtype=torch.bfloat16, device="cuda")
        ccl.all_gather_into_tensor(out, sym)
        expect(torch.equal(out.cpu(), torch.repeat_interleave(torch.arange(1, n + 1).bfloat16(), 5000)), "symmetric")
        expect(gpu.stats()["zero_copy"] == before + 1, "symmetric input not read in place")
        # CUDA graph: capture once, replay with new inputs
        inp = torch.zeros(777, device="cuda", dtype=torch.float32)
        out = torch.empty(n * 777, device="cuda")
        ccl.all_gather_into_tensor(out, inp)  # warm-up outside capture (engine exists)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            ccl.all_gather_into_tensor(out, inp)
        for it in range(4):
            inp.copy_(torch.full((777,), float(100 * it + me)))
            graph.replay()
            torch.cuda.synchronize()
            want = torch.cat([torch.full((777,), float(100 * it + p)) for p in range(n)])
            expect(torch.equal(out.cpu(), want), f"graph replay {it}")
        torch.cuda.synchronize()
        st = gpu.stats()
        ccl.release()
        print(f"PE {me}/{n}: ccl gpu suite ok {st}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
