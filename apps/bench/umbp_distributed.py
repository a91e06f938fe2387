# SPDX-License-Identifier: MIT
"""``mori bench umbp --distributed``: the distributed pool, its owner and its client in two
processes: a master (in-memory store), an owner worker (its own process: the pool's DRAM) and the
benchmark's worker, whose DRAM is too small to be routed to, so its puts and gets cross to the
owner through MORI-IO. Mooncake Store runs the same calls the same way: a ``mooncake_master``, an
owner ``MooncakeDistributedStore`` process that mounts the segment, and a client store in the
benchmark's worker that mounts none (metadata P2PHANDSHAKE, protocol tcp, registered buffers).

    mori bench umbp --distributed                           # ~1 minute on 2 cores
    mori bench umbp --distributed --hosts netns             # two network namespaces joined by veth (root)
    mori bench umbp --distributed --sizes 2M --batches 32 --json out.json

``--hosts netns``: the masters and owners in one namespace, the benchmark's worker in another
(each with its own MORI_NODE_ID), so every value crosses the veth link over tcp as between hosts.
Each process runs on the grpc polling engine docs/umbp-distributed.md recommends: the worker on
``poll`` (``--worker-grpc-poll``), the pool's processes on grpc's default; a GRPC_POLL_STRATEGY
of the caller's is not passed on. (Without --hosts netns the pool runs in the benchmark's own
process, on whatever engine that process has.)

Rows (engine / op):
  umbp put      batch_put_from_ptr of fresh keys: BatchRoutePut, then BatchAllocateSlots on the
                owner, which reads the values from the registered source through MORI-IO and
                commits them in that call
  umbp get-1st  batch_get_into_ptr of keys put but never read by this worker (each call another
                put batch): a MORI-IO read into the registered destination at each value's place
                in the owner's arena, each value's XXH3 checked; the place comes from the master's
                place feed (UMBP_PLACE_FEED_MS, on by default: no master call) or, where the feed
                has not brought it (or is off: UMBP_PLACE_FEED_MS=0), from a BatchRouteGet first
  umbp exists+get  SGLang's load of keys never read by this worker (every other unread batch, where a
                row has four or more): batch_exists_consecutive, then batch_get_into_ptr, timed
                together; fed places answer the exists call, else its route gives them, so the
                get is one MORI-IO read (no second round trip)
  umbp get      batch_get_into_ptr of the last put batch, again and again: within the read lease of
                its last resolve, one MORI-IO read straight from the owner and the XXH3 check (the
                location cache); after it, as get-1st
  mooncake put / get-1st / exists+get / get: the same calls of Mooncake Store (batch_put_from,
                batch_is_exist, batch_get_into)
                on the same registered buffers; ``x mooncake`` on UMBP's rows is UMBP / Mooncake
  raw-io write  / raw-io read: the same bytes from the same source buffer (reads: into a third
                registered buffer) to and from the arena offsets of the row's first put, one
                engine.batch_write / batch_read + wait (the ceiling), one timed ahead of every
                timed UMBP call: each UMBP row's x raw-io is against the raw transfers timed
                beside its own calls (write for put, read for the gets), so a load that moves
                during a run moves both sides of the ratio
  master        BatchRouteGet of 128 keys (ops/s = keys/s; p50/p99 of one call)
The IO backend the two processes use is named in the JSON (one host: the same-host path mori.io
picks; between namespaces it is tcp).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import signal
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

MIB = 1 << 20
DEFAULT_SIZES = "64K,360K,2M"
DEFAULT_BATCHES = "1,32"
COLUMNS = [
    "mode",
    "engine",
    "op",
    "value",
    "batch",
    "iters",
    "ops/s",
    "GiB/s",
    "p50 us",
    "p99 us",
    "x raw-io",
    "x mooncake",
]
NETNS_SUBNET = "10.206.0"


def _distributed_config(umbp, master: str, node_id: str, dram: int, ip: str, prefault: bool = False):
    cfg = umbp.UMBPConfig()
    cfg.dram.capacity_bytes = dram
    cfg.dram.prefault = prefault
    cfg.ssd.enabled = False
    d = umbp.UMBPDistributedConfig()
    d.master_config.master_address = master
    d.master_config.node_id = node_id
    d.master_config.node_address = ip
    d.io_engine.host = ip
    d.cache_remote_fetches = False
    d.staging_buffer_size = 8 * MIB
    cfg.distributed = d
    return cfg


def _owner_main(master: str, node_id: str, dram: int, ip: str, ready, stop) -> None:
    """UMBP's owner process: says on ``ready`` that it serves (``None``) or why not, then serves
    until ``stop`` is set."""
    import mori.umbp as umbp
    from mori.apps.bench.processes import hold_until
    from mori.core.env import setting

    # The owner's arena is faulted in at start as a deployed store's is (UMBP_DRAM_PREFAULT, on by
    # default): else the first pulled puts into each page pay its fault (a 2 MiB put ~1.4 ms).
    prefault = bool(setting("UMBP_DRAM_PREFAULT"))
    try:
        client = umbp.UMBPClient(_distributed_config(umbp, master, node_id, dram, ip, prefault))
    except Exception as exc:  # noqa: BLE001 - the reason goes back to the benchmark
        ready.put(repr(exc))
        return
    ready.put(None)
    hold_until(stop)
    client.close()


def owner_capacity(max_bytes: int) -> int:
    """Room for a row's puts four times over: the first reads (get-1st) must find every key they
    ask for still in the owner's memory, also on a fast host that fits every iteration in the budget."""
    return max(8 * max_bytes, 1024 * MIB)


