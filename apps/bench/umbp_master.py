# SPDX-License-Identifier: MIT
"""``mori bench umbp --master``: the UMBP master's lookup rate.

BatchRouteGet of 128 keys (all hits, random keys of a populated index), closed loop from
several client processes, against one master process backed by the in-memory store, one Redis,
and four Redis instances (UMBP_REDIS_SHARD_URIS), over TCP or (``redis-unix``, ``redis4-unix``)
the servers' unix sockets. Reports calls/s, keys/s and per-call p50/p99,
and the CPU the master processes (and redis-servers) spent per call, read from /proc: calls per
master core-second is the figure that does not depend on what else loads the host.

    mori bench umbp --master                          # about 30 s
    mori bench umbp --master --clients 1,4 --seconds 3 --keys 50000 --json out.json
    mori bench umbp --master --master-workers 8    # Redis rows served by 8 master processes
    mori bench umbp --master --puts --batch 32     # BatchRoutePut: a writer's routes
    mori bench umbp --master --feed --batch 0      # PlaceFeed: workers' polls (0: nothing new;
                                                   # N: N places per reply, a worker catching up)
    mori bench umbp --master --backends memory --servers python,cpp --rounds 3   # the two gRPC
                                                   # servers, alternated in one sitting

MORI publishes 17.3k RouteGet/s at p50 462 us for its Redis store with 4 instances and 8 client
threads (design-redis-metadata-store.md, a dedicated host it does not name): a different
machine and master (C++), so the comparison is indicative only.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from typing import Optional, Sequence

from mori.apps.bench.report import Report
from mori.core.ports import free_port, wait_port

MORI_PUBLISHED = {"calls_per_s": 17300, "p50_us": 462, "setup": "MORI C++ master, Redis x4, 8 threads"}


def _populate(address: str, n_keys: int, n_nodes: int, seed: int, stop: threading.Event) -> list[str]:
    """Register ``n_nodes`` peers holding ``n_keys`` keys between them and keep them alive
    (heartbeats every second until ``stop``), as real peers would."""
    import grpc

    from mori.umbp.distributed.grpc_channels import Channel
    from mori.umbp.proto import require

    pb, pb_grpc = require("umbp_pb2"), require("umbp_pb2_grpc")
    stub = Channel(address, [(pb_grpc.UMBPMasterStub, pb.DESCRIPTOR.services_by_name["UMBPMaster"], pb)]).stubs[0]
    rng = random.Random(seed)
    nodes = []
    keys = [f"bench-{seed}-{i}-{rng.getrandbits(48):012x}" for i in range(n_keys)]
    for n in range(n_nodes):
        node = f"bench-node-{seed}-{n}"
        nodes.append(node)
        stub.RegisterClient(
            pb.RegisterClientRequest(
                node_id=node,
                peer_address=f"10.0.0.{n}:17100",
                tier_capacities=[
                    pb.TierCapacity(tier=pb.TIER_DRAM, total_capacity_bytes=1 << 40, available_capacity_bytes=1 << 39)
                ],
            ),
            timeout=10,
        )
        mine = keys[n::n_nodes]
        # As a real owner's DRAM ADDs: each value's place in its arena and its checksum, which
        # the routes hand out.
        for seq, i in enumerate(range(0, len(mine), 5000), start=1):
            stub.Heartbeat(
                pb.HeartbeatRequest(
                    node_id=node,
                    bundles=[
                        pb.EventBundle(
                            seq=seq,
                            events=[
                                pb.KvEvent(
                                    kind=pb.KvEvent.ADD,
                                    key=k,
                                    tier=pb.TIER_DRAM,
                                    size=360 << 10,
                                    offset=(i + j) * (360 << 10),
                                    checksum=rng.getrandbits(64) | 1,
                                )
                                for j, k in enumerate(mine[i : i + 5000])
                            ],
                        )
                    ],
                ),
                timeout=60,
            )

    def beat() -> None:
        while not stop.wait(1.0):
            for node in nodes:
                try:
                    stub.Heartbeat(pb.HeartbeatRequest(node_id=node), timeout=5)
                except grpc.RpcError:
                    pass

    threading.Thread(target=beat, name="bench-heartbeats", daemon=True).start()
    return keys


def _client(
    address: str,
    keys: list[str],
    batch: int,
    seconds: float,
    start_at: float,
    seed: int,
    out,
    absent: float = 0.0,
    rpc: str = "BatchRouteGet",
) -> None:
    from mori.umbp.distributed.grpc_channels import Channel
    from mori.umbp.proto import require

    pb, pb_grpc = require("umbp_pb2"), require("umbp_pb2_grpc")
    admin_pb, admin_grpc = require("umbp_admin_pb2"), require("umbp_admin_pb2_grpc")
    # The channel UMBP's clients call the master through (UMBP_GRPC_CLIENT picks grpc++ or grpcio).
    stub, admin = Channel(
        address,
        [
            (pb_grpc.UMBPMasterStub, pb.DESCRIPTOR.services_by_name["UMBPMaster"], pb),
            (admin_grpc.UMBPMasterAdminStub, admin_pb.DESCRIPTOR.services_by_name["UMBPMasterAdmin"], admin_pb),
        ],
    ).stubs
    feed_id = feed_seq = 0
    if rpc == "PlaceFeed" and batch == 0:
        # At the feed's end (two small calls: its id, then a number past the end, which the
        # master answers with where the end is): each timed poll then finds nothing new.
        for _ in range(2):
            r = admin.PlaceFeed(
                admin_pb.PlaceFeedRequest(node_id=f"bench-{seed}", feed_id=feed_id, since_seq=feed_seq, max_entries=1),
                timeout=10,
            )
            feed_id, feed_seq = r.feed_id, 1 << 62
        feed_seq = r.next_seq
    rng = random.Random(seed)
    lat: list[float] = []
    misses = 0
    # Keys no one put (their share of a call: `absent`), as SGLang's exists calls end in misses.
    n_absent = round(batch * absent)
    time.sleep(max(0.0, start_at - time.time()))
    end = time.perf_counter() + seconds
    while True:
        if rpc == "PlaceFeed":  # a worker's poll: nothing new (batch 0), or `batch` places from the oldest
            req = admin_pb.PlaceFeedRequest(
                node_id=f"bench-{seed}", feed_id=feed_id, since_seq=feed_seq, max_entries=batch
            )
            t0 = time.perf_counter()
            r = admin.PlaceFeed(req, timeout=10)
            t1 = time.perf_counter()
            misses += abs(len(r.keys) - batch)  # every poll returns exactly `batch` places
        elif rpc == "BatchRoutePut":  # a writer's route: fresh keys of 64 KiB values (SGLang's pages)
            ask = [f"put-{seed}-{rng.getrandbits(64):016x}" for _ in range(batch)]
            req = pb.BatchRoutePutRequest(node_id="bench", keys=ask, block_sizes=[64 << 10] * batch)
            t0 = time.perf_counter()
            r = stub.BatchRoutePut(req, timeout=10)
            t1 = time.perf_counter()
            misses += sum(1 for e in r.entries if e.outcome != pb.ROUTE_PUT_OUTCOME_ROUTED)
        elif batch == 0:  # RouteGet of one key, MORI's published figure's RPC
            key = f"absent-{rng.getrandbits(64):016x}" if rng.random() < absent else rng.choice(keys)
            t0 = time.perf_counter()
            found = stub.RouteGet(pb.RouteGetRequest(node_id="bench", key=key), timeout=10).found
            t1 = time.perf_counter()
            misses += 0 if found else 1
        else:
            ask = rng.sample(keys, batch - n_absent) + [f"absent-{rng.getrandbits(64):016x}" for _ in range(n_absent)]
            if rpc == "BatchLookup":  # a scheduler's existence check (vLLM's connector, a lookup-only client)
                req = pb.BatchLookupRequest(node_id="bench", keys=ask)
                t0 = time.perf_counter()
                found = stub.BatchLookup(req, timeout=10).found
                t1 = time.perf_counter()
                misses += sum(1 for f in found if not f)
            else:
                req = pb.BatchRouteGetRequest(node_id="bench", keys=ask)
                t0 = time.perf_counter()
                r = stub.BatchRouteGet(req, timeout=10)
                t1 = time.perf_counter()
                misses += sum(1 for ref in r.node_ref if ref == 0)
        lat.append(t1 - t0)
        if t1 >= end:
            break
    out.put((lat, misses))


def _measure(
    address: str,
    keys: list[str],
    clients: int,
    batch: int,
    seconds: float,
    absent: float = 0.0,
    rpc: str = "BatchRouteGet",
) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    start_at = time.time() + 1.5  # the spawned interpreters need a moment
    procs = [
        ctx.Process(target=_client, args=(address, keys, batch, seconds, start_at, 1000 + i, q, absent, rpc))
        for i in range(clients)
    ]
    for p in procs:
        p.start()
    results = [q.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join(10)
    lat = sorted(x for r, _ in results for x in r)
    misses = sum(m for _, m in results)
    wall = max(sum(r) for r, _ in results)
    calls = len(lat)
    return {
        "calls": calls,
        "calls_per_s": calls / wall * 1.0 if wall else 0.0,
        "keys_per_s": calls * max(batch, 1) / wall if wall else 0.0,
        "p50_us": lat[len(lat) // 2] * 1e6,
        "p99_us": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e6,
        "mean_us": statistics.fmean(lat) * 1e6,
        "misses": misses,
        "absent": calls * round(batch * absent) if batch else None,
    }


def _cpu_seconds(root: int) -> float:
    """User + system CPU seconds of process ``root`` and its live descendants (the master and its
    --workers), from /proc: the master's cost per call, whatever else loads the host."""
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(fields[1])
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo.extend(child for child, ppid in parent.items() if ppid == pid)
    return total


