# SPDX-License-Identifier: MIT
"""RouteGets over Redis answered in batches by the grpc++ master (MasterGrpcServer's
set_native_batch: the calls queued for its handler threads share one script call per endpoint):
under many concurrent callers every reply is still its own call's (hits with their owner, tier
and size; misses; excluded owners), the metrics count every call once, and batches did form."""

from __future__ import annotations

import random
import threading
import time

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
    uid,
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


# Holds Redis for ARGV[1] microseconds: every other client's command waits until it returns.
_HOLD_REDIS = """
local t0 = redis.call('TIME')
repeat
  local t = redis.call('TIME')
until (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) >= tonumber(ARGV[1])
return 1
"""


@pytest.mark.timeout(60)
def test_a_free_handler_thread_takes_a_route_get_while_others_wait_on_redis(request, monkeypatch):
    """A RouteGet that finds a handler thread free runs at once, in a batch of its own: with
    Redis held, four RouteGets a moment apart are four batches on four threads, all waiting on
    Redis together. (The first form let two batches be in flight: the third and fourth call
    queued behind them as a third batch, and a 16-core host served a fifth fewer RouteGets.)"""
    import redis

    from mori.umbp.distributed.master_store_redis import RedisMetadataStore, RedisSettings

    servers = request.getfixturevalue("redis_pair")
    monkeypatch.setenv("UMBP_MASTER_HANDLER_THREADS", "4")
    # The master's calls wait out the hold below: well within their socket timeout.
    settings = RedisSettings(uri=servers[0].uri, namespace=uid("t"), block_shards=4, socket_timeout_ms=10_000)
    store = RedisMetadataStore(settings)
    m = MasterServer("127.0.0.1:0", settings=fast_settings(), server="cpp", store=store)
    m.start()
    address = f"127.0.0.1:{m.port}"
    a = PeerSession(address, "node-a", {DRAM: (GIB, GIB)}, peer_address="10.0.0.1:7")
    try:
        a.heartbeat([("add", "held-key", DRAM, 4096)])
        with grpc.insecure_channel(address) as ch:
            stub = pb_grpc.UMBPMasterStub(ch)
            assert stub.RouteGet(pb.RouteGetRequest(key="held-key"), timeout=10).found  # loads the script
            before = m.route_get_batches()
            holder = redis.Redis.from_url(servers[0].uri)
            hold = threading.Thread(target=holder.eval, args=(_HOLD_REDIS, 0, 1_500_000))
            hold.start()
            time.sleep(0.1)  # Redis is in the script now
            found: list[bool] = []
            callers = []
            for i in range(1, 5):
                t = threading.Thread(
                    target=lambda: found.append(stub.RouteGet(pb.RouteGetRequest(key="held-key"), timeout=10).found)
                )
                t.start()
                callers.append(t)
                # The next call goes once a handler thread has taken this one (or 0.25 s passed:
                # none took it, and it waits for a batch to end).
                deadline = time.monotonic() + 0.25
                while m.route_get_batches()[0] - before[0] < i and time.monotonic() < deadline:
                    time.sleep(0.002)
            for t in callers:
                t.join()
            hold.join()
            holder.close()
        assert found == [True] * 4
        after = m.route_get_batches()
        assert (after[0] - before[0], after[1] - before[1]) == (4, 4)
    finally:
        a.close()
        m.stop(0)
