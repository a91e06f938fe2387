# SPDX-License-Identifier: MIT
"""``mori bench ir``: Triton kernels over MORI-IR against the same operations in CUDA C++ over
``mori/shmem/device.cuh`` and against NCCL, in one run:

* put: Triton ``putmem_nbi_block`` vs the CUDA C++ ``putmem_block`` kernel (mori.shmem.selftest),
  PE 0 to PE 1, the same blocks (one per 64 KiB, at most 64) and 256 threads;
* put with signal: Triton ``putmem_nbi_signal_block`` vs CUDA C++ ``putmem_signal_block``, the same
  split, each block ADDing 1 to PE 1's signal;
* all-reduce (bf16, every PE): the Triton ring (reduce-scatter + all-gather by put-with-signal) and
  the Triton one-shot (every PE puts its input to every peer) vs the same algorithms in CUDA C++
  (``selftest.allreduce_ring`` / ``allreduce_oneshot``: same blocks, threads, element split and
  signals), and vs ``torch.distributed.all_reduce`` (NCCL; a second row, not run when PEs share a
  GPU, which NCCL refuses). Every all-reduce result is compared exactly with torch's sum (``exact``).

Timing: what the GPU spends per call, the same way for every path. A ``torch.cuda._sleep`` kernel
holds the stream while the host enqueues the whole batch of back-to-back calls; CUDA events before
and after the batch then time the kernels alone, so the host-side cost of a launch (Triton's Python
launcher against a ctypes call) does not enter ``*_us``. ``host_ahead`` says the host finished
enqueuing before the GPU reached the batch (false: the hold was too short and the figure is an upper
bound). ``*_launch_us`` is that host-side cost: host microseconds per call while enqueuing.

Sizes 4 KiB to 256 MiB (x4) and 8 KiB (the size of the issue's one-shot target). ratio =
triton_us / baseline_us (below 1: Triton is faster). Prints a table and writes JSON. Starts its own
PEs with ``mori run``: 2 by default, or MORI_TEST_GPU_PES PEs sharing the GPUs when there are fewer
GPUs than PEs (their kernels take turns: the all-reduce rows then show that it works, not its
speed; the put rows time PE 0 alone).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from typing import Any, Callable, Optional

from mori.apps.bench.launch import GPU_JOB_ENV, relaunch, use_local_gpu
from mori.apps.bench.report import Report
from mori.apps.bench.sizes import human_size, size_sweep, size_type

ONESHOT_MAX = 64 << 20  # the one-shot's gather buffer is npes x the message
TARGET_SIZE = 8 << 10
RING_PROGRAMS_MAX = 32
THREADS = 256  # CUDA C++ blocks; the Triton kernels run num_warps=8 (256 threads)
BLOCK = 2048  # Triton all-reduce step: 8 bf16 per thread, as the CUDA C++ kernels
COLUMNS = [
    "op",
    "size",
    "triton_us",
    "triton_GBps",
    "baseline",
    "baseline_us",
    "baseline_GBps",
    "ratio",
    "triton_launch_us",
    "baseline_launch_us",
]
# The hold before a batch: generous for the host cost of one launch (Triton's Python launcher takes
# tens of microseconds) plus a margin; _sleep counts SM clock cycles, 2 per ns at most on an H200.
HOLD_US_PER_CALL, HOLD_US_MARGIN, CYCLES_PER_US = 150, 3000, 2000


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mori bench ir", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--pes",
        type=int,
        default=None,
        help="PEs (default: MORI_TEST_GPU_PES, else 2); PEs share GPUs when there are fewer GPUs",
    )
    p.add_argument("--json", default="bench-results/ir.json", help="where to write the results")
    p.add_argument("--min-size", type=size_type("--min-size"), default=4 << 10, help="smallest message in bytes")
    p.add_argument("--max-size", type=size_type("--max-size"), default=256 << 20, help="largest message in bytes")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p


def _iters(nbytes: int, cap: int = 200) -> int:
    return min(cap, 200 if nbytes <= (1 << 20) else max(5, min(50, (1 << 30) // nbytes)))


def _gpu_time_us(launch: Callable[[], Any], iters: int, barrier: Optional[Callable[[], None]] = None) -> dict:
    """GPU microseconds per call of `launch` over `iters` back-to-back calls, after 3 warm-up calls
    (see the module doc): a sleep kernel holds the stream while the host enqueues the batch, CUDA
    events around the batch time it. Returns {"us", "launch_us" (host per call), "host_ahead"}.
    `barrier` (collectives) lines the PEs up before the hold, every PE then holds as long."""
    import torch

    for _ in range(3):
        launch()
    torch.cuda.synchronize()
    if barrier:
        barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(int((iters * HOLD_US_PER_CALL + HOLD_US_MARGIN) * CYCLES_PER_US))
    start.record()
    t0 = time.perf_counter()
    for _ in range(iters):
        launch()
    host_us = (time.perf_counter() - t0) / iters * 1e6
    host_ahead = not start.query()  # the GPU had not yet reached the batch when it was all enqueued
    end.record()
    end.synchronize()
    return {"us": start.elapsed_time(end) / iters * 1e3, "launch_us": host_us, "host_ahead": host_ahead}


def _row(op: str, nbytes: int, triton: dict, baseline: str, base: Optional[dict], **extra: Any) -> dict:
    t_us = triton["us"]
    row = {
        "op": op,
        "size": human_size(nbytes),
        "bytes": nbytes,
        "triton_us": round(t_us, 2),
        "triton_GBps": round(nbytes / t_us / 1e3, 2),
        "baseline": baseline,
        "baseline_us": None,
        "baseline_GBps": None,
        "ratio": None,
        "triton_launch_us": round(triton["launch_us"], 1),
        "baseline_launch_us": None,
        "host_ahead": triton["host_ahead"],
        **extra,
    }
    if base is not None:
        b_us = base["us"]
        row.update(
            baseline_us=round(b_us, 2),
            baseline_GBps=round(nbytes / b_us / 1e3, 2),
            ratio=round(t_us / b_us, 3),
            baseline_launch_us=round(base["launch_us"], 1),
            host_ahead=triton["host_ahead"] and base["host_ahead"],
        )
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
    # x4 from --min-size, plus 8 KiB: the one-shot target (<= 10 us on two GPUs) is at that size
    sizes = sorted(
        set(size_sweep(args.min_size, args.max_size))
        | ({TARGET_SIZE} if args.min_size <= TARGET_SIZE <= args.max_size else set())
    )
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

    def emit(row: dict) -> None:
        rows.append(row)
        print(f"BENCH {json.dumps(row)}", flush=True)

    # ---- put and put with signal: PE 0 -> PE 1, the others wait at the barrier
    dst, sig = sym(cap, torch.uint8), sym(1, torch.int64)
    src = torch.randint(0, 256, (cap,), dtype=torch.uint8, device="cuda")
    if me == 0 and n >= 2:
        for size in sizes:
            blocks = max(1, min(64, size // (64 << 10)))
            per = size // blocks
            iters = _iters(size)
            t_tr = _gpu_time_us(lambda: k.put_kernel[(blocks,)](dst, src, per, 1, num_warps=8, extern_libs=libs), iters)
            t_cu = _gpu_time_us(
                lambda: selftest.put(
                    selftest.BLOCK, dst.data_ptr(), src.data_ptr(), per * blocks, 1, blocks=blocks, threads=THREADS
                ),
                iters,
            )
            emit(_row("put", size, t_tr, "cuda_cpp", t_cu))
            t_tr = _gpu_time_us(
                lambda: k.put_signal_kernel[(blocks,)](dst, src, sig, per, 1, num_warps=8, extern_libs=libs), iters
            )
            t_cu = _gpu_time_us(
                lambda: selftest.put_signal(
                    dst.data_ptr(), src.data_ptr(), per * blocks, sig.data_ptr(), 1, blocks=blocks, threads=THREADS
                ),
                iters,
            )
            emit(_row("put_signal", size, t_tr, "cuda_cpp", t_cu))
    torch.cuda.synchronize()
    sh.shmem_barrier_all()
    mori_shmem_free_tensor(dst)
    mori_shmem_free_tensor(sig)

    # ---- all-reduce (bf16, every PE); integers whose every partial sum stays within +-256 (bf16
    # holds those exactly), so each result must equal torch's sum of every PE's input bit for bit
    count_cap = cap // 2
    rs, ag = sym(count_cap, torch.bfloat16), sym(count_cap, torch.bfloat16)
    ring_sig, ring_ack = sym(RING_PROGRAMS_MAX, torch.int64), sym(RING_PROGRAMS_MAX, torch.int64)
    one_max = min(cap, ONESHOT_MAX) // 2
    gather, one_sig = sym(n * one_max, torch.bfloat16), sym(1, torch.int64)

    def pe_input(pe: int) -> torch.Tensor:
        gen = torch.Generator(device="cuda").manual_seed(1000 + pe)
        bound = 256 // n
        return torch.randint(-bound, bound, (count_cap,), device="cuda", generator=gen).to(torch.bfloat16)

    data = pe_input(me)
    reference = torch.zeros(count_cap, dtype=torch.float32, device="cuda")
    for pe in range(n):
        reference += pe_input(pe).float()
    reference = reference.to(torch.bfloat16)
    work, out = torch.empty_like(data), torch.empty_like(data)
    epoch = [0]

    def fresh_signals() -> None:
        """Every PE idle, then the signals at zero and the epochs from 1 again: the ring's blocks
        change with the size, and a block's sig/ack must start at zero."""
        torch.cuda.synchronize()
        sh.shmem_barrier_all()
        for t in (ring_sig, ring_ack, one_sig):
            t.zero_()
        out.fill_(float("nan"))
        epoch[0] = 0
        torch.cuda.synchronize()
        sh.shmem_barrier_all()

    def next_epoch() -> int:
        epoch[0] += 1
        return epoch[0]

    def triton_ring(count: int, programs: int) -> None:
        k.ring_allreduce_kernel[(programs,)](
            data,
            work,
            rs,
            ag,
            ring_sig,
            ring_ack,
            out,
            next_epoch(),
            count,
            npes_c=n,
            BLOCK=BLOCK,
            num_warps=8,
            extern_libs=libs,
        )

    def cuda_ring(count: int, programs: int) -> None:
        selftest.allreduce_ring(
            data.data_ptr(),
            work.data_ptr(),
            rs.data_ptr(),
            ag.data_ptr(),
            ring_sig.data_ptr(),
            ring_ack.data_ptr(),
            out.data_ptr(),
            next_epoch(),
            count,
            blocks=programs,
            threads=THREADS,
        )

    def triton_oneshot(count: int) -> None:
        k.oneshot_allreduce_kernel[(1,)](
            data, gather, one_sig, out, next_epoch(), count, npes_c=n, BLOCK=BLOCK, num_warps=8, extern_libs=libs
        )

    def cuda_oneshot(count: int) -> None:
        selftest.allreduce_oneshot(
            data.data_ptr(), gather.data_ptr(), one_sig.data_ptr(), out.data_ptr(), next_epoch(), count, threads=THREADS
        )

    def timed_exact(launch: Callable[[], None], count: int, iters: int) -> dict:
        fresh_signals()
        t = _gpu_time_us(launch, iters, sh.shmem_barrier_all)
        torch.cuda.synchronize()
        t["exact"] = bool(torch.equal(out[:count], reference[:count]))
        return t

    for size in sizes:
        count = size // 2
        programs = max(1, min(RING_PROGRAMS_MAX, size // (n * (256 << 10))))
        # PEs sharing a GPU take turns (time slices): a few calls show it works, not its speed
        iters = 10 if shared_gpu else _iters(size)
        ring = {
            "triton": timed_exact(lambda: triton_ring(count, programs), count, iters),
            "cuda_cpp": timed_exact(lambda: cuda_ring(count, programs), count, iters),
        }
        one = None
        if count <= one_max:
            one = {
                "triton": timed_exact(lambda: triton_oneshot(count), count, iters),
                "cuda_cpp": timed_exact(lambda: cuda_oneshot(count), count, iters),
            }
        t_nccl = None
        if nccl is not None:
            x = data[:count].clone()
            t_nccl = _gpu_time_us(lambda: nccl.all_reduce(x), iters, sh.shmem_barrier_all)
        torch.cuda.synchronize()
        sh.shmem_barrier_all()
        if me == 0:
            for op, pair, blocks in (("allreduce_ring", ring, programs), ("allreduce_oneshot", one, 1)):
                if pair is None:
                    continue
                exact = {"exact": pair["triton"]["exact"] and pair["cuda_cpp"]["exact"], "blocks": blocks}
                emit(_row(op, size, pair["triton"], "cuda_cpp", pair["cuda_cpp"], **exact))
                if t_nccl is not None:
                    emit(_row(op, size, pair["triton"], "nccl", t_nccl, **exact))
    sh.shmem_barrier_all()
    for t in (rs, ag, ring_sig, ring_ack, gather, one_sig):
        mori_shmem_free_tensor(t)
    if me == 0:
        about = {
            "host": socket.gethostname(),
            "gpu": torch.cuda.get_device_name(),
            "pes": n,
            "gpus": torch.cuda.device_count(),
            "pes_share_a_gpu": shared_gpu,
            "torch": torch.__version__,
            "timing": "GPU time per call: a sleep kernel holds the stream while the host enqueues the batch, "
            "CUDA events around the batch (host launch cost excluded; *_launch_us is it)",
        }
        report = Report("ir", COLUMNS + ["host_ahead", "exact"], rows=rows)
        report.show(
            f"mori bench ir: {n} PEs on {about['gpus']} x {about['gpu']}"
            + (" (PEs share a GPU: no NCCL)" if shared_gpu else "")
            + "; ratio = triton_us / baseline_us"
        )
        print(f"wrote {report.save(args.json, extra=about)}")
        wrong = [f"{r['op']} {r['size']}" for r in rows if r.get("exact") is False]
        if wrong:
            print(f"mori bench ir: all-reduce results differ from torch's sum: {', '.join(wrong)}", file=sys.stderr)
    if nccl is not None:
        dist.destroy_process_group()
    sh.shmem_finalize()
    return 1 if me == 0 and any(r.get("exact") is False for r in rows) else 0


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
