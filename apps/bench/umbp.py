# SPDX-License-Identifier: MIT
"""``mori bench umbp``: MORI-UMBP's batch put and get of KV-cache-sized values, DRAM hits and
SSD hits, in one process and through the per-host server from 4 ranks, against the baselines
measured in the same run on the same bytes and the same destination buffers.

    mori bench umbp                                # everything, about two minutes on 2 cores
    mori bench umbp --modes local --no-mooncake    # one process, no peer baseline
    mori bench umbp --sizes 360K --batches 32 --iters 5 --json out.json
    mori bench umbp --distributed                  # the distributed pool: umbp_distributed.py

Rows (engine / op / tier):
  umbp put dram      batch_put_from_ptr of fresh keys, SSD tier off
  umbp get dram      batch_get_into_ptr of keys held in DRAM
  umbp put ssd       batch_put_from_ptr + flush() (the values are on the SSD tier when it returns)
  umbp get ssd       batch_get_into_ptr of keys held only on SSD: DRAM capacity below one value,
                     promote-on-read off, the page cache of the SSD tier's segment files dropped
                     with posix_fadvise(DONTNEED) before every timed call (the tier reads with
                     O_DIRECT where it can, else through the page cache: the read a cold key costs)
  memcpy     copy    numpy copies of the same values into the same destination buffer (the DRAM ceiling)
  raw read   get ssd os.preadv of the same values, one per value, from one file in the same
                     directory, its page cache dropped the same way (the SSD ceiling); each raw
                     read runs right before a get (alternated call by call; in server mode
                     every rank's at once, lined up by a barrier)
  mooncake   put/get Mooncake Store (mooncake_master on loopback, P2PHANDSHAKE, tcp, one client that
                     mounts the segment, register_buffer + batch_put_from / batch_get_into)
  umbp exists        batch_exists_consecutive of 128 keys (p50/p99 of one call)
In server mode the same UMBP rows run in 4 processes at once (one batch each per iteration, the
ranks lined up by a barrier), each a client of one per-host server (``mori umbp-server``) that maps
their memfd buffers; figures are aggregates (all ranks' bytes over the iteration's wall time) and
the memcpy row runs in the same 4 processes the same way.

ops/s counts keys and GiB/s is 2^30 bytes per second, both of the median batch call (the means
are in the JSON); p50/p99 are of one batch call. Every get and
copy is checked bit for bit once per row. Targets (issue 27): DRAM-hit batch get >= 0.8 x memcpy at
>= 1 MiB; SSD-hit get >= 0.8 x raw read; >= 2 x Mooncake Store's put and get at every value size;
batch_exists_consecutive of 128 keys <= 20 us.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
import traceback
from typing import Optional, Sequence

from mori.apps.bench.sizes import human_size, parse_count, parse_list, parse_size

MIB = 1 << 20
DEFAULT_SIZES = "64K,360K,2M,4.5M"
DEFAULT_BATCHES = "1,32,128"
SERVER_RANKS = 4
EXISTS_KEYS = 128
EXISTS_VALUE_MAX = 64 << 10
COLUMNS = [
    "mode",
    "engine",
    "op",
    "tier",
    "value",
    "batch",
    "iters",
    "ops/s",
    "GiB/s",
    "p50 us",
    "p99 us",
    "x memcpy",
    "x raw read",
    "x mooncake",
]
TARGETS = {
    "dram_get_vs_memcpy": ("DRAM-hit batch get >= 0.8 x memcpy at >= 1 MiB", 0.8),
    "ssd_get_vs_raw_read": ("SSD-hit get >= 0.8 x raw read", 0.8),
    "put_vs_mooncake": ("put >= 2 x Mooncake Store at every value size", 2.0),
    "get_vs_mooncake": ("get >= 2 x Mooncake Store at every value size", 2.0),
    "exists_consecutive_128_p50_us": ("batch_exists_consecutive of 128 keys <= 20 us (p50)", 20.0),
}


def umbp_unavailable() -> Optional[str]:
    try:
        import mori.umbp as umbp
    except Exception as exc:
        return f"mori.umbp does not import: {exc!r}"
    missing = [
        n for n in ("UMBPClient", "UMBPConfig", "UMBPHostMemAllocator", "UMBPHostBufferBacking") if not hasattr(umbp, n)
    ]
    return f"mori.umbp lacks {', '.join(missing)} in this build" if missing else None


def fs_type(path: str) -> str:
    """The file system type of the mount holding ``path`` (from /proc/mounts)."""
    best, kind = "", "unknown"
    real = os.path.realpath(path)
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if (
                    len(parts) >= 3
                    and (real == parts[1] or real.startswith(parts[1].rstrip("/") + "/"))
                    and len(parts[1]) >= len(best)
                ):
                    best, kind = parts[1], parts[2]
    except OSError:
        pass
    return kind


# --------------------------------------------------------------------------------------------
# UMBP configuration of each tier


def dram_config(umbp, dram_bytes: int):
    """DRAM only: every get is a DRAM hit."""
    cfg = umbp.UMBPConfig()
    cfg.role = umbp.UMBPRole.Standalone
    cfg.dram.capacity_bytes = dram_bytes
    cfg.ssd.enabled = False
    return cfg


def ssd_config(umbp, storage_dir: str, ssd_bytes: int, smallest_value: int):
    """DRAM below one value (so values live only on SSD) and no promotion on read: every get
    reads the SSD tier."""
    cfg = umbp.UMBPConfig()
    cfg.role = umbp.UMBPRole.Standalone
    cfg.dram.capacity_bytes = max(4096, smallest_value // 2)
    cfg.ssd.enabled = True
    cfg.ssd.storage_dir = storage_dir
    cfg.ssd.capacity_bytes = ssd_bytes
    cfg.eviction.auto_promote_on_read = False
    return cfg


def describe_config(cfg) -> dict:
    return {
        "dram.capacity_bytes": cfg.dram.capacity_bytes,
        "ssd.enabled": cfg.ssd.enabled,
        "ssd.capacity_bytes": cfg.ssd.capacity_bytes,
        "ssd.segment_size_bytes": cfg.ssd.segment_size_bytes,
        "ssd.io.backend": str(cfg.ssd.io.backend),
        "ssd.durability.mode": str(cfg.ssd.durability.mode),
        "copy_pipeline.async_enabled": cfg.copy_pipeline.async_enabled,
        "copy_pipeline.worker_threads": cfg.copy_pipeline.worker_threads,
        "eviction.auto_promote_on_read": cfg.eviction.auto_promote_on_read,
    }


# --------------------------------------------------------------------------------------------
# Local mode: everything in this process


def row_record(mode: str, engine: str, op: str, tier: str, size: int, batch: int, fig: dict) -> dict:
    return {
        "mode": mode,
        "engine": engine,
        "op": op,
        "tier": tier,
        "value": human_size(size),
        "value_bytes": size,
        "batch": batch,
        **fig,
    }


def run_local_dram(args, rows: list, out: list, status: dict, buf, mooncake) -> None:
    """DRAM-tier rows of local mode (UMBP put/get, memcpy, Mooncake put/get) and the
    batch_exists_consecutive row."""
    import mori.umbp as umbp
    from mori.apps.bench.umbp_workload import UmbpOps, check_all, memcpy_samples, sglang_keys, summarize

    max_bytes = max(r.nbytes for r in rows)
    # DRAM tier: room for two of the largest batch (puts of fresh keys evict the older ones).
    dcfg = dram_config(umbp, dram_bytes=max(5 * max_bytes // 2, 64 * MIB))
    status.setdefault("local", {})["dram_config"] = describe_config(dcfg)
    client = umbp.UMBPClient(dcfg)
    ops = UmbpOps(client, buf, "L")
    for row in rows:
        put = ops.put(row, args.iters, args.budget)
        out.append(
            row_record("local", "umbp", "put", "dram", row.size, row.batch, summarize(put, row.batch, row.nbytes))
        )
        get = ops.get(row, args.iters, args.budget)
        out.append(
            row_record(
                "local",
                "umbp",
                "get",
                "dram",
                row.size,
                row.batch,
                {**summarize(get, row.batch, row.nbytes), "hits": ops.last_hits},
            )
        )
        cp = memcpy_samples(buf, row, args.iters, args.budget)
        out.append(
            row_record("local", "memcpy", "copy", "dram", row.size, row.batch, summarize(cp, row.batch, row.nbytes))
        )
        if mooncake is not None:
            try:
                mput, keys = mooncake.put(buf, row, args.iters, args.budget)
                mget = mooncake.get(buf, row, keys, args.iters, args.budget)
                out.append(
                    row_record(
                        "local", "mooncake", "put", "dram", row.size, row.batch, summarize(mput, row.batch, row.nbytes)
                    )
                )
                out.append(
                    row_record(
                        "local", "mooncake", "get", "dram", row.size, row.batch, summarize(mget, row.batch, row.nbytes)
                    )
                )
            except Exception as exc:
                status["mooncake"] = {"status": "failed", "reason": f"{exc!r}"}
                mooncake.close()
                mooncake = None  # the rest of the rows go without it
        print(f"local dram {human_size(row.size)} x {row.batch}: done", flush=True)

    # batch_exists_consecutive over 128 keys that are all there (the full scan); the values all
    # come from the first value of the source buffer. Its time does not depend on the values'
    # size: at most 64 KiB each, so the 128 fit the tier whatever sizes the rows ran.
    small = min(min(r.size for r in rows), EXISTS_VALUE_MAX)
    keys = sglang_keys(EXISTS_KEYS, "Le")
    ptrs, sizes = [buf.src_ptr] * EXISTS_KEYS, [small] * EXISTS_KEYS
    check_all(client.batch_put_from_ptr(keys, ptrs, sizes), "UMBP batch_put_from_ptr")
    ex = ops.exists_consecutive(keys, args.exists_iters)
    out.append(
        row_record(
            "local",
            "umbp",
            "exists_consecutive",
            "dram",
            small,
            EXISTS_KEYS,
            {**summarize(ex, EXISTS_KEYS, 0), "GiB/s": None},
        )
    )
    if mooncake is not None:
        rcs = mooncake.store.batch_put_from(keys, ptrs, sizes)
        if all(rc == 0 for rc in rcs):
            mex = mooncake.exists(keys, args.exists_iters)
            out.append(
                row_record(
                    "local",
                    "mooncake",
                    "exists",
                    "dram",
                    small,
                    EXISTS_KEYS,
                    {**summarize(mex, EXISTS_KEYS, 0), "GiB/s": None},
                )
            )
    client.clear()
    client.close()


def run_local(args, rows_by_tier: dict, out: list, status: dict, workdir: str) -> None:
    import mori.umbp as umbp
    from mori.apps.bench.umbp_workload import (
        HostBuffers,
        RawFile,
        UmbpOps,
        summarize,
    )

    max_bytes = max(r.nbytes for rows in rows_by_tier.values() for r in rows)
    allocator = umbp.UMBPHostMemAllocator()
    buf = HostBuffers(max_bytes, allocator, umbp.UMBPHostBufferBacking.Anonymous)
    mooncake = None
    try:
        if args.mooncake:
            from mori.apps.bench.umbp_mooncake import MooncakeStore, unavailable

            why = unavailable()
            if why:
                status["mooncake"] = {"status": "skipped", "reason": why}
            else:
                try:
                    mooncake = MooncakeStore(segment_bytes=2 * max_bytes + 64 * MIB, workdir=workdir)
                    mooncake.register(buf)
                    status["mooncake"] = {
                        "status": "ok",
                        "describe": "Mooncake Store, mooncake_master on loopback, "
                        "P2PHANDSHAKE, tcp, zero-copy register_buffer + batch_put_from/batch_get_into",
                    }
                except Exception as exc:
                    status["mooncake"] = {"status": "failed", "reason": f"{exc!r}"}
                    mooncake = None
        else:
            status["mooncake"] = {"status": "skipped", "reason": "--no-mooncake"}

        if rows_by_tier.get("dram"):
            run_local_dram(args, rows_by_tier["dram"], out, status, buf, mooncake)
        rows = rows_by_tier.get("ssd")
        if rows:
            max_bytes = max(r.nbytes for r in rows)
            ssd_root = tempfile.mkdtemp(prefix="mori-bench-umbp-", dir=args.ssd_dir)
            try:
                tier_dir = os.path.join(ssd_root, "local")
                scfg = ssd_config(
                    umbp, tier_dir, ssd_bytes=max(8 * max_bytes, 4 << 30), smallest_value=min(r.size for r in rows)
                )
                status.setdefault("local", {})["ssd_config"] = describe_config(scfg)
                status["local"]["ssd_dir_fs"] = fs_type(ssd_root)
                client = umbp.UMBPClient(scfg)
                ops = UmbpOps(client, buf, "S")
                for row in rows:
                    put = ops.put(row, args.iters, args.budget, after=client.flush)
                    out.append(
                        row_record(
                            "local", "umbp", "put", "ssd", row.size, row.batch, summarize(put, row.batch, row.nbytes)
                        )
                    )
                    # The raw read of the same bytes runs right before each get, untimed for the
                    # get: a disk whose speed drifts (a virtio disk's moved 2x within minutes) moves
                    # both figures of a row alike, and the ratio compares calls minutes apart no more.
                    raw = RawFile(ssd_root, buf, row)
                    rs: list = []
                    before, raw_close = raw.before_each_get(tier_dir, rs)
                    try:
                        get = ops.get(row, args.iters, args.budget, before=before)
                    finally:
                        raw_close()
                        raw.remove()
                    hits = ops.last_hits
                    if hits is not None and (hits["dram_hits"] or hits["ssd_hits"] != row.batch * (len(get) + 1)):
                        raise RuntimeError(
                            f"SSD-hit row {human_size(row.size)} x {row.batch}: the store counted "
                            f"{hits} for {len(get) + 1} batch gets: not every value came from the SSD"
                        )
                    out.append(
                        row_record(
                            "local",
                            "umbp",
                            "get",
                            "ssd",
                            row.size,
                            row.batch,
                            {**summarize(get, row.batch, row.nbytes), "hits": hits},
                        )
                    )
                    out.append(
                        row_record(
                            "local",
                            "raw read",
                            "get",
                            "ssd",
                            row.size,
                            row.batch,
                            {**summarize(rs, row.batch, row.nbytes), "io": raw.how},
                        )
                    )
                    client.clear()
                    print(f"local ssd {human_size(row.size)} x {row.batch}: done", flush=True)
                client.close()
            finally:
                shutil.rmtree(ssd_root, ignore_errors=True)
    finally:
        if mooncake is not None:
            mooncake.close()
        buf.free()


# --------------------------------------------------------------------------------------------
# Server mode: 4 processes, one per-host server


def server_iters(args, nbytes: int) -> int:
    """The iteration count every rank runs for a row (they must agree): about ``budget`` seconds
    at 1 GiB/s of aggregate traffic, at least 3."""
    return max(3, min(args.iters, int(args.budget * (1 << 30) / max(1, nbytes * SERVER_RANKS))))


def rank_main(rank: int, plan: dict, barrier, results) -> None:
    """One rank of the server run (a spawned process): every row's put, get and memcpy in lock
    step with the other ranks; its samples go to ``results``."""
    try:
        import mori.umbp as umbp
        from mori.apps.bench.umbp_workload import HostBuffers, Row, UmbpOps, memcpy_samples

        timeout = plan["timeout"]

        def sync() -> None:
            barrier.wait(timeout)

        buf = HostBuffers(plan["max_bytes"], umbp.UMBPHostMemAllocator(), umbp.UMBPHostBufferBacking.AnonymousShm)
        cfg = umbp.UMBPConfig()
        sp = umbp.UMBPStandaloneProcessConfig()
        sp.address = plan["address"]
        sp.startup_timeout_ms = int(timeout * 1000)
        cfg.standalone_process = sp
        client = umbp.UMBPClient(cfg)
        for ptr, size in buf.regions():
            if not client.register_memory(ptr, size):
                raise RuntimeError("register_memory returned False")
        ops = UmbpOps(client, buf, f"R{rank}")
        out = []
        for size, batch, iters in plan["rows"]:
            row = Row(size, batch)
            put = ops.put(row, iters, 0, sync=sync, fixed=True, after=client.flush if plan["tier"] == "ssd" else None)
            cp: list = []
            raw: list = []
            if plan["tier"] == "dram":
                get = ops.get(row, iters, 0, sync=sync, fixed=True)
                cp = memcpy_samples(buf, row, iters, 0, sync=sync, fixed=True)
            else:
                # Each rank reads the same bytes from its own file, all ranks at once (lined up
                # by a barrier of their own), right before each get, as in one process: a disk
                # whose speed drifts, or a hypervisor's cache that holds the file written last,
                # moves both figures of the row alike.
                from mori.apps.bench.umbp_workload import RawFile

                raw_file = RawFile(plan["raw_dir"], buf, row, name=f"rank{rank}")
                before, raw_close = raw_file.before_each_get(plan["ssd_dir"], raw, sync=sync)
                try:
                    get = ops.get(row, iters, 0, sync=sync, fixed=True, before=before)
                finally:
                    raw_close()
                    raw_file.remove()
            out.append({"size": size, "batch": batch, "put": put, "get": get, "memcpy": cp, "raw": raw})
        sync()
        if rank == 0:
            client.clear()
        for ptr, _ in buf.regions():
            client.deregister_memory(ptr)
        client.close()
        buf.free()
        results.put((rank, out, None))
    except BaseException as exc:  # reported by the parent, which stops the others
        try:
            barrier.abort()
        finally:
            results.put((rank, None, f"{exc!r}\n{traceback.format_exc()}"))


def start_server(address: str, options: list[str], workdir: str, name: str, timeout: float):
    """``mori umbp-server --address ADDRESS OPTIONS...``; returns the process once its socket exists
    (it gets SIGKILL if the benchmark dies first)."""
    import subprocess

    from mori.apps.launcher import _die_with_launcher

    log_path = os.path.join(workdir, f"{name}.log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mori.apps.cli", "umbp-server", "--address", address, *options],
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_launcher(),
        )
    path = address[len("unix://") :] if address.startswith("unix://") else address
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if proc.poll() is not None:
            with open(log_path, errors="replace") as f:
                tail = "".join(f.readlines()[-15:])
            raise RuntimeError(f"mori umbp-server exited with code {proc.returncode}:\n{tail}")
        if time.monotonic() > deadline:
            from mori.apps.bench.processes import stop

            stop([proc])
            raise RuntimeError(f"mori umbp-server did not open {path} within {timeout:.0f} s")
        time.sleep(0.05)
    return proc, log_path


def run_server_tier(args, rows: list, tier: str, out: list, status: dict, workdir: str) -> None:
    from mori.apps.bench.processes import stop
    from mori.apps.bench.umbp_workload import summarize_ranks

    max_bytes = max(r.nbytes for r in rows)
    sock = os.path.join(workdir, f"umbp-{tier}.sock")
    address = f"unix://{sock}"
    ssd_root = None
    total = SERVER_RANKS * max_bytes
    if tier == "dram":
        options = ["--dram-capacity", str(max(5 * total // 2, 64 * MIB)), "--no-ssd"]
    else:
        ssd_root = tempfile.mkdtemp(prefix="mori-bench-umbp-server-", dir=args.ssd_dir)
        options = [
            "--dram-capacity",
            str(max(4096, min(r.size for r in rows) // 2)),
            "--ssd-dir",
            ssd_root,
            "--ssd-capacity",
            str(max(8 * total, 4 << 30)),
        ]
    status.setdefault("server", {})[f"{tier}_options"] = [o if o != ssd_root else "<ssd-dir>" for o in options]
    server, log_path = start_server(address, options, workdir, f"umbp-server-{tier}", args.timeout)
    raw_dir = tempfile.mkdtemp(prefix="mori-bench-umbp-raw-", dir=args.ssd_dir) if tier == "ssd" else None
    plan = {
        "address": address,
        "max_bytes": max_bytes,
        "timeout": args.timeout,
        "tier": tier,
        "ssd_dir": ssd_root,
        "raw_dir": raw_dir,
        "rows": [(r.size, r.batch, server_iters(args, r.nbytes)) for r in rows],
    }
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(SERVER_RANKS)
    results = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, plan, barrier, results), daemon=True) for r in range(SERVER_RANKS)]
    try:
        for p in procs:
            p.start()
        got: dict = {}
        deadline = time.monotonic() + args.timeout * 4
        while len(got) < SERVER_RANKS:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(
                    f"server mode ({tier}): ranks {sorted(set(range(SERVER_RANKS)) - set(got))} "
                    f"did not finish within {args.timeout * 4:.0f} s"
                )
            try:
                rank, res, err = results.get(timeout=min(left, 5))
            except Exception:
                dead = [i for i, p in enumerate(procs) if p.exitcode not in (None, 0) and i not in got]
                if dead:
                    raise RuntimeError(
                        f"server mode ({tier}): rank {dead[0]} died (exit code {procs[dead[0]].exitcode})"
                    )
                continue
            if err:
                raise RuntimeError(f"server mode ({tier}): rank {rank} failed: {err}")
            got[rank] = res
        for p in procs:
            p.join(timeout=30)
        for i, (size, batch, _) in enumerate(plan["rows"]):
            nbytes = size * batch
            for key, engine, op in (
                ("put", "umbp", "put"),
                ("get", "umbp", "get"),
                ("memcpy", "memcpy", "copy"),
                ("raw", "raw read", "get"),
            ):
                per_rank = [got[r][i][key] for r in range(SERVER_RANKS)]
                if not per_rank[0]:
                    continue
                out.append(
                    row_record(
                        f"server x{SERVER_RANKS}",
                        engine,
                        op,
                        tier,
                        size,
                        batch,
                        summarize_ranks(per_rank, batch, nbytes),
                    )
                )
        status["server"][tier] = "ok"
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
        stop([server])
        for d in (ssd_root, raw_dir):
            if d:
                shutil.rmtree(d, ignore_errors=True)


def server_unavailable() -> Optional[str]:
    import importlib.util

    import mori.umbp as umbp

    if not hasattr(umbp, "UMBPStandaloneProcessConfig"):
        return "mori.umbp lacks UMBPStandaloneProcessConfig in this build"
    if importlib.util.find_spec("mori.umbp.server") is None:
        return "this build has no per-host server (mori.umbp.server, mori umbp-server)"
    return None


# --------------------------------------------------------------------------------------------
# Ratios and targets


def server_settings() -> dict:
    """The per-host server path's settings this run had (the ranks' and the server's, one
    environment): which way a server row's bytes went."""
    from mori import _C

    return {r["name"]: r["value"] for r in _C.core.env_table() if r["name"].startswith("UMBP_SERVER_")}