@dataclass
class Pool:
    """The serving side: UMBP's master and owner, and (when it runs) Mooncake's master and owner,
    all reachable at ``ip``. ``info`` is what the benchmark's worker needs to reach them."""

    ip: str
    capacity: int
    mooncake: bool
    timeout_s: float
    info: dict = field(default_factory=dict)
    _stops: list[Callable[[], None]] = field(default_factory=list)

    def start(self, workdir: str) -> "Pool":
        from mori.umbp.distributed.master_server import MasterServer
        from mori.umbp.distributed.master_settings import MasterSettings

        try:
            master = MasterServer(f"{self.ip}:0", settings=MasterSettings(eviction_interval_s=3600.0))
            master.start()
            self._stops.append(lambda: master.stop(grace=0))
            address = f"{self.ip}:{master.port}"
            owner_id = f"bench-owner-{uuid.uuid4().hex[:8]}"
            err = self._spawn(_owner_main, (address, owner_id, self.capacity, self.ip), "the UMBP owner")
            if err is not None:
                raise RuntimeError(err)
            self.info.update(umbp_master=address, owner_id=owner_id)
            self.info["mooncake"] = (
                self._start_mooncake(workdir) if self.mooncake else {"status": "skipped", "reason": "--no-mooncake"}
            )
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, target, args: tuple, what: str):
        ctx = mp.get_context("spawn")
        ready, stop = ctx.Queue(), ctx.Event()
        proc = ctx.Process(target=target, args=(*args, ready, stop), daemon=True)
        proc.start()

        def end() -> None:
            stop.set()
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()

        self._stops.append(end)
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                why = ready.get(timeout=0.2)  # None, or why it could not start
                return None if why is None else f"{what}: {why}"
            except queue.Empty:
                pass
            if proc.exitcode is not None:
                return f"{what} exited with {proc.exitcode} before it was ready"
            if time.monotonic() > deadline:
                return f"{what} did not start within {self.timeout_s:g} s"

    def _start_mooncake(self, workdir: str) -> dict:
        from mori.apps.bench.processes import stop as stop_processes
        from mori.apps.bench import umbp_mooncake as mc

        why = mc.unavailable()
        if why:
            return {"status": "skipped", "reason": why}
        try:
            proc, address, log = mc.start_master(self.ip, workdir, self.timeout_s)
            self._stops.append(lambda: stop_processes([proc]))
            err = self._spawn(mc.owner_main, (self.ip, address, self.capacity), "the Mooncake owner")
        except Exception as exc:  # noqa: BLE001 - UMBP's rows still run; the JSON says why
            return {"status": "failed", "reason": repr(exc)}
        if err is not None:
            return {"status": "failed", "reason": f"{err} (master log: {log})"}
        return {
            "status": "ok",
            "master": address,
            "describe": "Mooncake Store: mooncake_master, an owner process mounting the segment, "
            "the benchmark's worker a client mounting none; P2PHANDSHAKE, tcp",
        }

    def stop(self) -> None:
        """Stops everything started, the last first (a second call does nothing)."""
        while self._stops:
            self._stops.pop()()


