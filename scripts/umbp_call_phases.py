#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Where a distributed UMBP put's (or first get's) time goes, on one host.

A master and an owner run in a child process (the `mori bench umbp --distributed` pool, on
127.0.0.1); this process is a worker with a small DRAM, so the master routes its puts to the
owner. Each call is timed whole, and so are its phases, by wrapping the client's own methods:
the master RPC (`_master_call`), the owner's pulled put (`_put_remote`), a first read's remote
part (`_get_remote`). Prints p50 per phase and writes JSON.

    GRPC_POLL_STRATEGY=poll python3 scripts/umbp_call_phases.py --size 64K --calls 3000 [--json out.json]

GRPC_POLL_STRATEGY applies to this worker only: the master and owner process runs on grpc's default.

A diagnostic, not a benchmark (no baseline): docs/umbp-distributed.md (Round 8) quotes it.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
import uuid


def _serve(capacity: int, ready, stop) -> None:
    import os

    # The master (and the owner it starts) on grpc's default polling engine, as deployed
    # (docs/umbp-distributed.md): a GRPC_POLL_STRATEGY meant for this worker is not inherited.
    # Set before grpc starts in this fresh process, while it runs one thread.
    os.environ.pop("GRPC_POLL_STRATEGY", None)
    from mori.apps.bench import umbp_distributed as ud

    pool = ud.Pool("127.0.0.1", capacity, False, 30.0).start(tempfile.mkdtemp())
    ready.put(pool.info)
    stop.wait()
    pool.stop()


def _timed(cls, name: str, into: dict) -> None:
    real = getattr(cls, name)

    def wrapper(self, *args, **kw):
        t0 = time.perf_counter()
        try:
            return real(self, *args, **kw)
        finally:
            into.setdefault(name, []).append(time.perf_counter() - t0)

    setattr(cls, name, wrapper)


def main(argv=None) -> int:
    from mori.apps.bench.sizes import parse_size

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="64K", help="value size")
    p.add_argument("--calls", type=int, default=3000, help="puts, then as many first gets")
    p.add_argument(
        "--register",
        action="store_true",
        help="register the buffer with the client (zero-copy puts and located reads, as SGLang's host pool); "
        "default: unregistered memory, through the staging buffer",
    )
    p.add_argument("--json", default=None, help="where to write the phases (default: none)")
    args = p.parse_args(argv)
    size = parse_size(args.size, "--size")

    ctx = mp.get_context("spawn")
    ready, stop = ctx.Queue(), ctx.Event()
    # The owner holds every value put (the first gets must find them all).
    capacity = max(1 << 30, 2 * size * args.calls)
    server = ctx.Process(target=_serve, args=(capacity, ready, stop))  # not daemonic: the pool starts children
    server.start()
    info = ready.get(timeout=120)
    import mori.umbp as umbp
    from mori.apps.bench import umbp_distributed as ud

    client = umbp.UMBPClient(
        ud._distributed_config(umbp, info["umbp_master"], f"phases-{uuid.uuid4().hex[:6]}", 64 << 20, "127.0.0.1")
    )
    buf = (ctypes.c_char * size)()
    ptr = ctypes.addressof(buf)
    if args.register:
        client.register_memory(ptr, size)
    out: dict = {}
    keys = [f"k{uuid.uuid4().hex}" for _ in range(args.calls)]  # put, then read back once each
    try:
        for op in ("put", "get-1st"):
            phases: dict = {}
            cls = type(client)
            saved = {n: getattr(cls, n) for n in ("_master_call", "_put_remote", "_get_remote")}
            for n in saved:
                _timed(cls, n, phases)
            total = []
            try:
                for k in keys:
                    t0 = time.perf_counter()
                    ok = client.put_from_ptr(k, ptr, size) if op == "put" else client.get_into_ptr(k, ptr, size)
                    total.append(time.perf_counter() - t0)
                    if not ok:
                        raise RuntimeError(f"{op} of {k} failed")
            finally:
                for n, fn in saved.items():
                    setattr(cls, n, fn)
            if op == "put":
                time.sleep(1.0)  # the owner's ADD events reach the master: first gets read at their places
            out[op] = {"total": total, **phases}
    finally:
        client.close()
        stop.set()
        server.join(30)
    print(f"{'op':8s} {'phase':14s} {'calls':>6s} {'p50 us':>9s}")
    doc = {"size": size, "calls": args.calls, "registered": args.register, "phases": {}}
    for op, phases in out.items():
        for name, v in phases.items():
            p50 = statistics.median(v) * 1e6
            doc["phases"].setdefault(op, {})[name] = {"calls": len(v), "p50_us": p50}
            print(f"{op:8s} {name:14s} {len(v):6d} {p50:9.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print("wrote", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