def add_ratios(rows: list[dict]) -> None:
    """``x memcpy``, ``x raw read``, ``x mooncake``: a row's GiB/s over its baseline's at the same
    mode, value size and batch (put vs Mooncake's put, get vs Mooncake's get)."""
    index = {(r["mode"], r["engine"], r["op"], r["tier"], r["value_bytes"], r["batch"]): r for r in rows}

    def ratio(r: dict, engine: str, op: str, tier: str) -> Optional[float]:
        ref = index.get((r["mode"], engine, op, tier, r["value_bytes"], r["batch"]))
        if ref is None or not ref.get("GiB/s") or not r.get("GiB/s") or ref is r:
            return None
        return r["GiB/s"] / ref["GiB/s"]

    for r in rows:
        r["x memcpy"] = r["x raw read"] = r["x mooncake"] = None
        if r["op"] not in ("put", "get"):
            continue
        if r["tier"] == "dram":
            r["x memcpy"] = ratio(r, "memcpy", "copy", "dram")
            if r["engine"] == "umbp":
                r["x mooncake"] = ratio(r, "mooncake", r["op"], "dram")
        elif r["engine"] == "umbp" and r["op"] == "get":
            r["x raw read"] = ratio(r, "raw read", "get", "ssd")


def check_targets(rows: list[dict]) -> dict:
    """Each target: its bound, the worst ratio (or latency) over the rows it covers, and met /
    missed / not measured."""

    def pick(**want) -> list[dict]:
        return [r for r in rows if all(r.get(k) == v for k, v in want.items())]

    def verdict(key: str, sel: list[dict], col: str, higher_is_better: bool = True) -> dict:
        label, bound = TARGETS[key]
        vals = [(r[col], r) for r in sel if r.get(col) is not None]
        if not vals:
            return {"target": label, "bound": bound, "worst": None, "status": "not measured", "rows": 0}
        worst, wr = min(vals, key=lambda v: v[0]) if higher_is_better else max(vals, key=lambda v: v[0])
        ok = worst >= bound if higher_is_better else worst <= bound
        return {
            "target": label,
            "bound": bound,
            "worst": worst,
            "status": "met" if ok else "missed",
            "rows": len(vals),
            "worst_at": {k: wr[k] for k in ("mode", "value", "batch")},
        }

    umbp_get_dram = [
        r for r in pick(engine="umbp", op="get", tier="dram") if r["value_bytes"] >= MIB and r["batch"] > 1
    ]
    return {
        "dram_get_vs_memcpy": verdict("dram_get_vs_memcpy", umbp_get_dram, "x memcpy"),
        "ssd_get_vs_raw_read": verdict("ssd_get_vs_raw_read", pick(engine="umbp", op="get", tier="ssd"), "x raw read"),
        "put_vs_mooncake": verdict("put_vs_mooncake", pick(engine="umbp", op="put", tier="dram"), "x mooncake"),
        "get_vs_mooncake": verdict("get_vs_mooncake", pick(engine="umbp", op="get", tier="dram"), "x mooncake"),
        "exists_consecutive_128_p50_us": verdict(
            "exists_consecutive_128_p50_us",
            pick(engine="umbp", op="exists_consecutive", batch=EXISTS_KEYS),
            "p50 us",
            higher_is_better=False,
        ),
    }