def _raw(engine, read: bool, local, remote, loffs, roffs, sizes) -> None:
    from mori.io import StatusCode

    fn = engine.batch_read if read else engine.batch_write
    st = fn([local], [loffs], [remote], [roffs], [sizes], [engine.allocate_transfer_uid()])[0]
    if st.WaitFor(60000) != StatusCode.SUCCESS:
        raise RuntimeError(f"raw MORI-IO {'read' if read else 'write'} failed: {st.Message()}")


@dataclass
class StoreCalls:
    """One store's batch calls on registered pointers; each raises when a key fails."""

    put: Callable[[list[str], list[int], list[int]], None]
    get: Callable[[list[str], list[int], list[int]], None]
    exists: Callable[[list[str]], None]  # every key must be found
    clear: Callable[[], None] = lambda: None  # untimed, ahead of a row


def _umbp_calls(client) -> StoreCalls:
    from mori.apps.bench.umbp_workload import check_all

    return StoreCalls(
        put=lambda k, p, z: check_all(client.batch_put_from_ptr(k, p, z), "distributed put"),
        get=lambda k, p, z: check_all(client.batch_get_into_ptr(k, p, z), "distributed get"),
        exists=lambda k: check_all([client.batch_exists_consecutive(k) == len(k)], "distributed exists"),
    )


def _mooncake_calls(store) -> StoreCalls:
    from mori.apps.bench.umbp_workload import check_all

    def put(keys, ptrs, sizes) -> None:
        rcs = store.batch_put_from(keys, ptrs, sizes)
        check_all([rc == 0 for rc in rcs], f"Mooncake batch_put_from (codes {sorted(set(rcs))})")

    def get(keys, ptrs, sizes) -> None:
        got = store.batch_get_into(keys, ptrs, sizes)
        check_all([n == z for n, z in zip(got, sizes)], "Mooncake batch_get_into")

    def exists(keys) -> None:
        check_all([f == 1 for f in store.batch_is_exist(keys)], "Mooncake batch_is_exist")

    return StoreCalls(put=put, get=get, exists=exists, clear=lambda: store.remove_all(True))


