# SPDX-License-Identifier: MIT
"""MORI-CCL on CUDA tensors, one GPU per PE:

    mori run -n 2 python ccl_gpu_suite.py

allgather / broadcast / all-reduce (sum, max, min) / reduce-scatter / all-to-all on every dtype
and odd sizes, with ordinary and symmetric (GPU-heap) tensors, multi-chunk transfers, a side
stream, CUDA graphs replayed with new data, then a tiny staging buffer so every collective runs
in several rounds. Results are checked bit-exact against numpy references built from every
PE's inputs (each PE regenerates them from a shared seed).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import torch

import mori.ccl as ccl
import mori.shmem as sh
from mori.collectives import gpu
from mori.core.errors import InvalidArgument

DTYPES = [
    torch.bool,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.uint16,
    torch.int32,
    torch.uint32,
    torch.int64,
    torch.uint64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
]
NP = {
    torch.bool: np.bool_,
    torch.int8: np.int8,
    torch.uint8: np.uint8,
    torch.int16: np.int16,
    torch.uint16: np.uint16,
    torch.int32: np.int32,
    torch.uint32: np.uint32,
    torch.int64: np.int64,
    torch.uint64: np.uint64,
    torch.float16: np.float16,
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.complex64: np.complex64,
    torch.complex128: np.complex128,
}


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(f"PE {sh.my_pe()}: {what}")


def rand(g: torch.Generator, dtype: torch.dtype, count: int) -> torch.Tensor:
    """Random CPU values: any bit pattern for integers, finite normals for floats."""
    if dtype.is_floating_point or dtype.is_complex:
        return (
            torch.randn(count, generator=g, dtype=torch.complex128 if dtype.is_complex else torch.float64) * 100
        ).to(dtype)
    raw = torch.randint(0, 256, (count * dtype.itemsize,), generator=g, dtype=torch.uint8)
    return (raw & 1).bool() if dtype == torch.bool else raw.view(dtype)


def raw(t: torch.Tensor) -> bytes:
    return t.detach().contiguous().cpu().view(-1).view(torch.uint8).numpy().tobytes()


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.numel() == b.numel() and raw(a) == raw(b)


def reference(parts: list[torch.Tensor], op: str) -> torch.Tensor:
    """op over parts in PE order with mori.ccl's semantics, computed on the CPU (numpy)."""
    dtype = parts[0].dtype
    if dtype == torch.bfloat16:
        acc = parts[0].float()
        for x in parts[1:]:
            acc = {"sum": torch.add, "max": torch.maximum, "min": torch.minimum}[op](acc, x.float())
        return acc.bfloat16()
    xs = [np.frombuffer(raw(x), dtype=NP[dtype]) for x in parts]
    if dtype == torch.bool:
        f = np.logical_and if op == "min" else np.logical_or
    else:
        f = {"sum": np.add, "max": np.maximum, "min": np.minimum}[op]
    if dtype == torch.float16:
        xs = [x.astype(np.float32) for x in xs]
    acc = xs[0]
    with np.errstate(over="ignore"):
        for x in xs[1:]:
            acc = f(acc, x)
    out = np.ascontiguousarray(acc.astype(NP[dtype]))
    return torch.frombuffer(bytearray(out.tobytes()), dtype=torch.uint8).view(dtype)


def ops_for(dtype: torch.dtype) -> list[str]:
    return ["sum"] if dtype.is_complex else ["sum", "max", "min"]


def agree(t: torch.Tensor, n: int) -> bool:
    """Every PE holds the same bits in t (checked with mori's own all-gather)."""
    out = torch.empty(n * t.numel(), dtype=t.dtype, device="cuda")
    ccl.all_gather_into_tensor(out, t.view(-1))
    b = raw(out)
    size = len(b) // n
    return all(b[p * size : (p + 1) * size] == b[:size] for p in range(n))


