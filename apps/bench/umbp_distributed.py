# SPDX-License-Identifier: MIT
"""``mori bench umbp --distributed``: the distributed pool across two processes on one host: a
master (in this process, in-memory store), an owner worker (another process, the pool's DRAM) and
this process's worker, whose DRAM is too small to be routed to, so its puts and gets cross to the
owner through MORI-IO.

    mori bench umbp --distributed                           # ~1 minute on 2 cores
    mori bench umbp --distributed --sizes 2M --batches 32 --json out.json

Rows (engine / op):
  umbp put      batch_put_from_ptr of fresh keys: BatchRoutePut, then BatchAllocateSlots on the
                owner, which reads the values from the registered source through MORI-IO and
                commits them in that call
  umbp get-1st  batch_get_into_ptr of keys put but never read by this worker (each call another
                put batch): BatchRouteGet (with each value's place in the owner's arena), a
                MORI-IO read into the registered destination, each value's XXH3 checked
  umbp get      batch_get_into_ptr of the last put batch, again and again: within the read lease of
                its last resolve, one MORI-IO read straight from the owner and the XXH3 check (the
                location cache); after it, as get-1st
  raw-io write  / raw-io read: the same bytes between the same buffers and the same arena offsets,
                one engine.batch_write / batch_read + wait (the ceiling)
  master        BatchRouteGet of 128 keys (ops/s = keys/s; p50/p99 of one call)
Mooncake Store rows are left out (the two-process Mooncake setup is not wired here; the JSON
says so). The IO backend the two processes use is named in the JSON (one host: the same-host
path mori.io picks; between hosts it is tcp).
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
import uuid
from typing import Optional, Sequence

MIB = 1 << 20
DEFAULT_SIZES = "64K,360K,2M"
DEFAULT_BATCHES = "1,32"
COLUMNS = ["mode", "engine", "op", "value", "batch", "iters", "ops/s", "GiB/s", "p50 us", "p99 us", "x raw-io"]


def _distributed_config(umbp, master: str, node_id: str, dram: int, prefault: bool = False):
    cfg = umbp.UMBPConfig()
    cfg.dram.capacity_bytes = dram
    cfg.dram.prefault = prefault
    cfg.ssd.enabled = False
    d = umbp.UMBPDistributedConfig()
    d.master_config.master_address = master
    d.master_config.node_id = node_id
    d.master_config.node_address = "127.0.0.1"
    d.io_engine.host = "127.0.0.1"
    d.cache_remote_fetches = False
    d.staging_buffer_size = 8 * MIB
    cfg.distributed = d
    return cfg


def _owner_main(master: str, node_id: str, dram: int, ready, stop) -> None:
    import mori.umbp as umbp
    from mori.core.env import setting

    # The owner's arena is faulted in at start as a deployed store's is (UMBP_DRAM_PREFAULT, on by
    # default): else the first pulled puts into each page pay its fault (a 2 MiB put ~1.4 ms).
    client = umbp.UMBPClient(_distributed_config(umbp, master, node_id, dram, bool(setting("UMBP_DRAM_PREFAULT"))))
    ready.put(client.peer_address)
    stop.wait()
    client.close()


def _raw(engine, read: bool, local, remote, loffs, roffs, sizes) -> None:
    from mori.io import StatusCode
    fn = engine.batch_read if read else engine.batch_write
    st = fn([local], [loffs], [remote], [roffs], [sizes], [engine.allocate_transfer_uid()])[0]
    if st.WaitFor(60000) != StatusCode.SUCCESS:
        raise RuntimeError(f"raw MORI-IO {'read' if read else 'write'} failed: {st.Message()}")


def run(args, sizes: list[int], batches: list[int]) -> tuple[list[dict], dict]:
    import mori.umbp as umbp
    from mori.apps.bench.umbp import human
    from mori.apps.bench.umbp_workload import HostBuffers, Row, check_all, iterations, sglang_keys, summarize, verify
    from mori.umbp.distributed.master_server import MasterServer
    from mori.umbp.distributed.master_settings import MasterSettings
    from mori.umbp.proto import require

    peer_pb = require("umbp_peer_pb2")
    cells = [Row(s, b) for s in sizes for b in batches if s * b <= args.max_buffer]
    max_bytes = max(c.nbytes for c in cells)
    out: list[dict] = []
    meta: dict = {}
    master = MasterServer("127.0.0.1:0", settings=MasterSettings(eviction_interval_s=3600.0))
    master.start()
    address = f"127.0.0.1:{master.port}"
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Queue(), ctx.Event()
    owner_id = f"bench-owner-{uuid.uuid4().hex[:8]}"
    # Room for a row's puts four times over: the first reads (get-1st) must find every key they ask
    # for still in the owner's DRAM, also on a fast host that fits every iteration in the budget.
    owner_dram = max(8 * max_bytes, 1024 * MIB)
    owner = ctx.Process(target=_owner_main, args=(address, owner_id, owner_dram, ready, stop),
                        daemon=True)
    owner.start()
    client = None
    buf = None
    try:
        ready.get(timeout=args.timeout)
        client = umbp.UMBPClient(_distributed_config(umbp, address, f"bench-{uuid.uuid4().hex[:8]}", 1 * MIB))
        buf = HostBuffers(max_bytes)
        for ptr, n in buf.regions():
            client.register_memory(ptr, n)
        src_desc = client._region_of(buf.src_ptr, max_bytes)[0]
        dst_desc = client._region_of(buf.dst_ptr, max_bytes)[0]
        for row in cells:
            last: list[list[str]] = [[]]
            tag = f"D{row.size}x{row.batch}"
            counter = iter(range(1 << 30))

            every: list[list[str]] = []

            def put_call() -> None:
                keys = sglang_keys(row.batch, f"{tag}p{next(counter)}")
                check_all(client.batch_put_from_ptr(keys, row.src_ptrs(buf), row.sizes()), "distributed put")
                last[0] = keys
                every.append(keys)

            put = iterations(put_call, min(args.iters, max(3, (owner_dram // 4) // row.nbytes)), args.budget)
            keys = last[0]
            # The latest put batches, as many as a quarter of the owner's DRAM (it evicts down to 70 %).
            fresh = every[:-1][-max(2, (owner_dram // 4) // row.nbytes):]
            unread = iter(fresh)
            first = iterations(lambda: check_all(client.batch_get_into_ptr(next(unread), row.dst_ptrs(buf),
                                                                            row.sizes()), "distributed get"),
                               len(fresh) - 1, args.budget, min_iters=len(fresh) - 1)
            buf.dst[:row.nbytes] = 0
            get = iterations(lambda: check_all(client.batch_get_into_ptr(keys, row.dst_ptrs(buf), row.sizes()),
                                               "distributed get"), args.iters, args.budget)
            verify(buf, row, "distributed get")
            st = client.stats()
            if st["remote_puts"] == 0 or st["remote_gets"] == 0:
                raise RuntimeError("the bench worker's calls did not cross to the owner (routing kept them local)")
            peer = client._peers[owner_id]
            r = peer.stub.BatchResolveKeys(peer_pb.BatchResolveKeysRequest(keys=keys, omit_descs=True), timeout=10)
            roffs = [int(p) * r.page_size for p in r.page_index]
            loffs = [i * row.size for i in range(row.batch)]
            zs = row.sizes()
            meta["io_backend"] = client._engine.backend_for(dst_desc, peer.arena)
            raw_w = iterations(lambda: _raw(client._engine, False, src_desc, peer.arena, loffs, roffs, zs),
                               args.iters, args.budget)
            raw_r = iterations(lambda: _raw(client._engine, True, dst_desc, peer.arena, loffs, roffs, zs),
                               args.iters, args.budget)
            fig = {name: summarize(s, row.batch, row.nbytes)
                   for name, s in (("put", put), ("get-1st", first), ("get", get), ("raw_w", raw_w),
                                   ("raw_r", raw_r))}
            for engine, op, key, base in (("umbp", "put", "put", "raw_w"), ("umbp", "get-1st", "get-1st", "raw_r"),
                                          ("umbp", "get", "get", "raw_r"),
                                          ("raw-io", "write", "raw_w", None), ("raw-io", "read", "raw_r", None)):
                f = dict(fig[key])
                if base is not None and fig[base].get("GiB/s"):
                    f["x raw-io"] = round(f["GiB/s"] / fig[base]["GiB/s"], 3)
                out.append({"mode": "2 processes", "engine": engine, "op": op, "value": human(row.size),
                            "value_bytes": row.size, "batch": row.batch, **f})
            print(f"distributed {human(row.size)} x {row.batch}: done", flush=True)
        # Master lookups: BatchRouteGet of 128 keys the owner holds.
        keys = sglang_keys(128, "Dl")
        check_all(client.batch_put_from_ptr(keys, [buf.src_ptr] * 128, [4096] * 128), "distributed put")
        from mori.umbp.distributed.master_client import UMBPMasterClient
        mc = UMBPMasterClient(address, lookup_timeout_ms=5000)
        look = iterations(lambda: mc.batch_route_get(keys), max(args.iters, 200), args.budget)
        mc.close()
        out.append({"mode": "2 processes", "engine": "master", "op": "BatchRouteGet", "value": "-", "value_bytes": 0,
                    "batch": 128, **{**summarize(look, 128, 0), "GiB/s": None}})
        meta["store"] = "in-memory"
    finally:
        if client is not None:
            client.close()
        if buf is not None:
            buf.free()
        stop.set()
        owner.join(timeout=30)
        if owner.is_alive():
            owner.kill()
        master.stop(grace=0)
    return out, meta


def main(argv: Optional[Sequence[str]] = None) -> int:
    from mori.apps.bench.umbp import parse_count, parse_size, umbp_unavailable

    parser = argparse.ArgumentParser(prog="mori bench umbp --distributed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--distributed", action="store_true", help="this mode (the flag that selects it)")
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help=f"value sizes (default {DEFAULT_SIZES})")
    parser.add_argument("--batches", default=DEFAULT_BATCHES, help=f"keys per batch call (default {DEFAULT_BATCHES})")
    parser.add_argument("--iters", default="50", help="most timed calls per row (at least 3 are made)")
    parser.add_argument("--budget", type=float, default=0.5, help="rough seconds of timed calls per row")
    parser.add_argument("--max-buffer", default="128M", help="largest batch (value x batch); cells above it are left out")
    parser.add_argument("--timeout", type=float, default=120, help="seconds the owner process may take to start")
    parser.add_argument("--json", default=None, help="where to write the JSON (default bench-results/umbp-distributed.json)")
    args = parser.parse_args(argv)
    try:
        sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
        batches = [parse_count(b, "--batches") for b in args.batches.split(",") if b.strip()]
        args.iters = parse_count(args.iters, "--iters")
        args.max_buffer = parse_size(args.max_buffer, "--max-buffer")
    except ValueError as exc:
        parser.error(str(exc))
    if not sizes or not batches or min(sizes) * min(batches) > args.max_buffer:
        parser.error("--sizes and --batches need at least one cell within --max-buffer")
    why = umbp_unavailable()
    if why:
        print(f"mori bench umbp --distributed: {why}", file=sys.stderr)
        return 2
    from mori.apps.bench.report import Report

    t0 = time.monotonic()
    load_start = os.getloadavg()
    rows, meta = run(args, sizes, batches)
    cols = [c for c in COLUMNS if any(r.get(c) is not None for r in rows)]
    rep = Report("umbp-distributed", cols)
    rep.rows = rows
    rep.show(f"mori bench umbp --distributed (IO backend: {meta.get('io_backend', '?')})")
    rep.meta = {**meta, "sizes": args.sizes, "batches": batches, "iters": args.iters, "budget_s": args.budget,
                "seconds": round(time.monotonic() - t0, 1),
                "loadavg_1m": {"start": round(load_start[0], 2), "end": round(os.getloadavg()[0], 2)},
                "mooncake": "not run: the two-process Mooncake Store setup is not wired into this mode",
                "netns": "not run: this mode runs on one host (two processes)",
                "method": "one untimed warm-up call per row, then timed batch calls until --iters or --budget "
                          "(at least 3). ops/s = keys per second, GiB/s = bytes per second / 2^30 of the median "
                          "call; p50/p99 of one batch call. The raw-io rows move the same bytes between the same "
                          "registered buffers and the same offsets of the owner's arena with one "
                          "engine.batch_read/batch_write + wait: the ceiling of the data path."}
    print("wrote", rep.save(args.json or "bench-results/umbp-distributed.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