# --------------------------------------------------------------------------------------------


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="mori bench umbp", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help=f"value sizes (default {DEFAULT_SIZES})")
    parser.add_argument("--batches", default=DEFAULT_BATCHES, help=f"keys per batch call (default {DEFAULT_BATCHES})")
    parser.add_argument("--iters", default="100", help="most timed calls per row (at least 3 are made)")
    parser.add_argument("--budget", type=float, default=0.25, help="rough seconds of timed calls per row")
    parser.add_argument("--exists-iters", default="2000", help="timed batch_exists_consecutive calls")
    parser.add_argument(
        "--modes", default="local,server", help="local (one process), server (4 ranks, one per-host server)"
    )
    parser.add_argument("--tiers", default="dram,ssd", help="dram (DRAM hits), ssd (SSD hits)")
    parser.add_argument("--no-mooncake", dest="mooncake", action="store_false", help="no Mooncake Store rows")
    parser.add_argument(
        "--ssd-dir",
        default=None,
        help="where the SSD tier and the raw-read file go (default: the "
        "system temporary directory; it should be on the SSD)",
    )
    parser.add_argument(
        "--max-buffer",
        default="640M",
        help="largest batch (value x batch) per mode; in server mode split over the 4 ranks; "
        "cells above it are left out",
    )
    parser.add_argument(
        "--max-ssd-buffer",
        default="160M",
        help="the same bound for the SSD-hit rows (SSD writes and reads are the slow part of a run)",
    )
    parser.add_argument("--timeout", type=float, default=120, help="seconds a server or rank may take to answer")
    parser.add_argument("--json", default=None, help="where to write the JSON (default bench-results/umbp.json)")
    args = parser.parse_args(argv)
    try:
        sizes = parse_list(args.sizes, "--sizes")
        batches = parse_list(args.batches, "--batches", parse_count)
        args.iters = parse_count(args.iters, "--iters")
        args.exists_iters = parse_count(args.exists_iters, "--exists-iters")
        max_buffer = parse_size(args.max_buffer, "--max-buffer")
        max_ssd_buffer = parse_size(args.max_ssd_buffer, "--max-ssd-buffer")
    except ValueError as exc:
        parser.error(str(exc))
    if not sizes or not batches:
        parser.error("--sizes and --batches need at least one value each")
    modes = [m for m in args.modes.split(",") if m]
    if not modes or set(modes) - {"local", "server"}:
        parser.error(f"--modes: {args.modes!r}: choose from local, server")
    args.tiers = [t for t in args.tiers.split(",") if t]
    if not args.tiers or set(args.tiers) - {"dram", "ssd"}:
        parser.error(f"--tiers: {','.join(args.tiers)!r}: choose from dram, ssd")
    if args.budget <= 0 or args.timeout <= 0:
        parser.error("--budget and --timeout must be positive")
    if args.ssd_dir is not None and not os.path.isdir(args.ssd_dir):
        parser.error(f"--ssd-dir: {args.ssd_dir!r} is not a directory")
    why = umbp_unavailable()
    if why:
        print(f"mori bench umbp: {why}", file=sys.stderr)
        return 2

    from mori.apps.bench.report import Report
    from mori.apps.bench.umbp_workload import Row

    cells = [Row(s, b) for s in sizes for b in batches]
    cap = {"dram": max_buffer, "ssd": min(max_buffer, max_ssd_buffer)}
    local_rows = {t: [c for c in cells if c.nbytes <= cap[t]] for t in args.tiers}
    server_rows = {t: [c for c in cells if c.nbytes * SERVER_RANKS <= cap[t]] for t in args.tiers}
    status: dict = {
        "left_out": {
            f"{mode} {t}": [f"{human_size(c.size)} x {c.batch}" for c in cells if c not in rows[t]]
            for mode, rows in (("local", local_rows), (f"server x{SERVER_RANKS}", server_rows))
            for t in args.tiers
        }
    }
    out: list[dict] = []
    failed = False
    t0 = time.monotonic()
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="mori-bench-umbp-") as workdir:
        if "local" in modes and any(local_rows.values()):
            try:
                run_local(args, local_rows, out, status, workdir)
                status.setdefault("local", {})["status"] = "ok"
            except Exception as exc:
                failed = True
                status.setdefault("local", {})["status"] = f"failed: {exc!r}"
                print(f"local mode: FAILED: {exc!r}\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        if "server" in modes and any(server_rows.values()):
            why = server_unavailable()
            if why:
                status["server"] = {"status": "skipped", "reason": why}
                print(f"server mode: skipped ({why})", flush=True)
            else:
                server_failed = False
                for tier in args.tiers:
                    if not server_rows[tier]:
                        continue
                    try:
                        run_server_tier(args, server_rows[tier], tier, out, status, workdir)
                        print(f"server {tier}: done", flush=True)
                    except Exception as exc:
                        failed = server_failed = True
                        status.setdefault("server", {})[tier] = f"failed: {exc!r}"
                        print(f"server mode ({tier}): FAILED: {exc!r}", file=sys.stderr, flush=True)
                status.setdefault("server", {})["status"] = "failed" if server_failed else "ok"
    add_ratios(out)
    targets = check_targets(out)
    cols = [c for c in COLUMNS if any(r.get(c) is not None for r in out)]
    mc = status.get("mooncake")
    mc_note = f"; Mooncake Store {mc['status']}: {mc['reason']}" if mc and mc["status"] != "ok" else ""
    for mode in dict.fromkeys(r["mode"] for r in out):
        rep = Report("umbp", cols)
        rep.rows = [r for r in out if r["mode"] == mode]
        rep.show(f"mori bench umbp: {mode}" + (mc_note if mode == "local" else ""))
    for t in targets.values():
        worst = "-" if t["worst"] is None else f"{t['worst']:.3g}"
        print(f"target {t['target']}: {t['status']} (worst {worst} over {t['rows']} rows)")
    if mc_note:
        print(f"mooncake: {mc['status']}: {mc['reason']}")
    report = Report("umbp", cols)
    report.rows = out
    report.meta = {
        "targets": targets,
        "engines": status,
        "sizes": [human_size(s) for s in sizes],
        "batches": batches,
        "iters": args.iters,
        "budget_s": args.budget,
        "modes": modes,
        "tiers": args.tiers,
        "server_ranks": SERVER_RANKS,
        "server_settings": server_settings(),
        "seconds": round(time.monotonic() - t0, 1),
        "loadavg_1m": {"start": round(load_start[0], 2), "end": round(os.getloadavg()[0], 2)},
        "method": "per row: one untimed warm-up call, then timed batch calls until --iters or --budget "
        "(at least 3; server mode: a fixed count all ranks share, each call after a barrier). "
        "ops/s = keys per second, GiB/s = bytes per second / 2^30, both of the median call "
        "(server: of the median iteration, all ranks' keys and bytes over first start to last "
        "end); 'mean ...' the same over the mean; p50/p99 of one batch call. "
        "SSD hits: DRAM capacity below one value, promote-on-read off, page cache of the "
        "tier's files dropped (posix_fadvise DONTNEED) before each timed call; the raw read "
        "drops its file's cache the same way and runs right before each get (alternated call by "
        "call, so a drift of the disk moves both; server mode: all ranks' raw reads at once after a barrier). Ratios are GiB/s over the baseline's at the "
        "same mode, size and batch.",
    }
    print("wrote", report.save(args.json or "bench-results/umbp.json"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
