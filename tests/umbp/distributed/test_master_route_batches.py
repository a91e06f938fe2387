# SPDX-License-Identifier: MIT
"""RouteGets over Redis answered in batches by the grpc++ master (MasterGrpcServer's
set_native_batch: the calls queued for its handler threads share one script call per endpoint):
under many concurrent callers every reply is still its own call's (hits with their owner, tier
and size; misses; excluded owners), the metrics count every call once, and batches did form."""

from __future__ import annotations

import random
import threading

import grpc
import pytest
from prometheus_client import generate_latest
from umbp_master_harness import (  # noqa: F401 - redis_pair: a fixture
    DRAM,
    GIB,
    HBM,
    PeerSession,
    fast_settings,
    make_store,
    pb,
    pb_grpc,
    redis_pair,
)

from mori.umbp.distributed.master_server import MasterServer, cpp_server

CPP = cpp_server()
pytestmark = pytest.mark.skipif(
    CPP is None or not (CPP.HAVE_NATIVE_ROUTES and CPP.HAVE_NATIVE_REDIS), reason="no grpc++ or hiredis in this build"
)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["redis", "redis-shards"])
def test_concurrent_route_gets_are_batched_and_each_answered_right(backend, request, monkeypatch):
    monkeypatch.setenv("UMBP_MASTER_HANDLER_THREADS", "2")
    rng = random.Random()
    store = make_store(backend, request.getfixturevalue("redis_pair"))
    m = MasterServer("127.0.0.1:0", settings=fast_settings(), server="cpp", store=store)
    m.start()
    address = f"127.0.0.1:{m.port}"
    try:
        assert m.native_routes is not None
        # node-a holds every key in DRAM; node-b the first half in HBM too (the faster tier: routed
        # there, unless a caller excludes node-b).
        keys = [f"k{rng.getrandbits(64):016x}" for _ in range(200)]
        sizes = {k: rng.randrange(1, 1 << 20) for k in keys}
        a = PeerSession(address, "node-a", {DRAM: (GIB, GIB)}, peer_address="10.0.0.1:7")
        a.heartbeat([("add", k, DRAM, sizes[k]) for k in keys])
        b = PeerSession(address, "node-b", {HBM: (GIB, GIB)}, peer_address="10.0.0.2:7")
        b.heartbeat([("add", k, HBM, sizes[k]) for k in keys[:100]])

        def expect(key: str, exclude: list[str]):
            if key not in sizes:
                return (False, "", "", 0, 0)
            if key in keys[:100] and "node-b" not in exclude:
                return (True, "node-b", "10.0.0.2:7", HBM, sizes[key])
            return (True, "node-a", "10.0.0.1:7", DRAM, sizes[key])

        wrong: list = []
        calls_per_thread, threads = 150, 12

        def caller(seed: int) -> None:
            r = random.Random(seed)
            with grpc.insecure_channel(address) as ch:
                stub = pb_grpc.UMBPMasterStub(ch)
                for _ in range(calls_per_thread):
                    key = r.choice(keys) if r.random() < 0.8 else f"miss-{r.getrandbits(32)}"
                    exclude = ["node-b"] if r.random() < 0.25 else []
                    got = stub.RouteGet(pb.RouteGetRequest(key=key, exclude_nodes=exclude), timeout=10)
                    have = (got.found, got.node_id, got.peer_address, got.tier, got.size)
                    if have != expect(key, exclude):
                        wrong.append((key, exclude, have))

        ts = [threading.Thread(target=caller, args=(rng.getrandbits(32),)) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not wrong, wrong[:5]
        batches, calls = m.route_get_batches()
        assert calls == threads * calls_per_thread
        assert batches < calls, "no two concurrent RouteGets shared a batch"
        text = generate_latest(m.metrics.registry).decode()
        assert f'mori_umbp_master_rpc_latency_seconds_count{{rpc="RouteGet"}} {float(calls)}' in text
        a.close()
        b.close()
    finally:
        m.stop(0)


@pytest.mark.timeout(60)
def test_route_gets_in_memory_are_not_batched(monkeypatch):
    """The in-memory index answers a RouteGet on the poller that took it: nothing to batch."""
    monkeypatch.setenv("UMBP_MASTER_HANDLER_THREADS", "2")
    m = MasterServer("127.0.0.1:0", settings=fast_settings(), server="cpp", store=make_store("memory"))
    m.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{m.port}") as ch:
            stub = pb_grpc.UMBPMasterStub(ch)
            assert not stub.RouteGet(pb.RouteGetRequest(key="absent"), timeout=5).found
        assert m.route_get_batches() == (0, 0)
    finally:
        m.stop(0)
