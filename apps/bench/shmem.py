# SPDX-License-Identifier: MIT
"""``mori bench shmem``: put/get latency and bandwidth between two PEs of one host, from Python.

Baselines in the same run: mpi4py's MPI RMA (``MPI.Win`` Put/Get + Flush, passive target) and
plain ``memcpy`` (numpy copy between two local buffers) as the bandwidth ceiling.

Latency = one blocking put (or get) followed by quiet, averaged; bandwidth = a window of
non-blocking puts (gets) then one quiet. PE 0 drives, PE 1 is the passive target.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

import numpy as np

from mori.apps.bench.launch import mpirun_path, relaunch, relaunch_mpirun
from mori.apps.bench.timing import mean_seconds

LAT_SIZES = [8, 64, 512, 4096]
BW_SIZES = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def _lat_iters(budget_s: float) -> int:
    return max(200, int(budget_s / 2e-6))


def _worker(args: argparse.Namespace) -> int:
    import mori.shmem as sh
    from mori.apps.bench.report import Report
    from mori.apps.bench.sizes import human_size

    mpi = None
    if os.environ.get("OMPI_COMM_WORLD_SIZE") and not args.no_mpi:
        from mpi4py import MPI

        mpi = MPI
        sh.shmem_mpi_init()
    else:
        sh.shmem_init()
    me, n = sh.shmem_mype(), sh.shmem_npes()
    if n != 2:
        raise SystemExit("mori bench shmem needs exactly 2 PEs")
    max_size = max(BW_SIZES)
    sym = sh.shmem_malloc(max_size)
    # Local buffers start half a page off the heap's page alignment: equal low address bits make
    # every copy pay for 4K aliasing, which would measure the CPU's store buffer, not the transports.
    src = np.random.default_rng(0).integers(0, 255, max_size + 4096, dtype=np.uint8)[2048 : 2048 + max_size]
    dst = np.empty(max_size + 4096, np.uint8)[2048 : 2048 + max_size]
    src_addr, dst_addr = src.ctypes.data, dst.ctypes.data
    win = None
    if mpi is not None:
        win = mpi.Win.Allocate(max_size, comm=mpi.COMM_WORLD)
        win.Lock_all()
    sh.shmem_barrier_all()
    report = Report(
        "shmem",
        ["op", "size", "mori_us", "mpi_rma_us", "mpi/mori", "mori_GBps", "mpi_rma_GBps", "memcpy_GBps", "mori/memcpy"],
    )
    if me == 0:
        iters = _lat_iters(args.budget)
        for op in ("put", "get"):
            for size in LAT_SIZES:
                if op == "put":
                    ours = mean_seconds(lambda: (sh.shmem_putmem(sym, src_addr, size, 1), sh.shmem_quiet()), iters)
                else:
                    ours = mean_seconds(lambda: sh.shmem_getmem(dst_addr, sym, size, 1), iters)
                theirs = None
                if win is not None:
                    view_src, view_dst = src[:size], dst[:size]
                    if op == "put":
                        theirs = mean_seconds(lambda: (win.Put(view_src, 1), win.Flush(1)), iters)
                    else:
                        theirs = mean_seconds(lambda: (win.Get(view_dst, 1), win.Flush(1)), iters)
                report.add(
                    op=f"{op} latency",
                    size=human_size(size),
                    mori_us=ours * 1e6,
                    mpi_rma_us=theirs * 1e6 if theirs else None,
                    **{"mpi/mori": theirs / ours if theirs else None},
                )
        for op in ("put", "get"):
            for size in BW_SIZES:
                window = max(4, min(64, (256 << 20) // size))
                reps = max(3, int(args.budget * 2))

                def ours_fn() -> None:
                    if op == "put":
                        for _ in range(window):
                            sh.shmem_putmem_nbi(sym, src_addr, size, 1)
                    else:
                        for _ in range(window):
                            sh.shmem_getmem(dst_addr, sym, size, 1)
                    sh.shmem_quiet()

                t_ours = mean_seconds(ours_fn, reps, warmup=1) / window
                t_mpi = None
                if win is not None:
                    vs, vd = src[:size], dst[:size]

                    def mpi_fn() -> None:
                        for _ in range(window):
                            (win.Put(vs, 1) if op == "put" else win.Get(vd, 1))
                        win.Flush(1)

                    t_mpi = mean_seconds(mpi_fn, reps, warmup=1) / window
                a, b = src[:size], dst[:size]  # the same local buffers as the RMA calls
                t_copy = mean_seconds(lambda: [np.copyto(b, a) for _ in range(window)], reps, warmup=1) / window
                gb = lambda t: size / t / 1e9 if t else None  # noqa: E731
                report.add(
                    op=f"{op} bandwidth",
                    size=human_size(size),
                    mori_GBps=gb(t_ours),
                    mpi_rma_GBps=gb(t_mpi),
                    memcpy_GBps=gb(t_copy),
                    **{"mori/memcpy": t_copy / t_ours},
                )
        report.meta = {
            "pes": n,
            "transport": sh.transport_name(1),
            "mpi_baseline": win is not None,
            "latency_iters": iters,
        }
        report.show("mori bench shmem: 2 PEs, one host (latency: lower is better; bandwidth: higher)")
        print("wrote", report.save(args.json))
    sh.shmem_barrier_all()
    if win is not None:
        win.Unlock_all()
        win.Free()
    sh.shmem_free(sym)
    sh.shmem_finalize()
    return 0


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="mori bench shmem", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", default="bench-results/shmem.json", help="where to write the JSON results")
    parser.add_argument("--budget", type=float, default=0.05, help="seconds of timing per latency point")
    parser.add_argument("--no-mpi", action="store_true", help="skip the mpi4py RMA baseline (launch with mori run)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args)
    if not args.no_mpi:
        if mpirun_path():
            return relaunch_mpirun("mori.apps.bench.shmem", argv, 2)
        print("mpirun not found: running without the mpi4py RMA baseline", file=sys.stderr)
    return relaunch("mori.apps.bench.shmem", [*argv, *([] if args.no_mpi else ["--no-mpi"])], 2)


if __name__ == "__main__":
    sys.exit(main())