def _start_master(env_extra: dict, workers: int = 1) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = dict(os.environ, **env_extra)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mori.umbp.distributed.master_server",
            f"127.0.0.1:{port}",
            "0",
            "--workers",
            str(workers),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_port(port, timeout=20.0, process=proc)
    return proc, f"127.0.0.1:{port}"


def _bench_master(args, report: Report, backend: str, server: str, env: dict, workers: int, redis_servers) -> None:
    """One master (``server``: its gRPC server) and its rows, one per client count."""
    if server != "auto":
        env["UMBP_MASTER_SERVER"] = server
    from mori.umbp.distributed.master_server import server_kind

    shown = server_kind(None if server == "auto" else server)
    proc, address = _start_master(env, workers)
    stop = threading.Event()
    try:
        keys = _populate(address, args.keys, args.nodes, seed=7, stop=stop)
        for clients in [int(c) for c in args.clients.split(",") if c.strip()]:
            cpu0 = _cpu_seconds(proc.pid)
            redis0 = sum(_cpu_seconds(rs.proc.pid) for rs in redis_servers)
            r = _measure(address, keys, clients, args.batch, args.seconds, args.absent, args.rpc)
            # includes the 1 s heartbeats of the bench's peers and the clients' start-up wait
            master_cpu = _cpu_seconds(proc.pid) - cpu0
            # /proc counts in clock ticks (10 ms): a row too short to see one has no figure
            r["master_cpu_us_per_call"] = master_cpu / r["calls"] * 1e6 if master_cpu > 0 else None
            r["calls_per_master_core_s"] = r["calls"] / master_cpu if master_cpu > 0 else None
            r["redis_cpu_us_per_call"] = (
                (sum(_cpu_seconds(rs.proc.pid) for rs in redis_servers) - redis0) / r["calls"] * 1e6
            )
            # Every key put must be found; the absent ones (exactly so many, in batches) must not.
            if args.rpc == "PlaceFeed":
                if r["misses"]:
                    raise RuntimeError(f"{backend}: PlaceFeed replies were {r['misses']} places off --batch")
            elif (args.batch and r["misses"] != r["absent"]) or (not args.absent and r["misses"]):
                raise RuntimeError(
                    f"{backend}: {r['misses']} keys missed, {r['absent'] or 0} absent; the index lost keys"
                    if args.rpc != "BatchRoutePut"
                    else f"{backend}: {r['misses']} keys not routed (no room?)"
                )
            report.add(
                **{
                    "backend": backend,
                    "server": shown,
                    "clients": clients,
                    "master_processes": workers,
                    "calls/s": r["calls_per_s"],
                    "keys/s": r["keys_per_s"],
                    "p50 us": r["p50_us"],
                    "p99 us": r["p99_us"],
                    "master CPU us/call": r["master_cpu_us_per_call"],
                    "calls/s per master core": r["calls_per_master_core_s"],
                    "Redis CPU us/call": r["redis_cpu_us_per_call"],
                    "vs MORI calls/s": r["calls_per_s"] / MORI_PUBLISHED["calls_per_s"],
                    **r,
                }
            )
    finally:
        stop.set()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="mori bench umbp --master", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--backends",
        default="memory,redis,redis4",
        help="memory, redis (one), redis4 (four shards); redis-unix, redis4-unix: the same through unix sockets",
    )
    p.add_argument("--clients", default="1,4,8", help="client processes (closed loop)")
    p.add_argument("--batch", type=int, default=128, help="keys per BatchRouteGet (0: RouteGet of one key)")
    p.add_argument("--keys", type=int, default=20000, help="keys in the index")
    p.add_argument("--nodes", type=int, default=4, help="registered peers the keys are spread over")
    p.add_argument("--seconds", type=float, default=2.0, help="timed seconds per row")
    p.add_argument(
        "--lookup",
        action="store_true",
        help="BatchLookup of --batch keys (existence only, a scheduler's call) instead of BatchRouteGet",
    )
    p.add_argument(
        "--puts",
        action="store_true",
        help="BatchRoutePut of --batch fresh keys (64 KiB values: a writer's route) instead of BatchRouteGet",
    )
    p.add_argument(
        "--feed",
        action="store_true",
        help="PlaceFeed polls (UMBP_PLACE_FEED_MS's call) instead of BatchRouteGet: --batch 0 finds nothing "
        "new, --batch N returns N places (a worker catching up)",
    )
    p.add_argument(
        "--absent",
        type=float,
        default=0.0,
        help="share of each call's keys that no one put (0-1; SGLang's exists calls end in misses)",
    )
    p.add_argument(
        "--master-workers",
        type=int,
        default=1,
        help="master processes sharing the port for the Redis rows (umbp_master --workers)",
    )
    p.add_argument(
        "--servers",
        default="auto",
        help="the master's gRPC server per row: cpp (grpc++), python (grpcio), auto (UMBP_MASTER_SERVER); "
        "several, comma-separated, are alternated",
    )
    p.add_argument("--rounds", type=int, default=1, help="repeat every backend's rows this many times")
    p.add_argument("--json", default=None, help="where to write the JSON (default bench-results/umbp_master.json)")
    args = p.parse_args(argv)
    servers = [x.strip() for x in args.servers.split(",") if x.strip()]
    for server in servers:
        if server not in ("auto", "cpp", "python"):
            p.error(f"--servers: auto, cpp or python, got {server!r}")
    if sum((args.lookup, args.puts, args.feed)) > 1:
        p.error("--lookup, --puts, --feed: one RPC at a time")
    if (args.lookup or args.puts) and args.batch < 1:
        p.error(f"{'--lookup' if args.lookup else '--puts'} needs --batch N >= 1 (keys per call)")
    args.rpc = (
        "BatchLookup"
        if args.lookup
        else "BatchRoutePut"
        if args.puts
        else "PlaceFeed"
        if args.feed
        else ("BatchRouteGet" if args.batch else "RouteGet")
    )
    if not 0.0 <= args.absent <= 1.0:
        p.error(f"--absent: a share between 0 and 1, got {args.absent}")
    if not args.seconds > 0:
        p.error(f"--seconds: timed seconds per row, more than 0, got {args.seconds}")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    for b in backends:
        if b not in ("memory", "redis", "redis4", "redis-unix", "redis4-unix"):
            p.error(f"--backends: memory, redis, redis4, redis-unix or redis4-unix, got {b!r}")
    from mori.umbp.distributed.redis_server import RedisServerProcess

    report = Report(
        "umbp_master",
        [
            "backend",
            "server",
            "master_processes",
            "clients",
            "calls/s",
            "keys/s",
            "p50 us",
            "p99 us",
            "master CPU us/call",
            "calls/s per master core",
            "Redis CPU us/call",
            "vs MORI calls/s",
        ],
    )
    report.meta.update(
        {
            "batch": args.batch,
            "absent": args.absent,
            "rpc": args.rpc,
            "keys": args.keys,
            "nodes": args.nodes,
            "cores": os.cpu_count(),
            "mori_published": MORI_PUBLISHED,
        }
    )
    for backend in backends:
        redis_servers = []
        env = {"UMBP_METADATA_BACKEND": "memory"}
        if backend.startswith("redis"):
            n = 4 if backend.startswith("redis4") else 1
            try:
                for _ in range(n):
                    redis_servers.append(RedisServerProcess())
            except BaseException:
                for r in redis_servers:
                    r.stop()
                raise
            env = {
                "UMBP_METADATA_BACKEND": "redis",
                "UMBP_REDIS_NAMESPACE": "bench",
                "UMBP_REDIS_SHARD_URIS": ",".join(
                    r.unix_uri if backend.endswith("-unix") else r.uri for r in redis_servers
                ),
            }
        workers = args.master_workers if backend.startswith("redis") else 1
        try:
            for _round in range(args.rounds):
                for server in servers:
                    if redis_servers:  # a fresh store per master: the bench's peers register again
                        env["UMBP_REDIS_NAMESPACE"] = f"bench{_round}{server}"
                    _bench_master(args, report, backend, server, dict(env), workers, redis_servers)
        finally:
            for r in redis_servers:
                r.stop()
    absent = f", {args.absent:.0%} absent" if args.absent else ""
    report.show(
        f"UMBP master: {f'{args.rpc} of {args.batch} keys' if args.batch else args.rpc}{absent} ({os.cpu_count()} cores; "
        "MORI's published "
        f"{MORI_PUBLISHED['calls_per_s']} RouteGet/s p50 {MORI_PUBLISHED['p50_us']} us was another machine)"
    )
    print("wrote", report.save(args.json))
    return 0


if __name__ == "__main__":
    sys.exit(main())
