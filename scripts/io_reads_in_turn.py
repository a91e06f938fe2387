#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Reads of several sizes taking turns over MORI-IO's tcp backend: two engines in one process,
each round reads every size once, in the order given, and the time of each read is kept. Prints
p50, p99 and max per size and how many reads took over 50 ms; writes them as JSON with --json.

Small reads between striped ones once stalled the striped ones for 100 ms (docs/io.md, Round 8):

    python3 scripts/io_reads_in_turn.py --sizes 4K,400K --rounds 300

With --poll each timed read is completed by polling its status (InProgress in a loop) instead
of waiting; --after-waits N puts N waited reads, untimed, before each timed one. A polled read
right after waited ones once sat out the lane's 500 us linger:

    python3 scripts/io_reads_in_turn.py --sizes 4K,4K --poll --after-waits 2

--wait-ms sets the timed reads' WaitFor deadline: one beyond MORI_IO_TIMEOUT_MS (10 s) is waited
for in recv() alone, a nearer one polls before each recv() (Round 14); compare the two with

    for w in 30000 5000; do MORI_IO_DIRECT=0 python3 scripts/io_reads_in_turn.py --sizes 8,64K --rounds 5000 --wait-ms $w; done
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

import mori.io as mio
from mori._C import core as _core


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="4K,400K", help="read sizes, in the order they take turns")
    ap.add_argument("--rounds", type=int, default=300, help="rounds of one read of each size")
    ap.add_argument("--lanes", type=int, default=2, help="tcp connections between the engines")
    ap.add_argument("--poll", action="store_true", help="complete each timed read by polling its status")
    ap.add_argument("--after-waits", type=int, default=0, help="waited reads (untimed) before each timed one")
    ap.add_argument("--wait-ms", type=int, default=30_000, help="the timed reads' WaitFor deadline (default 30000)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    sizes = [_core.parse_size(s) for s in args.sizes.split(",")]
    if args.rounds < 1 or args.lanes < 1 or args.wait_ms < 1 or not sizes or min(sizes) < 1:
        ap.error("--rounds, --lanes, --wait-ms and every size must be at least 1")
    if args.after_waits < 0:
        ap.error("--after-waits must be at least 0")

    def engine(tag: str) -> mio.IOEngine:
        e = mio.IOEngine(f"reads-in-turn-{os.getpid()}-{tag}", mio.IOEngineConfig("127.0.0.1", 0))
        e.create_backend(mio.BackendType.TCP, mio.TcpBackendConfig(args.lanes, False))
        return e

    initiator, target = engine("i"), engine("t")
    initiator.register_remote_engine(mio.EngineDesc.unpack(target.get_engine_desc().pack()))
    n = max(sizes)
    src = np.random.default_rng().integers(0, 256, n, dtype=np.uint8)
    dst = np.zeros(n, np.uint8)
    cpu = mio.MemoryLocationType.CPU
    local = initiator.register_memory(dst.ctypes.data, n, -1, cpu)
    remote = mio.MemoryDesc.unpack(target.register_memory(src.ctypes.data, n, -1, cpu).pack())
    session = initiator.create_session(local, remote)
    took: list[list[float]] = [[] for _ in sizes]
    for _ in range(args.rounds):
        for i, size in enumerate(sizes):
            for _ in range(args.after_waits):
                if (
                    session.read(0, 0, size, initiator.allocate_transfer_uid()).WaitFor(30_000)
                    != mio.StatusCode.SUCCESS
                ):
                    raise SystemExit(f"waited read of {size} B failed")
            t0 = time.perf_counter()
            st = session.read(0, 0, size, initiator.allocate_transfer_uid())
            if args.poll:
                while st.InProgress() and time.perf_counter() - t0 < 30:
                    pass
            elif st.WaitFor(args.wait_ms) != mio.StatusCode.SUCCESS:
                raise SystemExit(f"read of {size} B failed: {st.Message()}")
            took[i].append((time.perf_counter() - t0) * 1e6)
            if not st.Succeeded():
                raise SystemExit(f"read of {size} B failed: {st.Message()}")
    if not np.array_equal(dst, src):
        raise SystemExit("the bytes read differ from the target's")
    rows = []
    print(f"{'size':>10} {'p50 us':>10} {'p99 us':>10} {'max us':>10} {'over 50 ms':>11}")
    for size, t in zip(sizes, took):
        a = np.array(t)
        row = {
            "size": size,
            "reads": len(t),
            "p50_us": float(np.median(a)),
            "p99_us": float(np.percentile(a, 99)),
            "max_us": float(a.max()),
            "over_50ms": int((a > 50_000).sum()),
        }
        rows.append(row)
        print(f"{size:>10} {row['p50_us']:>10.1f} {row['p99_us']:>10.1f} {row['max_us']:>10.1f} {row['over_50ms']:>11}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "command": "scripts/io_reads_in_turn.py",
                    "lanes": args.lanes,
                    "poll": args.poll,
                    "after_waits": args.after_waits,
                    "wait_ms": args.wait_ms,
                    "rows": rows,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