def run_all(me: int, n: int, seed: int, counts: tuple, big: int) -> None:
    g = torch.Generator().manual_seed(seed)
    # ---- all-gather: plain, symmetric output (pushed straight into the peers), in place
    for dtype in DTYPES:
        for count in counts:
            xs = [rand(g, dtype, count) for _ in range(n)]
            out = torch.empty(n * count, dtype=dtype, device="cuda")
            ccl.all_gather_into_tensor(out, xs[me].cuda())
            expect(same(out, torch.cat(xs)), f"all_gather {dtype} x{count}")
    xs = [rand(g, torch.bfloat16, big) for _ in range(n)]
    out = torch.empty(n * big, dtype=torch.bfloat16, device="cuda")
    ccl.all_gather_single(out, xs[me].cuda())
    expect(same(out, torch.cat(xs)), f"all_gather multi-chunk x{big}")
    sym = gpu.symmetric_empty((n * big,), torch.bfloat16)
    z0 = gpu.stats()["zero_copy"]
    ccl.all_gather_into_tensor(sym, xs[me].cuda())
    expect(same(sym, torch.cat(xs)), "all_gather into a symmetric output")
    expect(gpu.stats()["zero_copy"] == z0 + 1, "symmetric output was not written directly")
    sym.zero_()
    sym[me * big : (me + 1) * big].copy_(xs[me].cuda())
    ccl.all_gather_into_tensor(sym, sym[me * big : (me + 1) * big])  # input is the output's own shard
    expect(same(sym, torch.cat(xs)), "in-place all_gather (symmetric)")
    out.zero_()
    out[me * big : (me + 1) * big].copy_(xs[me].cuda())
    ccl.all_gather_into_tensor(out, out[me * big : (me + 1) * big])
    expect(same(out, torch.cat(xs)), "in-place all_gather (plain)")
    # ---- broadcast from every root, plain and symmetric
    for dtype in (torch.bool, torch.uint16, torch.bfloat16, torch.float64, torch.complex64):
        for count in counts:
            for src in range(n):
                x = rand(g, dtype, count)
                t = x.cuda() if me == src else torch.zeros(count, dtype=dtype, device="cuda")
                ccl.broadcast(t, src=src)
                expect(same(t, x), f"broadcast {dtype} x{count} from {src}")
    x = rand(g, torch.float32, big)
    symb = gpu.symmetric_empty((big,), torch.float32)
    symb.copy_(x if me == n - 1 else torch.zeros(big))
    ccl.broadcast(symb, src=n - 1)
    expect(same(symb, x), "broadcast symmetric")
    # ---- all-reduce and reduce-scatter, every dtype and op
    for dtype in DTYPES:
        for op in ops_for(dtype):
            for count in counts:
                xs = [rand(g, dtype, count) for _ in range(n)]
                t = xs[me].cuda()
                ccl.all_reduce(t, op=op)
                expect(same(t, reference(xs, op)), f"all_reduce {op} {dtype} x{count}")
                ins = [rand(g, dtype, n * count) for _ in range(n)]
                o = torch.empty(count, dtype=dtype, device="cuda")
                ccl.reduce_scatter_tensor(o, ins[me].cuda(), op=op)
                want = reference([x[me * count : (me + 1) * count] for x in ins], op)
                expect(same(o, want), f"reduce_scatter {op} {dtype} x{count}")
    xs = [rand(g, torch.float32, big + 5) for _ in range(n)]
    t = gpu.symmetric_empty((big + 5,), torch.float32)
    t.copy_(xs[me])
    ccl.all_reduce(t, op="sum")
    expect(same(t, reference(xs, "sum")), "all_reduce symmetric (direct all-gather phase)")
    expect(agree(t, n), "all_reduce results differ between PEs")
    xs = [rand(g, torch.bfloat16, 3 * big + 1) for _ in range(n)]
    t = xs[me].cuda()
    ccl.all_reduce(t)
    expect(same(t, reference(xs, "sum")) and agree(t, n), "all_reduce bf16 large")
    # ---- all-to-all: even and uneven splits (rows of 3 elements)
    for dtype in (torch.int8, torch.float16, torch.complex128):
        rows = 5
        xs = [rand(g, dtype, n * rows * 3).view(n * rows, 3) for _ in range(n)]
        out = torch.empty(n * rows, 3, dtype=dtype, device="cuda")
        ccl.all_to_all_single(out, xs[me].cuda())
        want = torch.cat([xs[p][me * rows : (me + 1) * rows] for p in range(n)])
        expect(same(out, want), f"all_to_all even {dtype}")
        split = [[(i * 7 + j * 3) % 5 for j in range(n)] for i in range(n)]  # split[i][j]: rows i -> j
        xs = [rand(g, dtype, sum(split[i]) * 3).view(-1, 3) for i in range(n)]
        out = torch.empty(sum(split[i][me] for i in range(n)), 3, dtype=dtype, device="cuda")
        ccl.all_to_all_single(
            out, xs[me].cuda(), output_split_sizes=[split[i][me] for i in range(n)], input_split_sizes=split[me]
        )
        want = torch.cat([xs[i][sum(split[i][:me]) : sum(split[i][: me + 1])] for i in range(n)])
        expect(same(out, want), f"all_to_all uneven {dtype}")


def graphs(me: int, n: int) -> None:
    """Capture once, replay with new inputs: epochs come from device memory, flags only grow."""
    inp = torch.zeros(777, device="cuda")
    out = torch.empty(n * 777, device="cuda")
    sym_out = gpu.symmetric_empty((n * 777,), torch.float32)
    red = torch.zeros(1001, device="cuda", dtype=torch.float64)
    for _ in range(2):  # warm-up outside capture
        ccl.all_gather_into_tensor(out, inp)
        ccl.all_gather_into_tensor(sym_out, inp)
        ccl.all_reduce(red)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ccl.all_gather_into_tensor(out, inp)
        ccl.all_gather_into_tensor(sym_out, inp)
        ccl.all_reduce(red, op="max")
    for it in range(4):
        inp.copy_(torch.full((777,), float(100 * it + me)))
        red.copy_(torch.arange(1001, dtype=torch.float64) * (me + 1) + it)
        graph.replay()
        torch.cuda.synchronize()
        want = torch.cat([torch.full((777,), float(100 * it + p)) for p in range(n)])
        expect(torch.equal(out.cpu(), want) and torch.equal(sym_out.cpu(), want), f"graph replay {it}")
        expect(torch.equal(red.cpu(), torch.arange(1001, dtype=torch.float64) * n + it), f"graph all_reduce {it}")