def _cell(calls: StoreCalls, what: str, buf, row, capacity: int, args, raw=None) -> tuple[dict, list[str]]:
    """put, get-1st and get samples of one row on one store; returns them and the last put's keys.

    raw (UMBP's rows): raw(keys) gives (read, write), raw MORI-IO transfers of the same bytes to
    and from where those keys' values lie in the owner's arena. One of them is timed (untimed
    for the store's samples) ahead of every timed store call, so each op's ``x raw-io`` compares
    calls made under the same load (samples "raw put", "raw get-1st", "raw get")."""
    from mori.apps.bench.umbp_workload import iterations, sglang_keys, verify

    calls.clear()
    tag = f"{what[0]}{row.size}x{row.batch}"
    counter = iter(range(1 << 30))
    every: list[list[str]] = []
    src, dst, sizes = row.src_ptrs(buf), row.dst_ptrs(buf), row.sizes()
    out: dict = {}
    pair: list = []  # (read, write) once the first put's keys are placed

    def paired(op: str, index: int):
        if raw is None:
            return None
        samples = out.setdefault(f"raw {op}", [])

        def before(i: int) -> None:
            if i < 0:
                return
            if not pair:
                pair.extend(raw(every[0]))
            t0 = time.monotonic_ns()
            pair[index]()
            samples.append((t0, time.monotonic_ns()))

        return before

    def put_call() -> None:
        keys = sglang_keys(row.batch, f"{tag}p{next(counter)}")
        calls.put(keys, src, sizes)
        every.append(keys)

    out["put"] = iterations(
        put_call, min(args.iters, max(3, (capacity // 4) // row.nbytes)), args.budget, before=paired("put", 1)
    )
    keys = every[-1]
    # The latest put batches, as many as a quarter of the owner's memory (UMBP evicts down to 70 %).
    fresh = every[:-1][-max(2, (capacity // 4) // row.nbytes) :]
    # With four unread batches or more, every other one is read SGLang's way (exists+get).
    first, then = (fresh[0::2], fresh[1::2]) if len(fresh) >= 4 else (fresh, [])
    unread = iter(first)
    buf.dst[: row.nbytes] = 0
    out["get-1st"] = iterations(
        lambda: calls.get(next(unread), dst, sizes),
        len(first) - 1,
        args.budget,
        min_iters=len(first) - 1,
        before=paired("get-1st", 0),
    )
    verify(buf, row, f"{what} get-1st")
    if then:
        unchecked = iter(then)

        def exists_get() -> None:
            batch = next(unchecked)
            calls.exists(batch)
            calls.get(batch, dst, sizes)

        buf.dst[: row.nbytes] = 0
        out["exists+get"] = iterations(
            exists_get, len(then) - 1, args.budget, min_iters=len(then) - 1, before=paired("exists+get", 0)
        )
        verify(buf, row, f"{what} exists+get")
    buf.dst[: row.nbytes] = 0
    out["get"] = iterations(lambda: calls.get(keys, dst, sizes), args.iters, args.budget, before=paired("get", 0))
    verify(buf, row, f"{what} get")
    return out, keys


def measure(args, cells: list, info: dict, ip: str, capacity: int) -> tuple[list[dict], dict]:
    """The benchmark's worker: every row against the pool ``info`` names (see Pool), from ``ip``."""
    import numpy as np

    import mori.umbp as umbp
    from mori.apps.bench.sizes import human_size
    from mori.apps.bench.umbp_workload import HostBuffers, check_all, iterations, sglang_keys, summarize
    from mori.core.env import setting
    from mori.umbp.proto import require

    peer_pb = require("umbp_peer_pb2")
    mode = args.mode_name
    address, owner_id = info["umbp_master"], info["owner_id"]
    max_bytes = max(c.nbytes for c in cells)
    out: list[dict] = []
    meta: dict = {"mooncake": dict(info["mooncake"])}
    client = mstore = buf = None
    try:
        client = umbp.UMBPClient(_distributed_config(umbp, address, f"bench-{uuid.uuid4().hex[:8]}", 1 * MIB, ip))
        buf = HostBuffers(max_bytes)
        for ptr, n in buf.regions():
            client.register_memory(ptr, n)
        if meta["mooncake"]["status"] == "ok":
            from mori.apps.bench.umbp_mooncake import open_store

            try:
                mstore = open_store(ip, meta["mooncake"]["master"], 0)
                for ptr, n in buf.regions():
                    if mstore.register_buffer(ptr, n) != 0:
                        raise RuntimeError("Mooncake register_buffer failed")
            except Exception as exc:  # noqa: BLE001 - UMBP's rows still run
                meta["mooncake"] = {"status": "failed", "reason": f"the client store: {exc!r}"}
                mstore = None
        # The raw reads land in a third registered buffer, so that the store's gets are checked
        # on bytes only they wrote.
        rawdst = np.empty(max_bytes, dtype=np.uint8)
        client.register_memory(rawdst.ctypes.data, max_bytes)
        src_desc = client._region_of(buf.src_ptr, max_bytes)[0]
        rawdst_desc = client._region_of(rawdst.ctypes.data, max_bytes)[0]
        for row in cells:
            fig: dict = {}
            loffs = [i * row.size for i in range(row.batch)]
            zs = row.sizes()

            def raw(keys, row=row, loffs=loffs, zs=zs):
                # Where the keys' values lie in the owner's arena: the raw transfers move the same
                # bytes there (a write puts back what the put wrote).
                peer = client._peers[owner_id]
                r = peer.stub.BatchResolveKeys(peer_pb.BatchResolveKeysRequest(keys=keys, omit_descs=True), timeout=10)
                if list(r.found) != [True] * row.batch:
                    raise RuntimeError("the owner does not hold the first put's values (raw transfers' offsets)")
                roffs = [int(p) * r.page_size for p in r.page_index]
                meta["io_backend"] = client._engine.backend_for(rawdst_desc, peer.arena)
                return (
                    lambda: _raw(client._engine, True, rawdst_desc, peer.arena, loffs, roffs, zs),
                    lambda: _raw(client._engine, False, src_desc, peer.arena, loffs, roffs, zs),
                )

            samples, keys = _cell(_umbp_calls(client), "umbp", buf, row, capacity, args, raw)
            st = client.stats()
            if st["remote_puts"] == 0 or st["remote_gets"] == 0:
                raise RuntimeError("the bench worker's calls did not cross to the owner (routing kept them local)")
            ops = [op for op in ("put", "get-1st", "exists+get", "get") if op in samples]
            fig.update({("umbp", op): summarize(samples[op], row.batch, row.nbytes) for op in ops})
            fig[("raw-io", "write")] = summarize(samples["raw put"], row.batch, row.nbytes)
            reads = [s for op in ops if op != "put" for s in samples[f"raw {op}"]]
            fig[("raw-io", "read")] = summarize(reads, row.batch, row.nbytes)
            paired = {op: summarize(samples[f"raw {op}"], row.batch, row.nbytes) for op in ops}
            if mstore is not None:
                try:
                    samples, _ = _cell(_mooncake_calls(mstore), "mooncake", buf, row, capacity, args)
                    fig.update({("mooncake", op): summarize(s, row.batch, row.nbytes) for op, s in samples.items()})
                except Exception as exc:  # noqa: BLE001 - the rest of the rows go without it
                    meta["mooncake"] = {"status": "failed", "reason": f"{human_size(row.size)} x {row.batch}: {exc!r}"}
                    mstore.close()
                    mstore = None
            for (engine, op), f in fig.items():
                f = dict(f)
                if engine == "umbp":
                    base = paired[op]  # the raw transfers timed beside this op's calls
                    if base.get("GiB/s"):
                        f["x raw-io"] = round(f["GiB/s"] / base["GiB/s"], 3)
                    theirs = fig.get(("mooncake", op))
                    if theirs and theirs.get("GiB/s"):
                        f["x mooncake"] = round(f["GiB/s"] / theirs["GiB/s"], 3)
                out.append(
                    {
                        "mode": mode,
                        "engine": engine,
                        "op": op,
                        "value": human_size(row.size),
                        "value_bytes": row.size,
                        "batch": row.batch,
                        **f,
                    }
                )
            print(f"distributed {human_size(row.size)} x {row.batch}: done", flush=True)
        # Master lookups: BatchRouteGet of 128 keys the owner holds.
        keys = sglang_keys(128, "Dl")
        check_all(client.batch_put_from_ptr(keys, [buf.src_ptr] * 128, [4096] * 128), "distributed put")
        from mori.umbp.distributed.master_client import UMBPMasterClient

        mc = UMBPMasterClient(address, lookup_timeout_ms=5000)
        look = iterations(lambda: mc.batch_route_get(keys), max(args.iters, 200), args.budget)
        mc.close()
        out.append(
            {
                "mode": mode,
                "engine": "master",
                "op": "BatchRouteGet",
                "value": "-",
                "value_bytes": 0,
                "batch": 128,
                **{**summarize(look, 128, 0), "GiB/s": None},
            }
        )
        meta["store"] = "in-memory"
        st = client.stats()
        meta["place_feed"] = {  # how many places the feed gave, and how many reads used a held place
            "UMBP_PLACE_FEED_MS": int(setting("UMBP_PLACE_FEED_MS")),
            "fed_places": st["fed_places"],
            "location_cache_hits": st["location_cache_hits"],
            "routed_location_reads": st["routed_location_reads"],
        }
    finally:
        if mstore is not None:
            mstore.close()
        if client is not None:
            client.close()
        if buf is not None:
            buf.free()
    return out, meta


def _serve(args) -> int:
    """``--role pool`` (inside a namespace): the Pool until SIGTERM; its info goes to ``--info``."""
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with tempfile.TemporaryDirectory(prefix="mori-bench-umbp-pool-") as workdir:
        pool = Pool(args.ip, args.capacity, args.mooncake, args.timeout).start(workdir)
        try:
            tmp = args.info + ".tmp"
            with open(tmp, "w") as f:
                json.dump(pool.info, f)
            os.replace(tmp, args.info)  # the front end sees the whole file or none
            while not done.wait(0.2):
                pass
        finally:
            pool.stop()
    return 0


def _measure_worker(args, cells: list) -> int:
    """``--role client`` (inside a namespace): every row; the rows and meta go to ``--result``."""
    with open(args.info) as f:
        info = json.load(f)
    rows, meta = measure(args, cells, info, args.ip, args.capacity)
    with open(args.result, "w") as f:
        json.dump({"rows": rows, "meta": meta}, f)
    return 0


# Issue 28's targets for reads between hosts (--hosts netns): (label, column, bound).
TARGETS = {
    "get_vs_raw_io": ("cross-host get >= 0.85 x raw MORI-IO tcp", "x raw-io", 0.85),
    "get_vs_mooncake": ("cross-host get >= 2 x Mooncake Store at every size", "x mooncake", 2.0),
}
# The read rows each target is reported over, one verdict each: the repeated reads the
# located-read path serves (get), and the reads of keys the worker never read (one master
# round trip first: get-1st, exists+get).
TARGET_OPS = ("get", "get-1st", "exists+get")


def check_targets(rows: list[dict]) -> dict:
    """Per target and read op: the worst ratio over UMBP's rows, and met / missed / not measured
    (a ratio's row missing, e.g. Mooncake not installed)."""
    out: dict = {}
    for key, (label, col, bound) in TARGETS.items():
        for op in TARGET_OPS:
            vals = [(r[col], r) for r in rows if r["engine"] == "umbp" and r["op"] == op and r.get(col) is not None]
            verdict = {"target": label, "op": op, "bound": bound, "worst": None, "status": "not measured"}
            if vals:
                worst, wr = min(vals, key=lambda v: v[0])
                verdict.update(
                    worst=worst,
                    status="met" if worst >= bound else "missed",
                    rows=len(vals),
                    worst_at={"value": wr["value"], "batch": wr["batch"]},
                )
            out[f"{key}/{op}"] = verdict
    return out


def _grpc_poll_env(role: str, worker_poll: str) -> dict:
    """grpc's polling engine for a process of --hosts netns, as docs/umbp-distributed.md
    recommends deploying them: the benchmark's worker on `worker_poll` (`poll`: its idle UMBPPeer
    server threads then do not read the replies to its own master calls; `default`: grpc's own
    choice), the pool (the master, the owner it starts) on grpc's default engine, on which a
    server answers a call 25-35 us sooner than on `poll` on the 2-vCPU VM."""
    if role == "client" and worker_poll != "default":
        return {"GRPC_POLL_STRATEGY": worker_poll}
    return {}


def _run_netns(args, argv: Sequence[str], capacity: int) -> tuple[list[dict], dict]:
    """The pool in one namespace, this benchmark's worker in the other, each a process running
    this module with the user's arguments untouched plus its role."""
    from mori.apps.bench.launch import worker_command
    from mori.apps.bench.processes import stop as stop_processes
    from mori.apps.launcher import _die_with_launcher
    from mori.apps.netns import VethHosts

    with tempfile.TemporaryDirectory(prefix="mori-bench-umbp-dist-") as workdir, VethHosts(subnet=NETNS_SUBNET) as veth:
        server, worker = veth.hosts
        info, result = os.path.join(workdir, "pool.json"), os.path.join(workdir, "rows.json")
        common = ["--capacity", str(capacity), "--info", info]

        def start(host, role: str, extra: Sequence[str]):
            # The namespaces share one kernel: without their own node ids MORI-IO takes them for one host.
            env = dict(os.environ, MORI_NODE_ID=f"mori-bench-umbp-{host.name}")
            env.pop("GRPC_POLL_STRATEGY", None)
            env.update(_grpc_poll_env(role, args.worker_grpc_poll))
            cmd = worker_command(
                "mori.apps.bench.umbp_distributed", [*argv, *common, "--ip", host.ip, *extra], "--role"
            )
            cmd.insert(cmd.index("--role") + 1, role)
            return host.popen(cmd, env=env, preexec_fn=_die_with_launcher())

        pool = start(server, "pool", [])
        try:
            deadline = time.monotonic() + args.timeout
            while not os.path.exists(info):
                if pool.poll() is not None:
                    raise RuntimeError(f"the pool process (namespace {server.name}) exited with {pool.returncode}")
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the pool process (namespace {server.name}) did not start within {args.timeout:g} s"
                    )
                time.sleep(0.1)
            client = start(worker, "client", ["--result", result])
            try:
                rc = client.wait()
            finally:
                stop_processes([client])
            if rc != 0:
                raise RuntimeError(f"the benchmark's worker (namespace {worker.name}) exited with {rc}")
        finally:
            stop_processes([pool])
        with open(result) as f:
            doc = json.load(f)
        doc["meta"]["grpc_poll_strategy"] = {
            "pool": "grpc's default",
            "worker": args.worker_grpc_poll if args.worker_grpc_poll != "default" else "grpc's default",
        }
        doc["meta"]["netns"] = (
            f"veth between two network namespaces: masters and owners at {server.ip}, "
            f"the benchmark's worker at {worker.ip}"
        )
        return doc["rows"], doc["meta"]


def run(args, cells: list) -> tuple[list[dict], dict]:
    """Local: the pool in this process (its owners in their own) and this process as the worker."""
    capacity = owner_capacity(max(c.nbytes for c in cells))
    with tempfile.TemporaryDirectory(prefix="mori-bench-umbp-dist-") as workdir:
        pool = Pool("127.0.0.1", capacity, args.mooncake, args.timeout).start(workdir)
        try:
            rows, meta = measure(args, cells, pool.info, "127.0.0.1", capacity)
        finally:
            pool.stop()
    meta["netns"] = "not run: two processes on one host (--hosts netns for two namespaces)"
    return rows, meta


def main(argv: Optional[Sequence[str]] = None) -> int:
    from mori.apps.bench.sizes import parse_count, parse_list, parse_size
    from mori.apps.bench.umbp import umbp_unavailable
    from mori.apps.bench.umbp_workload import Row

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="mori bench umbp --distributed", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--distributed", action="store_true", help="this mode (the flag that selects it)")
    parser.add_argument(
        "--hosts",
        choices=["local", "netns"],
        default="local",
        help="local: two processes on this host; netns: the pool and the benchmark's worker in two "
        "network namespaces joined by veth, tcp between them (needs root)",
    )
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help=f"value sizes (default {DEFAULT_SIZES})")
    parser.add_argument("--batches", default=DEFAULT_BATCHES, help=f"keys per batch call (default {DEFAULT_BATCHES})")
    parser.add_argument("--iters", default="50", help="most timed calls per row (at least 3 are made)")
    parser.add_argument("--budget", type=float, default=0.5, help="rough seconds of timed calls per row")
    parser.add_argument(
        "--max-buffer", default="128M", help="largest batch (value x batch); cells above it are left out"
    )
    parser.add_argument("--no-mooncake", dest="mooncake", action="store_false", help="no Mooncake Store rows")
    parser.add_argument(
        "--worker-grpc-poll",
        choices=["poll", "epoll1", "default"],
        default="poll",
        help="--hosts netns: grpc's polling engine (GRPC_POLL_STRATEGY) of the benchmark's worker; the "
        "pool's processes run on grpc's default (default: poll, as recommended for workers)",
    )
    parser.add_argument("--timeout", type=float, default=120, help="seconds the owner processes may take to start")
    parser.add_argument(
        "--json", default=None, help="where to write the JSON (default bench-results/umbp-distributed.json)"
    )
    # The two processes of --hosts netns: this module again, the user's arguments plus these.
    parser.add_argument("--role", choices=["pool", "client"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--ip", default="127.0.0.1", help=argparse.SUPPRESS)
    parser.add_argument("--capacity", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--info", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        sizes = parse_list(args.sizes, "--sizes")
        batches = parse_list(args.batches, "--batches", parse_count)
        args.iters = parse_count(args.iters, "--iters")
        args.max_buffer = parse_size(args.max_buffer, "--max-buffer")
    except ValueError as exc:
        parser.error(str(exc))
    if not sizes or not batches or min(sizes) * min(batches) > args.max_buffer:
        parser.error("--sizes and --batches need at least one cell within --max-buffer")
    cells = [Row(s, b) for s in sizes for b in batches if s * b <= args.max_buffer]
    args.mode_name = "2 namespaces" if args.hosts == "netns" else "2 processes"
    if args.role == "pool":
        return _serve(args)
    if args.role == "client":
        return _measure_worker(args, cells)
    why = umbp_unavailable()
    if why:
        print(f"mori bench umbp --distributed: {why}", file=sys.stderr)
        return 2
    if args.hosts == "netns":
        from mori.apps.netns import unavailable_reason

        why = unavailable_reason()
        if why:
            print(f"mori bench umbp --distributed --hosts netns: {why}", file=sys.stderr)
            return 2
    from mori.apps.bench.report import Report

    t0 = time.monotonic()
    load_start = os.getloadavg()
    if args.hosts == "netns":
        rows, meta = _run_netns(args, argv, owner_capacity(max(c.nbytes for c in cells)))
    else:
        rows, meta = run(args, cells)
    cols = [c for c in COLUMNS if any(r.get(c) is not None for r in rows)]
    rep = Report("umbp-distributed", cols)
    rep.rows = rows
    rep.show(
        f"mori bench umbp --distributed (IO backend: {meta.get('io_backend', '?')}; "
        f"Mooncake Store: {meta['mooncake']['status']})"
    )
    if meta["mooncake"]["status"] != "ok":
        print(f"mooncake: {meta['mooncake']['status']}: {meta['mooncake']['reason']}", flush=True)
    targets = check_targets(rows)
    where = "" if args.hosts == "netns" else " (one host here: --hosts netns is the cross-host run)"
    for t in targets.values():
        worst = (
            "-" if t["worst"] is None else f"{t['worst']:.3g} at {t['worst_at']['value']} x {t['worst_at']['batch']}"
        )
        print(f"target {t['target']}, {t['op']} rows{where}: {t['status']} (worst {worst})")
    rep.meta = {
        **meta,
        "targets": targets,
        "hosts": args.hosts,
        "sizes": args.sizes,
        "batches": batches,
        "iters": args.iters,
        "budget_s": args.budget,
        "seconds": round(time.monotonic() - t0, 1),
        "loadavg_1m": {"start": round(load_start[0], 2), "end": round(os.getloadavg()[0], 2)},
        "method": "one untimed warm-up call per row, then timed batch calls until --iters or --budget "
        "(at least 3). ops/s = keys per second, GiB/s = bytes per second / 2^30 of the median "
        "call; p50/p99 of one batch call. The raw-io rows move the same bytes between registered "
        "buffers and the owner's arena (the offsets of the row's first put) with one "
        "engine.batch_read/batch_write + wait: the ceiling of the data path; one raw transfer is "
        "timed ahead of every timed UMBP call, and each UMBP row's x raw-io is against the raw "
        "transfers timed beside its own calls. Mooncake's rows "
        "make the same calls (fresh keys for put, each put batch read once for get-1st, the "
        "last one again and again for get) on the same buffers; its segment is as large as "
        "UMBP's owner DRAM and emptied (untimed) ahead of each row.",
    }
    print("wrote", rep.save(args.json or "bench-results/umbp-distributed.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
