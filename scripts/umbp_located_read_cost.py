#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Where a distributed UMBP get of a remembered value spends its time, against a raw MORI-IO
read of the same bytes, on one host.

A master runs in this process and an owner worker in another (the test harness of
tests/umbp/distributed); this process is a reader with a small DRAM, so its puts go to the
owner. Per value size and batch, after one routed read that learns the places, each round
times, in an order drawn afresh every round: the whole get (``batch_get_into_ptr``), its native
call alone (the worker's own store, then the located read; no Python around it), the native
located read alone (lookup, MORI-IO read, checksum check; how many values it checked by checksums
hashed as they landed is printed), the serial value checksum of what arrived, and a raw read of
the same bytes at the same places through the same engine. Prints p50s.

    MORI_IO_DIRECT=0 python3 scripts/umbp_located_read_cost.py --calls 300 --shapes 64Kx1,360Kx1,2Mx1,64Kx32

``MORI_IO_DIRECT=0`` makes the reads go over tcp (loopback) as between hosts; without it the
same-host path copies. A diagnostic, not a benchmark: docs/umbp-distributed.md (Round 13).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300, help="rounds per shape (default 300)")
    ap.add_argument("--shapes", default="64Kx1,360Kx1,2Mx1,64Kx32", help="VALUExBATCH,... (default %(default)s)")
    args = ap.parse_args(argv)
    sys.path[:0] = [str(ROOT / "tests" / "umbp" / "distributed"), str(ROOT / "tests")]
    import numpy as np
    from dist_harness import start_workers
    from umbp_master_harness import fast_settings, running_master, uid

    from mori import _C
    from mori.apps.bench.sizes import parse_size
    from mori.io import MemoryLocationType
    from mori.umbp import UMBPClient, UMBPConfig, UMBPDistributedConfig

    shapes = []
    for s in args.shapes.split(","):
        v, b = s.lower().split("x")
        shapes.append((parse_size(v), int(b)))
    with running_master(settings=fast_settings()) as m:
        (owner,) = start_workers(dict(master=m.address, node_id=uid("o"), dram=512 << 20))
        cfg = UMBPConfig()
        cfg.dram.capacity_bytes = 8 << 20
        cfg.dram.prefault = False
        cfg.ssd.enabled = False
        d = UMBPDistributedConfig()
        d.master_config.master_address = m.address
        d.master_config.node_id = uid("r")
        d.master_config.node_address = "127.0.0.1"
        d.io_engine.host = "127.0.0.1"
        d.io_engine.port = 0
        d.peer_service_port = 0
        d.cache_remote_fetches = False
        cfg.distributed = d
        c = UMBPClient(cfg)
        pool = np.random.randint(0, 255, 160 << 20, dtype=np.uint8)
        c.register_memory(pool.ctypes.data, pool.nbytes)
        dst = pool.ctypes.data + (80 << 20)
        raw_dst = c._engine.register_memory(dst, 64 << 20, -1, MemoryLocationType.CPU)
        for size, batch in shapes:
            groups = [[uid("k") for _ in range(batch)] for _ in range(4)]
            for g, keys in enumerate(groups):
                srcs = [pool.ctypes.data + (g * batch + i) * size for i in range(batch)]
                assert all(c.batch_put_from_ptr(keys, srcs, [size] * batch))
            owner.ask("heartbeat")
            ptrs, sizes = [dst + i * size for i in range(batch)], [size] * batch
            for keys in groups:
                assert all(c.batch_get_into_ptr(keys, ptrs, sizes))  # routed: the places are learnt
            places = [[c._locations.peek(k) for k in keys] for keys in groups]
            arena = c._peers[places[0][0][0]].arena
            t = {"get": [], "native get": [], "located read": [], "serial hash": [], "raw read": []}
            on_arrival = 0
            order = np.random.default_rng(size * 1000 + batch)
            for i in range(args.calls):
                keys, pl = groups[i % 4], places[i % 4]

                def located_read() -> None:
                    nonlocal on_arrival
                    located = c._locations.read(c, c._native_engine, keys, ptrs, sizes, [], 5000)
                    on_arrival += located[7] if len(located) > 7 else 0  # (a build before arrival checks: 0)

                def raw_read() -> None:
                    uids = [c._engine.allocate_transfer_uid()]
                    offsets = [[j * size for j in range(batch)]]
                    c._engine.batch_read([raw_dst], offsets, [arena], [[p[2] for p in pl]], [sizes], uids)[0].Wait()

                steps = [
                    lambda: c.batch_get_into_ptr(keys, ptrs, sizes),
                    lambda: c._locations.get(c, c._native_engine, keys, ptrs, sizes, 5000),
                    located_read,
                    lambda: [_C.umbp.value_checksum(p, size) for p in ptrs],
                    raw_read,
                ]
                # A fresh order every round: each step follows each other one equally often (a
                # read right after another read, or after the hash, takes a different time).
                for j in order.permutation(len(steps)):
                    t0 = time.perf_counter_ns()
                    steps[j]()
                    t[list(t)[j]].append(time.perf_counter_ns() - t0)
            cols = "  ".join(f"{name} {np.median(v) / 1e3:8.1f}" for name, v in t.items())
            print(
                f"{size >> 10:6d} KiB x{batch:3d}: {cols} us (p50); checked as they landed: "
                f"{on_arrival} of {args.calls * batch}",
                flush=True,
            )
        c.close()
        owner.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
