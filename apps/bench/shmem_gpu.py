# SPDX-License-Identifier: MIT
"""``mori bench shmem --gpu``: the GPU symmetric heap between two NVLink-connected GPUs.

Measured on PE 0 towards PE 1, in one run:

* ceiling: torch's peer ``copy_`` from cuda:<PE 0's device> to cuda:<PE 1's device> (copy engine);
* copy engine: ``putmem_on_stream(engine="copy")`` into PE 1's GPU heap (host-initiated, no SMs);
* SM put: ``putmem_on_stream(engine="sm")``, the library's kernel (four 512-thread blocks per SM,
  the grid striding over the buffer) storing over NVLink;
* putmem_block: a user-style kernel (selftest library) where each of 2 blocks per SM puts one
  contiguous share with the device API's ``putmem_block``;

from 4 KiB to 1 GiB (bandwidth = bytes / time, one direction), and the round trip of an 8-byte
put-with-signal between two kernels (device API ping-pong). Prints a table, writes JSON.

Run as ``mori bench shmem --gpu [--json PATH]``: it starts its own 2 PEs with ``mori run``.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import sys
from typing import Any, Optional

from mori.apps.bench.launch import GPU_JOB_ENV, relaunch, use_local_gpu
from mori.apps.bench.report import Report
from mori.apps.bench.sizes import human_size, size_sweep, size_type

COLUMNS = [
    "size",
    "torch_copy_GBps",
    "copy_engine_GBps",
    "copy_engine_vs_ceiling",
    "sm_put_GBps",
    "sm_put_vs_ceiling",
    "putmem_block_GBps",
    "putmem_block_vs_ceiling",
]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mori bench shmem --gpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--gpu", action="store_true", help="(accepted: selects this benchmark in `mori bench shmem`)")
    p.add_argument("--json", default="bench-results/shmem_gpu.json", help="where to write the results")
    p.add_argument("--min-size", type=size_type("--min-size"), default=4 << 10, help="smallest message in bytes")
    p.add_argument("--max-size", type=size_type("--max-size"), default=1 << 30, help="largest message in bytes")
    p.add_argument("--pingpong-iters", type=int, default=20000, help="round trips of the latency test")
    p.add_argument("--reps", type=int, default=5, help="timed repetitions per point (median is reported)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p


def _time_per_op(fn: Any, nbytes: int, reps: int) -> float:
    """Median seconds per call of ``fn`` (CUDA events around a batch, after warm-up)."""
    import torch

    batch = max(2, min(200, (256 << 20) // max(nbytes, 1)))
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(batch):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / batch)
    times.sort()
    return times[len(times) // 2]


def _worker(args: argparse.Namespace) -> int:
    import torch

    use_local_gpu()
    import mori.shmem as sh
    from mori.shmem import gpu, selftest
    from mori.shmem.tensor_utils import mori_shmem_create_tensor, mori_shmem_free_tensor

    sh.shmem_init()
    me, n = sh.shmem_mype(), sh.shmem_npes()
    if n != 2:
        raise SystemExit("the GPU shmem benchmark runs on exactly 2 PEs")
    peer = 1 - me
    sizes = size_sweep(args.min_size, args.max_size)
    dst = mori_shmem_create_tensor((sizes[-1],), torch.uint8)
    # Same generator and seed on both PEs: PE 1 can check what PE 0 put against its own copy.
    gen = torch.Generator(device="cuda").manual_seed(20261129)
    src = torch.randint(0, 256, (sizes[-1],), dtype=torch.uint8, device="cuda", generator=gen)
    rows: list[dict] = []
    sweep: list[dict] = []
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    peer_dev = _peer_device(sh, peer)  # collective: every PE takes part
    if me == 0:
        ceiling_dst = torch.empty(sizes[-1], dtype=torch.uint8, device=f"cuda:{peer_dev}")
        for nbytes in sizes:
            s, c = src[:nbytes], ceiling_dst[:nbytes]
            t_torch = _time_per_op(lambda: c.copy_(s, non_blocking=True), nbytes, args.reps)
            t_copy = _time_per_op(lambda: gpu.putmem_on_stream(dst, s, nbytes, peer, engine="copy"), nbytes, args.reps)
            t_blk = _time_per_op(
                lambda: selftest.put(
                    selftest.BLOCK, dst.data_ptr(), s.data_ptr(), nbytes, peer, blocks=2 * sms, threads=512
                ),
                nbytes,
                args.reps,
            )
            t_sm = _time_per_op(lambda: gpu.putmem_on_stream(dst, s, nbytes, peer, engine="sm"), nbytes, args.reps)
            row = {
                "size": human_size(nbytes),
                "bytes": nbytes,
                "torch_copy_GBps": nbytes / t_torch / 1e9,
                "copy_engine_GBps": nbytes / t_copy / 1e9,
                "sm_put_GBps": nbytes / t_sm / 1e9,
                "putmem_block_GBps": nbytes / t_blk / 1e9,
                "torch_copy_us": t_torch * 1e6,
                "copy_engine_us": t_copy * 1e6,
                "sm_put_us": t_sm * 1e6,
                "putmem_block_us": t_blk * 1e6,
            }
            row["copy_engine_vs_ceiling"] = row["copy_engine_GBps"] / row["torch_copy_GBps"]
            row["sm_put_vs_ceiling"] = row["sm_put_GBps"] / row["torch_copy_GBps"]
            row["putmem_block_vs_ceiling"] = row["putmem_block_GBps"] / row["torch_copy_GBps"]
            rows.append(row)
        # How the library's SM put scales with its grid (blocks per SM), at 256 MiB or the largest size.
        sweep_bytes = min(256 << 20, sizes[-1])
        s = src[:sweep_bytes]
        for per_sm in (1, 2, 4, 8):
            t = _time_per_op(
                lambda: gpu.putmem_on_stream(dst, s, sweep_bytes, peer, engine="sm", blocks=per_sm * sms),
                sweep_bytes,
                args.reps,
            )
            sweep.append({"bytes": sweep_bytes, "blocks_per_sm": per_sm, "GBps": sweep_bytes / t / 1e9})
        # Correctness of what was timed: the last SM and copy-engine puts landed intact.
        torch.cuda.synchronize()
    sh.shmem_barrier_all()
    if me == 1:
        torch.cuda.synchronize()
        if not torch.equal(dst, src):
            raise SystemExit("PE 1: the benchmark's puts did not deliver PE 0's bytes")
    sh.shmem_barrier_all()
    # Round trip of an 8-byte put with signal, kernel to kernel.
    words = torch.zeros(2, dtype=torch.int64, device="cuda")
    pp = mori_shmem_create_tensor((2,), torch.int64)
    pp.zero_()
    torch.cuda.synchronize()
    sh.shmem_barrier_all()
    selftest.pingpong(me, pp.data_ptr(), pp.data_ptr() + 8, args.pingpong_iters, peer, words.data_ptr())
    torch.cuda.synchronize()
    rt_ns, errors = int(words[0]), int(words[1])
    if errors:
        raise SystemExit(f"PE {me}: {errors} ping-pong payloads were stale after their signal")
    sh.shmem_barrier_all()
    if me == 0:
        print(f"wrote {_report(args, rows, sweep, rt_ns / 1e3, torch)}")
    mori_shmem_free_tensor(pp)
    mori_shmem_free_tensor(dst)
    sh.shmem_finalize()
    return 0


def _peer_device(sh: Any, peer: int) -> int:
    """The CUDA ordinal (in this process) of ``peer``'s GPU: every PE publishes its device here."""
    import numpy as np

    import torch

    board = sh.zeros(sh.shmem_npes(), dtype=np.int64)
    mine = np.array([torch.cuda.current_device()], dtype=np.int64)
    for pe in range(sh.shmem_npes()):
        sh.put(board[sh.shmem_mype() : sh.shmem_mype() + 1], mine, pe)
    sh.shmem_barrier_all()
    value = int(board[peer])
    sh.free(board)
    return value