def handles(me: int, n: int) -> None:
    """MORI's class API on GPU memory: raw device addresses and a stream (DeepSpeed's MORI hook),
    tensors, and the output left in the transit buffer."""
    count = 100002  # bf16: whole uint32 lanes per PE (MORI's rule)
    mine = lambda p: torch.arange(count, dtype=torch.float32) * (p + 1) + 0.5 * p  # noqa: E731
    want = torch.cat([mine(p) for p in range(n)]).to(torch.bfloat16)
    x = mine(me).to(torch.bfloat16).cuda()
    ag = ccl.AllGatherIntoTensor(me, n, 1 << 20, n << 20)
    out = torch.zeros(n * count, dtype=torch.bfloat16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    expect(ag(x.data_ptr(), out.data_ptr(), count, ccl.DataType.BFloat16, side.cuda_stream) is True, "handle call")
    torch.cuda.current_stream().wait_stream(side)
    expect(torch.equal(out.cpu(), want), "AllGatherIntoTensor on device addresses")
    sd = ccl.AllgatherSdma(me, n, transit_buffer_size=8 << 20, copy_output_to_user=False)
    expect(sd.start_async(x, out, count) is True, "start_async")
    sd.wait_async()
    got = sd.get_output_transit_buffer(torch.bfloat16)[: n * count]
    expect(got.is_cuda and torch.equal(got.cpu(), want), "AllgatherSdma transit output")
    # copy_output_to_user=True: the user output and (as MORI's) the transit buffer both hold it.
    both = ccl.AllgatherSdma(me, n, transit_buffer_size=8 << 20)
    out.zero_()
    expect(both(x, out, count) is True, "copy-out call")
    torch.cuda.synchronize()
    expect(torch.equal(out.cpu(), want), "AllgatherSdma copy-out user output")
    got = both.get_output_transit_buffer(torch.bfloat16)[: n * count]
    expect(got.is_cuda and torch.equal(got.cpu(), want), "AllgatherSdma copy-out transit buffer")


def main() -> int:
    dev = int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count()  # PEs may share GPUs
    torch.cuda.set_device(dev)
    with sh.init() as s:
        me, n = s.my_pe, s.n_pes
        run_all(me, n, 4242, (1, 3, 1001, 65536 + 7), 20 * (1 << 20) // 2 + 3)  # > 1 chunk
        handles(me, n)
        # side stream
        side = torch.cuda.Stream()
        x = torch.arange(4096, device="cuda", dtype=torch.float32) + 10000 * me
        out = torch.empty(n * 4096, device="cuda")
        side.wait_stream(torch.cuda.current_stream())  # x is written on this stream: outside the `with`,
        with torch.cuda.stream(side):  # where current_stream() would be `side` itself
            ccl.all_gather_single(out, x)
            ccl.all_reduce(x)
        torch.cuda.current_stream().wait_stream(side)
        want = torch.cat([torch.arange(4096, dtype=torch.float32) + 10000 * p for p in range(n)])
        expect(torch.equal(out.cpu(), want), "side stream all_gather")
        expect(torch.equal(x.cpu(), want.view(n, -1).sum(0)), "side stream all_reduce")
        graphs(me, n)
        # errors name the problem, on every PE alike
        for bad in (
            lambda: ccl.all_reduce(torch.ones(4, dtype=torch.complex64, device="cuda"), op="max"),
            lambda: ccl.all_reduce(torch.ones(4, device="cuda").to(torch.float8_e4m3fn)),
            lambda: ccl.reduce_scatter_tensor(torch.empty(3, device="cuda"), torch.empty(5, device="cuda")),
        ):
            try:
                bad()
            except InvalidArgument as exc:
                expect(len(str(exc)) > 10, "error text")
            else:
                raise AssertionError(f"PE {me}: bad call was accepted")
        torch.cuda.synchronize()
        st = gpu.stats()
        # tiny staging: every collective runs in rounds of 64 KiB per peer
        ccl.release()
        os.environ["MORI_CCL_GPU_STAGING_SIZE"] = str(64 * 1024 * (n - 1))
        expect(gpu.engine().slot_bytes == 64 * 1024, "staging size setting not applied")
        run_all(me, n, 99, (1, 70001), 100000)
        big = torch.zeros(n * 40000, device="cuda")  # 160 KB per peer with explicit splits
        try:
            ccl.all_to_all_single(big, big, output_split_sizes=[40000] * n, input_split_sizes=[40000] * n)
        except InvalidArgument as exc:
            expect("MORI_CCL_GPU_STAGING_SIZE" in str(exc), "oversize split error names the setting")
        else:
            raise AssertionError(f"PE {me}: oversize explicit split was accepted")
        torch.cuda.synchronize()
        ccl.release()
        print(f"PE {me}/{n}: ccl gpu suite ok {st}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
