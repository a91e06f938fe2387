# SPDX-License-Identifier: MIT
"""Shared pieces of the master tests: a real redis-server in a tmp dir, masters in-process or as
processes, a test peer (the UMBPPeer side of eviction), heartbeat helpers."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from concurrent import futures
from typing import Callable, Iterator, Optional

import grpc
import pytest

from mori.core.ports import wait_port
from mori.umbp.proto import require

pb = require("umbp_pb2")
pb_grpc = require("umbp_pb2_grpc")
peer_pb = require("umbp_peer_pb2")
peer_grpc = require("umbp_peer_pb2_grpc")

GIB = 1 << 30
HBM, DRAM, SSD = pb.TIER_HBM, pb.TIER_DRAM, pb.TIER_SSD


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


# -- redis ------------------------------------------------------------------------------------
class RedisProcess:
    """A real redis-server for a test (skips the test when redis-server is not installed)."""

    def __init__(self, cluster: bool = False) -> None:
        from mori.umbp.distributed.redis_server import RedisServerProcess

        if shutil.which("redis-server") is None:
            pytest.skip("redis-server is not installed (apt-get install redis-server; scripts/setup.sh does)")
        self._server = RedisServerProcess(cluster=cluster)
        self.uri = self._server.uri
        self.unix_uri = self._server.unix_uri
        self.port = self._server.port

    def stop(self) -> None:
        self._server.stop()


@pytest.fixture(scope="session")
def redis_pair() -> Iterator[list[RedisProcess]]:
    servers: list[RedisProcess] = []
    try:
        for _ in range(2):
            servers.append(RedisProcess())
        yield servers
    finally:
        for s in servers:
            s.stop()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisProcess]:
    server = RedisProcess(cluster=True)
    yield server
    server.stop()


def make_store(kind: str, redis_pair=None, redis_cluster=None, shards: int = 4):
    """A fresh store of the given kind: memory, redis (one endpoint), redis-unix (the same through
    its unix socket), redis-shards (two), redis-cluster."""
    from mori.umbp.distributed.master_store_memory import InMemoryMetadataStore

    if kind == "memory":
        return InMemoryMetadataStore(index_shards=shards)
    from mori.umbp.distributed.master_store_redis import RedisMetadataStore, RedisSettings

    ns = uid("t")
    if kind == "redis":
        return RedisMetadataStore(RedisSettings(uri=redis_pair[0].uri, namespace=ns, block_shards=shards))
    if kind == "redis-unix":
        return RedisMetadataStore(RedisSettings(uri=redis_pair[0].unix_uri, namespace=ns, block_shards=shards))
    if kind == "redis-shards":
        return RedisMetadataStore(
            RedisSettings(shard_uris=[r.uri for r in redis_pair], namespace=ns, block_shards=shards)
        )
    if kind == "redis-cluster":
        return RedisMetadataStore(RedisSettings(uri=redis_cluster.uri, namespace=ns, cluster=True, block_shards=shards))
    raise ValueError(kind)


# -- masters ----------------------------------------------------------------------------------
def fast_settings(**kw):
    from mori.umbp.distributed.master_settings import MasterSettings

    base = dict(
        heartbeat_ttl_s=10.0,
        reaper_interval_s=60.0,
        eviction_interval_s=600.0,
        hit_index_gc_interval_s=600.0,
        lease_duration_s=2.0,
    )
    base.update(kw)
    return MasterSettings(**base)


@contextlib.contextmanager
def running_master(store=None, settings=None, secret: Optional[bytes] = None, metrics: bool = False):
    """An in-process master (real gRPC server on a free port)."""
    from mori.umbp.distributed.master_server import MasterServer

    server = MasterServer(
        "127.0.0.1:0",
        settings=settings or fast_settings(),
        store=store,
        metrics_port=0 if metrics else None,
        secret=secret,
    )
    server.start()
    server.address = f"127.0.0.1:{server.port}"
    try:
        yield server
    finally:
        server.stop(grace=0)


def master_process(port: int, env: Optional[dict] = None, args=()) -> subprocess.Popen:
    """``umbp_master 127.0.0.1:port 0`` as a real process (the console script's entry point)."""
    e = dict(os.environ)
    e.update(env or {})
    proc = subprocess.Popen(
        [sys.executable, "-m", "mori.umbp.distributed.master_server", f"127.0.0.1:{port}", "0", *args],
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_port(port, timeout=20)
    except TimeoutError:
        proc.kill()
        out = proc.communicate(timeout=5)[0]
        raise RuntimeError(f"umbp_master did not start: {out}")
    return proc


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- a peer's side of the protocol --------------------------------------------------------------
class PeerSession:
    """Registers a node and ships heartbeats with key events, as a peer does."""

    def __init__(
        self,
        address: str,
        node_id: str,
        caps: dict[int, tuple[int, int]],
        peer_address: str = "",
        metadata=None,
        secret: Optional[bytes] = None,
    ) -> None:
        self.channel = grpc.insecure_channel(address)
        if secret is not None:
            from mori.umbp.distributed.master_auth import SigningInterceptor

            self.channel = grpc.intercept_channel(self.channel, SigningInterceptor(secret))
        self.stub = pb_grpc.UMBPMasterStub(self.channel)
        self.node_id = node_id
        self.caps = dict(caps)
        self.seq = 0
        self.peer_address = peer_address or f"{node_id}:1"
        self.stub.RegisterClient(
            pb.RegisterClientRequest(
                node_id=node_id, node_address=node_id, peer_address=self.peer_address, tier_capacities=self._caps()
            ),
            timeout=5,
        )

    def _caps(self):
        return [
            pb.TierCapacity(tier=t, total_capacity_bytes=tot, available_capacity_bytes=av)
            for t, (tot, av) in self.caps.items()
        ]

    def heartbeat(self, events=(), seq: Optional[int] = None, full_sync: bool = False, baseline: int = 0):
        """events: (kind 'add'|'remove', key, tier, size[, arena offset, checksum]). Returns the
        HeartbeatResponse."""
        bundles = []
        if events or seq is not None:
            if seq is None:
                seq = self.seq + 1
            bundles.append(
                pb.EventBundle(
                    seq=seq,
                    events=[
                        pb.KvEvent(
                            kind=pb.KvEvent.ADD if e[0] == "add" else pb.KvEvent.REMOVE,
                            key=e[1],
                            tier=e[2],
                            size=e[3],
                            offset=e[4] if len(e) > 4 else 0,
                            checksum=e[5] if len(e) > 4 else 0,
                        )
                        for e in events
                    ],
                )
            )
        resp = self.stub.Heartbeat(
            pb.HeartbeatRequest(
                node_id=self.node_id,
                bundles=bundles,
                is_full_sync=full_sync,
                tier_capacities=self._caps(),
                delta_seq_baseline=baseline,
            ),
            timeout=5,
        )
        self.seq = resp.acked_seq
        return resp

    def close(self) -> None:
        self.channel.close()


class TestPeer(peer_grpc.UMBPPeerServicer):
    """The UMBPPeer side of master-driven eviction: frees what it holds and is not serving."""

    __test__ = False

    def __init__(self, values: dict[str, int], pinned: frozenset[str] = frozenset()) -> None:
        self.values = dict(values)
        self.pinned = pinned
        self.evict_requests: list[list[str]] = []
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        peer_grpc.add_UMBPPeerServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{self.port}"
        self.server.start()
        self.lock = threading.Lock()

    def EvictKey(self, request, context):
        with self.lock:
            self.evict_requests.append(list(request.keys))
            out = []
            for key in request.keys:
                if key in self.values and key not in self.pinned:
                    out.append(peer_pb.EvictKeyEntry(key=key, bytes_freed=self.values.pop(key)))
                else:
                    out.append(peer_pb.EvictKeyEntry(key=key, bytes_freed=0))
            return peer_pb.EvictKeyResponse(evicted=out)

    def stop(self) -> None:
        self.server.stop(0)


def echo_from_threads(echo: Callable[[bytes], bytes], threads: int = 8, calls: int = 40) -> list[int]:
    """Calls ``echo`` (a server answering a request reversed) from ``threads`` threads at once,
    ``calls`` random requests each; the threads that got a reply not their own."""
    wrong: list[int] = []

    def caller(i: int) -> None:
        rng = random.Random(i)
        for _ in range(calls):
            b = rng.randbytes(rng.randrange(0, 4096))
            if echo(b) != b[::-1]:
                wrong.append(i)

    team = [threading.Thread(target=caller, args=(i,)) for i in range(threads)]
    for t in team:
        t.start()
    for t in team:
        t.join()
    return wrong


def wait_for(cond: Callable[[], bool], seconds: float = 5.0) -> bool:
    """Polls ``cond`` until it holds or ``seconds`` pass; its last value."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return cond()
