# SPDX-License-Identifier: MIT
"""``mori bench ir``: Triton kernels over MORI-IR against the same operations in CUDA C++ over
``mori/shmem/device.cuh`` and against NCCL, in one run:

* put: Triton ``putmem_nbi_block`` vs the CUDA C++ ``putmem_block`` kernel (mori.shmem.selftest),
  PE 0 to PE 1, the same blocks (one per 64 KiB, at most 64) and 256 threads;
* put with signal: Triton ``putmem_nbi_signal_block`` vs CUDA C++ ``putmem_signal_block``, the same
  split, each block ADDing 1 to PE 1's signal;
* all-reduce (bf16, every PE): the Triton ring (reduce-scatter + all-gather by put-with-signal) and
  the Triton one-shot (every PE puts its input to every peer) vs ``torch.distributed.all_reduce``
  (NCCL; skipped when PEs share a GPU, which NCCL refuses).

Sizes 4 KiB to 256 MiB (x4). ratio = triton_us / baseline_us (below 1: Triton is faster). Prints a
table and writes JSON. Starts its own PEs with ``mori run``: 2 by default, or MORI_TEST_GPU_PES PEs
sharing the GPUs when there are fewer GPUs than PEs (their kernels take turns: the all-reduce rows
then show that it works, not its speed; the put rows time PE 0 alone).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from typing import Any, Callable, Optional

from mori.apps.bench.launch import GPU_JOB_ENV, relaunch, use_local_gpu
from mori.apps.bench.report import Report
from mori.apps.bench.sizes import human_size, size_sweep, size_type

ONESHOT_MAX = 64 << 20  # the one-shot's gather buffer is npes x the message
COLUMNS = ["op", "size", "triton_us", "triton_GBps", "baseline", "baseline_us", "baseline_GBps", "ratio"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mori bench ir", description=__doc__.split("\n\n")[0])
    p.add_argument("--pes", type=int, default=None,
                   help="PEs (default: MORI_TEST_GPU_PES, else 2); PEs share GPUs when there are fewer GPUs")
    p.add_argument("--json", default="bench-results/ir.json", help="where to write the results")
    p.add_argument("--min-size", type=size_type("--min-size"), default=4 << 10, help="smallest message in bytes")
    p.add_argument("--max-size", type=size_type("--max-size"), default=256 << 20, help="largest message in bytes")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p


def _time_us(fn: Callable[[], Any], nbytes: int, barrier: Optional[Callable[[], None]] = None,
             max_iters: int = 200) -> float:
    """Mean microseconds per call of `fn` over a batch timed with CUDA events, after a warm-up.
    `barrier` (collectives) lines the PEs up before the batch."""
    import torch

    iters = min(max_iters, 200 if nbytes <= (1 << 20) else max(5, min(50, (1 << 30) // nbytes)))
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    if barrier:
        barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters * 1e3


def _row(op: str, nbytes: int, triton_us: float, baseline: str, baseline_us: Optional[float]) -> dict:
    row = {"op": op, "size": human_size(nbytes), "bytes": nbytes, "triton_us": round(triton_us, 2),
           "triton_GBps": round(nbytes / triton_us / 1e3, 2), "baseline": baseline, "baseline_us": None,
           "baseline_GBps": None, "ratio": None}
    if baseline_us is not None:
        row.update(baseline_us=round(baseline_us, 2), baseline_GBps=round(nbytes / baseline_us / 1e3, 2),
                   ratio=round(triton_us / baseline_us, 3))
    return row


def _worker(args: argparse.Namespace) -> int:
    import torch

    use_local_gpu()
    import torch.distributed as dist

    import mori.shmem as sh
    from mori.apps.bench import ir_kernels as k
    from mori.ir.triton import get_extern_libs, install_hook
    from mori.shmem import selftest
    from mori.shmem.tensor_utils import mori_shmem_create_tensor, mori_shmem_free_tensor

    sh.shmem_init()
    install_hook()
    libs = get_extern_libs()
    me, n = sh.shmem_mype(), sh.shmem_npes()
    sizes = size_sweep(args.min_size, args.max_size)
    cap = sizes[-1]
    shared_gpu = n > torch.cuda.device_count()
    nccl = None
    if not shared_gpu:
        dist.init_process_group("nccl")
        nccl = dist
    rows: list[dict] = []

    def sym(count: int, dtype: torch.dtype) -> torch.Tensor:
        t = mori_shmem_create_tensor((count,), dtype)
        t.zero_()
        torch.cuda.synchronize()
        return t

    # ---- put and put with signal: PE 0 -> PE 1, the others wait at the barrier
    dst, sig = sym(cap, torch.uint8), sym(1, torch.int64)
    src = torch.randint(0, 256, (cap,), dtype=torch.uint8, device="cuda")
    if me == 0 and n >= 2:
        for size in sizes:
            blocks = max(1, min(64, size // (64 << 10)))
            per = size // blocks
            t_tr = _time_us(lambda: k.put_kernel[(blocks,)](dst, src, per, 1, num_warps=8, extern_libs=libs), size)
            t_cu = _time_us(lambda: selftest.put(selftest.BLOCK, dst.data_ptr(), src.data_ptr(), per * blocks, 1,
                                                 blocks=blocks, threads=256), size)
            rows.append(_row("put", size, t_tr, "cuda_cpp", t_cu))
            t_tr = _time_us(lambda: k.put_signal_kernel[(blocks,)](dst, src, sig, per, 1, num_warps=8,
                                                                    extern_libs=libs), size)
            t_cu = _time_us(lambda: selftest.put_signal(dst.data_ptr(), src.data_ptr(), per * blocks, sig.data_ptr(),
                                                        1, blocks=blocks, threads=256), size)
            rows.append(_row("put_signal", size, t_tr, "cuda_cpp", t_cu))
            print(f"BENCH {json.dumps(rows[-2])}\nBENCH {json.dumps(rows[-1])}", flush=True)
    torch.cuda.synchronize()
    sh.shmem_barrier_all()
    mori_shmem_free_tensor(dst)
    mori_shmem_free_tensor(sig)

    # ---- all-reduce (bf16, every PE)
    count_cap = cap // 2
    rs, ag = sym(count_cap, torch.bfloat16), sym(count_cap, torch.bfloat16)
    programs_cap = 32
    ring_sig, ring_ack = sym(programs_cap, torch.int64), sym(programs_cap, torch.int64)
    one_max = min(cap, ONESHOT_MAX) // 2
    gather, one_sig = sym(n * one_max, torch.bfloat16), sym(1, torch.int64)
    data = torch.randint(-64, 64, (count_cap,), device="cuda").to(torch.bfloat16)
    work, out = torch.empty_like(data), torch.empty_like(data)
    epochs = {"ring": 0, "oneshot": 0}

    def ring(count: int, programs: int) -> None:
        epochs["ring"] += 1
        k.ring_allreduce_kernel[(programs,)](data, work, rs, ag, ring_sig, ring_ack, out, epochs["ring"], count,
                                             npes_c=n, BLOCK=2048, num_warps=8, extern_libs=libs)

    def oneshot(count: int) -> None:
        epochs["oneshot"] += 1
        k.oneshot_allreduce_kernel[(1,)](data, gather, one_sig, out, epochs["oneshot"], count, npes_c=n, BLOCK=2048,
                                         num_warps=8, extern_libs=libs)

    for size in sizes:
        count = size // 2
        programs = max(1, min(programs_cap, size // (n * (256 << 10))))
        # PEs sharing a GPU take turns (time slices): a few calls show it works, not its speed
        calls = 10 if shared_gpu else 200
        t_ring = _time_us(lambda: ring(count, programs), size, sh.shmem_barrier_all, calls)
        t_one = _time_us(lambda: oneshot(count), size, sh.shmem_barrier_all, calls) if count <= one_max else None
        t_nccl = None
        if nccl is not None:
            x = data[:count].clone()
            t_nccl = _time_us(lambda: nccl.all_reduce(x), size, sh.shmem_barrier_all)
        torch.cuda.synchronize()
        sh.shmem_barrier_all()
        if me == 0:
            rows.append(_row("allreduce_ring", size, t_ring, "nccl", t_nccl))
            print(f"BENCH {json.dumps(rows[-1])}", flush=True)
            if t_one is not None:
                rows.append(_row("allreduce_oneshot", size, t_one, "nccl", t_nccl))
                print(f"BENCH {json.dumps(rows[-1])}", flush=True)
    sh.shmem_barrier_all()
    for t in (rs, ag, ring_sig, ring_ack, gather, one_sig):
        mori_shmem_free_tensor(t)
    if me == 0:
        about = {"host": socket.gethostname(), "gpu": torch.cuda.get_device_name(), "pes": n,
                 "gpus": torch.cuda.device_count(), "pes_share_a_gpu": shared_gpu, "torch": torch.__version__}
        report = Report("ir", COLUMNS, rows=rows)
        report.show(f"mori bench ir: {n} PEs on {about['gpus']} x {about['gpu']}"
                    + (" (PEs share a GPU: no NCCL)" if shared_gpu else "") + "; ratio = triton_us / baseline_us")
        print(f"wrote {report.save(args.json, extra=about)}")
    if nccl is not None:
        dist.destroy_process_group()
    sh.shmem_finalize()
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    if args.worker:
        return _worker(args)
    from mori import _C
    from mori.core.env import setting

    if not _C.shmem.built_with_cuda():
        print("mori bench ir: this MORI was built without CUDA", file=sys.stderr)
        return 2
    gpus = _C.shmem.cuda_device_count()
    pes = args.pes or int((str(setting("MORI_TEST_GPU_PES")) or "2").split(",")[0])
    if gpus < 1 or pes < 2:
        print(f"mori bench ir: needs a CUDA GPU and 2+ PEs (GPUs: {gpus}, --pes {pes})", file=sys.stderr)
        return 2
    env = dict(os.environ, **GPU_JOB_ENV)
    # put buffer + ring rs/ag + one-shot gather, with room for the signals
    heap = 2 * args.max_size + pes * min(args.max_size, ONESHOT_MAX) + (64 << 20)
    env.setdefault("MORI_SHMEM_GPU_HEAP_SIZE", str(heap))
    return relaunch("mori.apps.bench.ir", argv, pes, env=env, prefix_output=True)


if __name__ == "__main__":
    sys.exit(main())