def _report(args: argparse.Namespace, rows: list[dict], sweep: list[dict], rt_us: float, torch: Any) -> str:
    """Print the table and the summary; write the JSON; returns its path."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    big = [r for r in rows if r["bytes"] >= 16 << 20]
    summary = {
        "min_copy_engine_vs_ceiling_ge_16MiB": min((r["copy_engine_vs_ceiling"] for r in big), default=None),
        "min_sm_put_vs_ceiling_ge_16MiB": min((r["sm_put_vs_ceiling"] for r in big), default=None),
        "put_signal_round_trip_us": rt_us,
        "target": "copy engine and SM put >= 0.9 x torch peer copy_ for >= 16 MiB; round trip <= 5 us",
    }
    summary["target_met"] = (
        bool(big)
        and summary["min_copy_engine_vs_ceiling_ge_16MiB"] >= 0.9
        and summary["min_sm_put_vs_ceiling_ge_16MiB"] >= 0.9
        and rt_us <= 5.0
    )
    report = Report("shmem_gpu", COLUMNS, rows=rows)
    report.show(
        f"mori bench shmem --gpu: PE 0 ({props.name}) -> PE 1, one direction; GB/s = 1e9 bytes/s; "
        "x ceil = over torch copy_"
    )
    if sweep:
        print(
            "SM put grid sweep at "
            + human_size(sweep[0]["bytes"])
            + ": "
            + ", ".join(f"{w['blocks_per_sm']} blocks/SM {w['GBps']:.1f} GB/s" for w in sweep)
        )
    print(f"8-byte put+signal round trip (device API ping-pong, {args.pingpong_iters} rounds): {rt_us:.2f} us")
    if big:
        print(
            f">= 16 MiB: copy engine >= {summary['min_copy_engine_vs_ceiling_ge_16MiB']:.3f} x ceiling, "
            f"SM put >= {summary['min_sm_put_vs_ceiling_ge_16MiB']:.3f} x ceiling; target met: "
            f"{summary['target_met']}"
        )
    about = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "gpu": props.name,
        "sm_count": props.multi_processor_count,
        "torch": torch.__version__,
    }
    return report.save(args.json, extra=dict(about, sm_put_grid_sweep=sweep, summary=summary))


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    if args.worker:
        return _worker(args)
    from mori import _C

    if not _C.shmem.built_with_cuda():
        print("mori bench shmem --gpu: this MORI was built without CUDA", file=sys.stderr)
        return 2
    if _C.shmem.cuda_device_count() < 2:
        print("mori bench shmem --gpu: needs 2 CUDA GPUs", file=sys.stderr)
        return 2
    env = dict(os.environ, **GPU_JOB_ENV)
    heap = args.max_size + (64 << 20)
    env.setdefault("MORI_SHMEM_GPU_HEAP_SIZE", str(heap))
    return relaunch("mori.apps.bench.shmem_gpu", argv, 2, env=env, prefix_output=True)


if __name__ == "__main__":
    sys.exit(main())
