#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A batch spread over several owners: their calls side by side against one after another.

A master (in this process) and --owners owner workers (processes of their own) on one host;
this process is a worker with a small DRAM, so the master spreads each batch over the owners
(most_available counts each routed key against its owner's room). Each timed call puts a fresh
batch of registered memory, then reads it back once (get-1st: a route, then one read per
owner); the client's owners' parts run side by side (`DistributedUMBPClient._each_peer`) or,
the baseline alternated with it in the same run, one after another. Prints p50 per mode and
round and writes JSON.

    GRPC_POLL_STRATEGY=poll python3 scripts/umbp_spread_calls.py --owners 3 --size 256K --batch 24

A diagnostic, not a benchmark of the pool against others: docs/umbp-distributed.md (Round 10)
quotes it.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
import uuid
from pathlib import Path


def main(argv=None) -> int:
    root = Path(__file__).resolve().parent.parent
    sys.path[:0] = [str(root / "tests" / "umbp" / "distributed"), str(root / "tests")]
    from dist_harness import start_workers
    from umbp_master_harness import fast_settings, running_master, uid

    import mori.umbp as umbp
    from mori.apps.bench import umbp_distributed as ud
    from mori.apps.bench.sizes import parse_size

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--owners", type=int, default=3, help="owner workers (default 3)")
    p.add_argument("--size", default="256K", help="value size (default 256K)")
    p.add_argument("--batch", type=int, default=24, help="values per call (default 24)")
    p.add_argument("--iters", type=int, default=30, help="timed put + get pairs per mode and round")
    p.add_argument("--rounds", type=int, default=3, help="alternations of the two modes")
    p.add_argument("--gap-ms", type=float, default=0.0, help="idle time before each timed call (default 0)")
    p.add_argument("--json", default=None, help="where to write the figures (default: none)")
    args = p.parse_args(argv)
    size, n = parse_size(args.size, "--size"), args.batch
    if args.owners < 2 or n < args.owners:
        p.error("--owners must be 2 or more and --batch at least --owners")

    out: dict = {
        "owners": args.owners,
        "size": size,
        "batch": n,
        "iters": args.iters,
        "gap_ms": args.gap_ms,
        "rounds": [],
    }
    with running_master(settings=fast_settings()) as master:
        owners = start_workers(
            *(
                dict(master=master.address, node_id=uid(f"o{k}"), dram=max(256 << 20, 4 * size * n))
                for k in range(args.owners)
            )
        )
        client = umbp.UMBPClient(
            ud._distributed_config(umbp, master.address, f"spread-{uuid.uuid4().hex[:6]}", 4 << 20, "127.0.0.1")
        )
        try:
            buf = (ctypes.c_char * (size * n))()
            base = ctypes.addressof(buf)
            client.register_memory(base, size * n)
            ptrs, sizes = [base + i * size for i in range(n)], [size] * n
            cls = type(client)
            side_by_side = cls._each_peer

            def timed(call, into: list, what: str) -> None:
                time.sleep(args.gap_ms / 1000.0)
                t0 = time.perf_counter()
                ok = call()
                into.append(time.perf_counter() - t0)
                if not all(ok):
                    raise RuntimeError(f"a {what} of the batch failed: {sum(ok)} of {n} values")

            def one_after_another(self, fn, groups):
                return [fn(*g) for g in groups]

            for r in range(args.rounds):
                row: dict = {}
                for mode, impl in (("side by side", side_by_side), ("one after another", one_after_another)):
                    cls._each_peer = impl
                    puts, gets = [], []
                    for _ in range(args.iters):
                        keys = [f"k{uuid.uuid4().hex}" for _ in range(n)]
                        timed(lambda: client.batch_put_from_ptr(keys, ptrs, sizes), puts, "put")
                        timed(lambda: client.batch_get_into_ptr(keys, ptrs, sizes), gets, "get")
                    row[mode] = {
                        "put_p50_ms": statistics.median(puts) * 1e3,
                        "get1st_p50_ms": statistics.median(gets) * 1e3,
                    }
                cls._each_peer = side_by_side
                out["rounds"].append(row)
        finally:
            client.close()
            for o in owners:
                o.close()
    print(f"{n} x {args.size} over {args.owners} owners, {args.gap_ms:g} ms idle before each call, p50 per round (ms)")
    for mode in ("side by side", "one after another"):
        puts = " / ".join(f"{r[mode]['put_p50_ms']:.2f}" for r in out["rounds"])
        gets = " / ".join(f"{r[mode]['get1st_p50_ms']:.2f}" for r in out["rounds"])
        print(f"  {mode:18s} put {puts}   get-1st {gets}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
        print("wrote", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
