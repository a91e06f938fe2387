# SPDX-License-Identifier: MIT
"""``mori bench ccl``: allgather bus bandwidth, MORI vs the framework baseline in the same run.

    mori bench ccl                 # CPU: mori.ccl (host heap) vs torch.distributed gloo, 2 PEs
    mori bench ccl --gpu           # GPUs: copy-engine (push) allgather vs NCCL all_gather_into_tensor,
                                   # the other collectives at one size, and the GEMM-overlap test

busbw = (n - 1) / n * output_bytes / time (nccl-tests' definition for allgather); time is the
slowest rank's mean over back-to-back iterations. Each size is checked once: MORI's output
must equal the baseline's bit for bit.

GEMM overlap (--gpu): an 8192^3 bf16 matmul loop alone, then with back-to-back NCCL
all-gathers on a side stream, then with MORI's; the all-gathers are queued to outlast the
GEMM window. Reports the GEMM slowdown and the bandwidth the all-gathers kept meanwhile.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Callable, Optional

from mori.apps.bench.launch import GPU_JOB_ENV, relaunch, use_local_gpu
from mori.apps.bench.sizes import size_type

MIB = 1 << 20


def _worker(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    import mori.ccl as ccl
    import mori.shmem as sh
    from mori.apps.bench.report import Report
    from mori.apps.bench.timing import slowest, torch_rank_max
    from mori.apps.bench.sizes import human_size, size_sweep
    from mori.collectives import gpu

    use_gpu = args.gpu
    if use_gpu:
        use_local_gpu()
    dist.init_process_group("nccl" if use_gpu else "gloo")
    sh.init()
    me, n = sh.my_pe(), sh.n_pes()
    dev = "cuda" if use_gpu else "cpu"
    dtype = torch.bfloat16 if use_gpu else torch.float32
    elem = torch.empty((), dtype=dtype).element_size()

    def sync() -> None:
        if use_gpu:
            torch.cuda.synchronize()

    rank_max = torch_rank_max(dist, device=dev)

    def slowest_rank(t: float) -> float:
        return slowest(rank_max, t)

    def timed(fn: Callable[[], None], iters: int) -> float:
        for _ in range(max(2, iters // 10)):
            fn()
        sync()
        dist.barrier()
        if use_gpu:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            end.synchronize()
            return slowest_rank(start.elapsed_time(end) / 1e3 / iters)
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return slowest_rank((time.perf_counter() - t0) / iters)

    rep = Report(
        "ccl-gpu" if use_gpu else "ccl-cpu",
        ["size", "mori_us", "mori_busbw_GBs", "base_us", "base_busbw_GBs", "ratio", "mori_sym_busbw_GBs", "sym_ratio"],
    )
    rep.meta.update(
        {
            "pes": n,
            "dtype": str(dtype),
            "baseline": "nccl" if use_gpu else "gloo",
            "busbw": "(n-1)/n * output_bytes / time",
        }
    )
    if use_gpu:
        rep.meta["gpu"] = torch.cuda.get_device_name()
    for total in size_sweep(args.min_size, args.max_size):
        shard = total // n // elem
        inp = (torch.arange(shard, device=dev, dtype=torch.float32) % 251 + me).to(dtype)
        out_m = torch.empty(n * shard, device=dev, dtype=dtype)
        out_b = torch.empty_like(out_m)
        ccl.all_gather_into_tensor(out_m, inp)
        dist.all_gather_into_tensor(out_b, inp)
        sync()
        if not torch.equal(
            out_m.view(torch.int16 if elem == 2 else torch.int32), out_b.view(torch.int16 if elem == 2 else torch.int32)
        ):
            raise AssertionError(f"PE {me}: MORI and baseline outputs differ at {total} bytes")
        iters = max(3, min(args.iters, int(args.budget * 2e9 / max(total, 1)) + 3))
        t_m = timed(lambda: ccl.all_gather_into_tensor(out_m, inp), iters)
        t_b = timed(lambda: dist.all_gather_into_tensor(out_b, inp), iters)
        # symmetric buffers (zero extra copy): on GPUs the output (peers push straight into it),
        # on CPUs the input (peers read it in place)
        t_s = None
        if use_gpu:
            sym = gpu.symmetric_empty((n * shard,), dtype)
            ccl.all_gather_into_tensor(sym, inp)
            sync()
            if not torch.equal(sym.view(torch.int16), out_b.view(torch.int16)):
                raise AssertionError(f"PE {me}: MORI (symmetric output) and NCCL differ at {total} bytes")
            t_s = timed(lambda: ccl.all_gather_into_tensor(sym, inp), iters)
            sync()
            from mori.shmem.tensor_utils import mori_shmem_free_tensor

            mori_shmem_free_tensor(sym)
        else:
            sym = sh.tensor(shard, dtype) if shard * elem * 4 < sh.heap_free() else None
            if sym is not None:
                sym.copy_(inp)
                t_s = timed(lambda: ccl.all_gather_into_tensor(out_m, sym), iters)
                sh.free(sym)
        bus = lambda t: (n - 1) / n * total / t / 1e9  # noqa: E731
        rep.add(
            size=human_size(total),
            mori_us=t_m * 1e6,
            mori_busbw_GBs=bus(t_m),
            base_us=t_b * 1e6,
            base_busbw_GBs=bus(t_b),
            ratio=t_b / t_m,
            mori_sym_busbw_GBs=bus(t_s) if t_s else None,
            sym_ratio=t_b / t_s if t_s else None,
            bytes=total,
        )
        inp = out_m = out_b = None  # freed before the next size allocates (the lambdas above hold the names)
    if me == 0:
        rep.show(f"allgather on {n} {'GPUs' if use_gpu else 'CPU PEs'}: mori.ccl vs {rep.meta['baseline']}")
    if use_gpu and not args.no_others:
        others = _other_collectives(args, me, n, timed)
        if me == 0:
            ot = Report("ccl-gpu-others", ["collective", "size", "mori_us", "nccl_us", "speedup"])
            for row in others:
                ot.add(**row)
            ot.show(f"other collectives on {n} GPUs (bf16; mori.ccl vs NCCL, same tensors, outputs compared)")
            rep.meta["others"] = others
    overlap = None
    if use_gpu and not args.no_overlap:
        overlap = _gemm_overlap(args, me, n, slowest_rank)
        if me == 0:
            ov = Report(
                "ccl-gemm-overlap",
                ["case", "gemm_ms", "gemm_TFLOPs", "slowdown_pct", "comm_busbw_GBs", "comm_covers_window"],
            )
            for row in overlap:
                ov.add(**row)
            ov.show(f"{args.gemm}^3 bf16 GEMM loop beside back-to-back all-gathers of {human_size(args.overlap_size)}")
            rep.meta["gemm_overlap"] = overlap
    if me == 0:
        path = rep.save(args.json)
        print(f"wrote {path}")
    ccl.release()
    dist.destroy_process_group()
    sh.finalize()
    return 0


def _gemm_overlap(args: argparse.Namespace, me: int, n: int, slowest: Callable[[float], float]) -> list[dict]:
    import torch
    import torch.distributed as dist

    import mori.ccl as ccl

    m = args.gemm
    a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, m, device="cuda", dtype=torch.bfloat16)
    shard = args.overlap_size // n // 2
    inp = torch.randn(shard, device="cuda").bfloat16()
    out = torch.empty(n * shard, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    flops = 2 * m**3

    def gemm_loop(k: int) -> tuple[torch.cuda.Event, torch.cuda.Event]:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(k):
            torch.matmul(a, b, out=c)
        e.record()
        return s, e

    def comm_time(fn: Callable[[], None], k: int) -> float:
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(side):
            s.record()
            for _ in range(k):
                fn()
            e.record()
        e.synchronize()
        return s.elapsed_time(e) / 1e3 / k

    for _ in range(3):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    s, e = gemm_loop(args.gemm_iters)
    e.synchronize()
    alone = slowest(s.elapsed_time(e) / 1e3)
    rows = [
        {
            "case": "GEMM alone",
            "gemm_ms": alone * 1e3,
            "gemm_TFLOPs": flops * args.gemm_iters / alone / 1e12,
            "slowdown_pct": 0.0,
            "comm_busbw_GBs": None,
            "comm_covers_window": None,
        }
    ]
    from mori.collectives import gpu

    sym_out = gpu.symmetric_empty((n * shard,), torch.bfloat16)
    cases = [
        ("beside NCCL all_gather", lambda: dist.all_gather_into_tensor(out, inp)),
        ("beside MORI copy-engine all_gather", lambda: ccl.all_gather_into_tensor(out, inp)),
        ("beside MORI, symmetric output", lambda: ccl.all_gather_into_tensor(sym_out, inp)),
    ]
    for name, fn in cases:
        fn()
        t_one = slowest(comm_time(fn, 3))
        k = int(math.ceil(alone * 1.3 / t_one)) + 2  # outlast the (slowed) GEMM window
        dist.barrier()
        torch.cuda.synchronize()
        cs, ce = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(side):
            cs.record()
            for _ in range(k):
                fn()
            ce.record()
        gs, ge = gemm_loop(args.gemm_iters)
        torch.cuda.synchronize()
        g = slowest(gs.elapsed_time(ge) / 1e3)
        comm_total = cs.elapsed_time(ce) / 1e3
        covers = cs.elapsed_time(ce) >= cs.elapsed_time(ge)
        rows.append(
            {
                "case": name,
                "gemm_ms": g * 1e3,
                "gemm_TFLOPs": flops * args.gemm_iters / g / 1e12,
                "slowdown_pct": (g / alone - 1) * 100,
                "comm_busbw_GBs": (n - 1) / n * args.overlap_size / (comm_total / k) / 1e9,
                "comm_covers_window": bool(covers),
            }
        )
    return rows


def _other_collectives(args: argparse.Namespace, me: int, n: int, timed: Callable) -> list[dict]:
    """broadcast, all-reduce, reduce-scatter, all-to-all: mori.ccl vs NCCL on the same tensors."""
    import torch
    import torch.distributed as dist

    import mori.ccl as ccl
    from mori.apps.bench.sizes import human_size

    numel = args.others_size // 2 // n * n
    g = torch.Generator(device="cuda").manual_seed(7 + me)
    x = (torch.randn(numel, device="cuda", generator=g) * 4).round().bfloat16()  # sums stay exact
    a, b = x.clone(), x.clone()
    rs_a, rs_b = (
        torch.empty(numel // n, device="cuda", dtype=torch.bfloat16),
        torch.empty(numel // n, device="cuda", dtype=torch.bfloat16),
    )
    cases = [
        ("broadcast", lambda: ccl.broadcast(a, src=0), lambda: dist.broadcast(b, src=0), lambda: (a, b)),
        ("all_reduce sum", lambda: ccl.all_reduce(a), lambda: dist.all_reduce(b), lambda: (a, b)),
        (
            "reduce_scatter sum",
            lambda: ccl.reduce_scatter_tensor(rs_a, x),
            lambda: dist.reduce_scatter_tensor(rs_b, x),
            lambda: (rs_a, rs_b),
        ),
        ("all_to_all", lambda: ccl.all_to_all_single(a, x), lambda: dist.all_to_all_single(b, x), lambda: (a, b)),
    ]
    rows = []
    iters = max(3, min(args.iters, int(args.budget * 2e9 / max(args.others_size, 1)) + 3))
    for name, fm, fb, outs in cases:
        a.copy_(x)
        b.copy_(x)
        fm()
        fb()
        torch.cuda.synchronize()
        ma, nb = outs()
        if not torch.equal(ma.float(), nb.float()):
            raise AssertionError(f"PE {me}: {name}: MORI and NCCL differ")
        t_m = timed(fm, iters)
        t_b = timed(fb, iters)
        rows.append(
            {
                "collective": name,
                "size": human_size(numel * 2),
                "mori_us": t_m * 1e6,
                "nccl_us": t_b * 1e6,
                "speedup": t_b / t_m,
            }
        )
    return rows


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="mori bench ccl", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpu", action="store_true", help="GPUs: copy-engine allgather vs NCCL (+ GEMM overlap)")
    parser.add_argument(
        "-n", "--pes", type=int, default=None, help="PEs (default: 2 on CPUs; with --gpu one per GPU of this node)"
    )
    parser.add_argument(
        "--min-size", type=size_type("--min-size"), default=MIB, help="smallest allgather output in bytes"
    )
    parser.add_argument(
        "--max-size",
        type=size_type("--max-size"),
        default=None,
        help="largest output in bytes (default 1 GiB on GPUs, 64 MiB on CPUs)",
    )
    parser.add_argument("--iters", type=int, default=50, help="most timed iterations per size")
    parser.add_argument("--budget", type=float, default=0.5, help="rough seconds per size and method")
    parser.add_argument("--gemm", type=int, default=8192, help="GEMM size m (m x m x m bf16)")
    parser.add_argument("--gemm-iters", type=int, default=200, help="GEMMs in the timed loop")
    parser.add_argument(
        "--overlap-size",
        type=size_type("--overlap-size"),
        default=256 * MIB,
        help="all-gather output bytes beside the GEMM",
    )
    parser.add_argument("--no-overlap", action="store_true", help="skip the GEMM-overlap test")
    parser.add_argument("--no-others", action="store_true", help="skip broadcast/all-reduce/reduce-scatter/all-to-all")
    parser.add_argument(
        "--others-size",
        type=size_type("--others-size"),
        default=64 * MIB,
        help="tensor bytes for the other collectives",
    )
    parser.add_argument("--json", default=None, help="where to write the JSON (default bench-results/ccl-*.json)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.pes is None:
        args.pes = 2
        if args.gpu:
            import torch

            args.pes = torch.cuda.device_count()
            if args.pes < 2:
                parser.error(f"--gpu needs 2 or more GPUs on this node (found {args.pes}); -n picks how many")
    if args.max_size is None:
        args.max_size = 1 << 30 if args.gpu else 64 * MIB
    if args.json is None:
        args.json = f"bench-results/ccl-{'gpu' if args.gpu else 'cpu'}.json"
    if args.worker:
        return _worker(args)
    env = dict(os.environ, **GPU_JOB_ENV) if args.gpu else None
    return relaunch("mori.apps.bench.ccl", argv, args.pes, env=env)


if __name__ == "__main__":
    sys.exit(main())
