# SPDX-License-Identifier: MIT
"""The master's two gRPC servers, grpc++ in process (UMBP_MASTER_SERVER=cpp) and grpcio
(python), answer the same calls with the same replies, codes and details; and the grpc++ server
itself passes bytes, metadata, peer and deadline through, survives a failing handler, finishes
calls in flight on stop. The rest of tests/umbp/distributed/ runs against whichever server
UMBP_MASTER_SERVER picks (auto: grpc++ when built)."""

from __future__ import annotations

import importlib.util
import os
import random
import shutil
import subprocess
import sys
import threading
import time

import grpc
import pytest
from prometheus_client import generate_latest
from umbp_master_harness import (  # noqa: F401 - redis_pair, redis_cluster: fixtures
    DRAM,
    GIB,
    HBM,
    PeerSession,
    echo_from_threads,
    fast_settings,
    make_store,
    pb,
    pb_grpc,
    redis_cluster,
    redis_pair,
    uid,
)

from mori import _C
from mori.umbp.distributed.master_auth import SigningInterceptor, sign
from mori.umbp.distributed.master_server import MasterServer, cpp_server

CPP = cpp_server()  # mori.umbp._master_server, or None in a build without grpc++
SERVERS = ["python", pytest.param("cpp", marks=pytest.mark.skipif(CPP is None, reason="no grpc++"))]
pytestmark_cpp = pytest.mark.skipif(CPP is None, reason="no grpc++ in this build")


def test_the_build_has_the_cpp_server_where_grpcpp_is_installed():
    """Where scripts/setup.sh installed grpc++, protoc and hiredis (CI), the build must have found
    them: otherwise every "cpp" case here would skip and the grpcio server alone would be tested."""
    if not (os.path.exists("/usr/include/grpcpp/grpcpp.h") and shutil.which("protoc")):
        pytest.skip("grpc++ or protoc not installed here")
    assert CPP is not None, "grpc++ is installed but the build did not find it (pkg-config grpc++)"
    assert CPP.HAVE_NATIVE_ROUTES, "protoc and libprotobuf are installed but the native get path was not built"
    if os.path.exists("/usr/include/hiredis/hiredis.h"):
        assert CPP.HAVE_NATIVE_REDIS, "hiredis is installed but the native Redis get path was not built"


@pytest.mark.skipif(CPP is None, reason="this build has no grpc++")
def test_umbp_master_threads_sets_the_cpp_servers_workers(monkeypatch):
    """UMBP_MASTER_THREADS: the threads answering the grpc++ master's calls (at most the cores);
    below 1 it is refused, naming the setting."""
    monkeypatch.setenv("UMBP_MASTER_THREADS", "1")
    _C.core.reload_env()
    try:
        m = MasterServer("127.0.0.1:0", settings=fast_settings(), server="cpp")
        m.start()
        try:
            assert m._server.workers == 1
            peer = PeerSession(f"127.0.0.1:{m.port}", "node-t", {DRAM: (GIB, GIB)})  # one thread answers them all
            peer.heartbeat([("add", "k-t", DRAM, 4096)])
            stub = pb_grpc.UMBPMasterStub(peer.channel)
            assert list(stub.BatchLookup(pb.BatchLookupRequest(keys=["k-t", "absent"]), timeout=5).found) == [
                True,
                False,
            ]
            peer.close()
        finally:
            m.stop()
        monkeypatch.setenv("UMBP_MASTER_THREADS", "0")
        _C.core.reload_env()
        with pytest.raises(ValueError, match="UMBP_MASTER_THREADS"):
            MasterServer("127.0.0.1:0", settings=fast_settings(), server="cpp")
        monkeypatch.setenv("UMBP_MASTER_THREADS", "1")
        monkeypatch.setenv("UMBP_MASTER_INLINE_BYTES", "-2")
        _C.core.reload_env()
        with pytest.raises(ValueError, match="UMBP_MASTER_INLINE_BYTES"):
            MasterServer("127.0.0.1:0", settings=fast_settings(), server="cpp")
        monkeypatch.delenv("UMBP_MASTER_INLINE_BYTES")
        # Handler threads: auto is 4 where the process may run on 8 or more CPUs, else 2.
        for text, want in (("auto", 4 if len(os.sched_getaffinity(0)) >= 8 else 2), ("3", 3), ("0", 0)):
            monkeypatch.setenv("UMBP_MASTER_HANDLER_THREADS", text)
            _C.core.reload_env()
            assert MasterServer("127.0.0.1:0", settings=fast_settings(), server="cpp")._handler_threads == want
        for text in ("-1", "four"):
            monkeypatch.setenv("UMBP_MASTER_HANDLER_THREADS", text)
            _C.core.reload_env()
            with pytest.raises(ValueError, match="UMBP_MASTER_HANDLER_THREADS"):
                MasterServer("127.0.0.1:0", settings=fast_settings(), server="cpp")
    finally:
        monkeypatch.delenv("UMBP_MASTER_THREADS")
        monkeypatch.delenv("UMBP_MASTER_INLINE_BYTES", raising=False)
        monkeypatch.delenv("UMBP_MASTER_HANDLER_THREADS", raising=False)
        _C.core.reload_env()


def _master(kind: str, secret=None, store=None) -> MasterServer:
    m = MasterServer(
        "127.0.0.1:0", settings=fast_settings(hit_query_max_batch=8), secret=secret, server=kind, store=store
    )
    m.start()
    m.address = f"127.0.0.1:{m.port}"
    return m


def _outcome(fn):
    """A call's reply, or its failure as (code, details)."""
    try:
        return fn()
    except grpc.RpcError as e:
        return (e.code(), e.details())


def _script(address: str, rng: random.Random) -> list:
    """Calls of every kind, failures included; what each answered."""
    node = "node-a"
    peer = PeerSession(address, node, {DRAM: (GIB, GIB)}, peer_address="10.0.0.1:7")
    keys = [f"k{rng.getrandbits(64):016x}" for _ in range(64)]
    sizes = [rng.randrange(1, 1 << 20) for _ in keys]
    peer.heartbeat([("add", k, DRAM, s, i * 4096, rng.getrandbits(63)) for i, (k, s) in enumerate(zip(keys, sizes))])
    # A second node holds the first 10 keys in HBM, the faster tier: routed there unless excluded.
    other = PeerSession(address, "node-b", {HBM: (GIB, GIB)}, peer_address="10.0.0.2:7")
    other.heartbeat([("add", k, HBM, s) for k, s in zip(keys[:10], sizes)])
    other.close()
    stub = pb_grpc.UMBPMasterStub(peer.channel)
    unknown = peer.channel.unary_unary("/umbp.UMBPMaster/NoSuchRpc")
    misses = [f"miss-{i}" for i in range(8)]
    out = [
        _outcome(lambda: stub.BatchRouteGet(pb.BatchRouteGetRequest(keys=keys[:40]), timeout=5)),  # all hits
        _outcome(lambda: stub.BatchRouteGet(pb.BatchRouteGetRequest(keys=keys + misses), timeout=5)),
        _outcome(lambda: stub.RouteGet(pb.RouteGetRequest(key=keys[3]), timeout=5)),
        _outcome(lambda: stub.RouteGet(pb.RouteGetRequest(key=misses[0]), timeout=5)),
        _outcome(lambda: stub.BatchLookup(pb.BatchLookupRequest(keys=misses[:2] + keys[:2]), timeout=5)),
        _outcome(lambda: stub.RegisterClient(pb.RegisterClientRequest(node_id=""), timeout=5)),
        _outcome(lambda: stub.RegisterClient(pb.RegisterClientRequest(node_id=node), timeout=5)),
        _outcome(lambda: stub.GetExternalKvHitCounts(pb.GetExternalKvHitCountsRequest(hashes=keys[:9]), timeout=5)),
        _outcome(lambda: stub.BatchRoutePut(pb.BatchRoutePutRequest(keys=["x"], block_sizes=[]), timeout=5)),
        _outcome(lambda: unknown(b"", timeout=5)),
        _outcome(lambda: peer.channel.unary_unary("/umbp.UMBPMaster/RouteGet")(b"\xff\xff\xff", timeout=5)),
        _outcome(
            lambda: stub.BatchRouteGet(pb.BatchRouteGetRequest(keys=keys[:40], exclude_nodes=["node-b"]), timeout=5)
        ),
        _outcome(lambda: stub.RouteGet(pb.RouteGetRequest(key=keys[0], exclude_nodes=["node-b"]), timeout=5)),
        # A put routed and not yet reported: a route of its key names the put's target (the
        # Python handler's answer, also under grpc++: the native path leaves it), the other
        # misses stay misses; once reported it is an ordinary hit again.
        _outcome(
            lambda: stub.BatchRoutePut(
                pb.BatchRoutePutRequest(node_id=node, keys=["pend"], block_sizes=[777]), timeout=5
            )
        ),
        _outcome(lambda: stub.BatchRouteGet(pb.BatchRouteGetRequest(keys=["pend", misses[1], keys[20]]), timeout=5)),
        _outcome(lambda: stub.BatchLookup(pb.BatchLookupRequest(keys=[misses[3], "pend", keys[21]]), timeout=5)),
        # Puts of every outcome in one batch: a key in the index, a key twice (the second exists),
        # the pending put again (its target once more), one no node has room for (the writer
        # keeps it: pending at the writer), and new keys that spread by the room routed so far.
        _outcome(
            lambda: stub.BatchRoutePut(
                pb.BatchRoutePutRequest(
                    node_id=node,
                    keys=[keys[5], "p1", "p1", "pend", "huge", "p2", "p3"],
                    block_sizes=[10, 600 << 20, 600 << 20, 777, 1 << 40, 600 << 20, 600 << 20],
                ),
                timeout=5,
            )
        ),
        # node-b excluded: the pending put's key goes elsewhere (node-a).
        _outcome(
            lambda: stub.BatchRoutePut(
                pb.BatchRoutePutRequest(
                    node_id=node, keys=["pend", "p4"], block_sizes=[777, 1], exclude_nodes=["node-b"]
                ),
                timeout=5,
            )
        ),
        _outcome(lambda: stub.BatchRouteGet(pb.BatchRouteGetRequest(keys=["huge", "p3"]), timeout=5)),
    ]
    peer.heartbeat([("add", "pend", DRAM, 777, 1 << 30, 99)])
    out.append(_outcome(lambda: stub.BatchRouteGet(pb.BatchRouteGetRequest(keys=[misses[2], "pend"]), timeout=5)))
    peer.close()
    return out


@pytest.mark.skipif(CPP is None or not CPP.HAVE_NATIVE_REDIS, reason="no grpc++ or hiredis in this build")
@pytest.mark.parametrize(
    "uri, served",
    [
        ("redis://127.0.0.1:6379", True),
        ("redis://user:pw@host:7000/2", True),
        ("unix:///run/redis/redis.sock", True),
        ("unix://user:pw@/tmp/dir@x/redis.sock?db=3", True),
        ("unix://relative.sock", "must be absolute"),
        ("unix://", "must be absolute"),
        ("unix:///tmp/redis.sock?password=x", "other than db=N"),
        ("unix://user:s3cret@/tmp/redis.sock?timeout=1", "other than db=N"),
        ("redis://user:s3cret@host:6379?ssl=1", "options are left to Python"),
        ("unix:///tmp/redis.sock?db=x", "other than db=N"),
        ("unix:///tmp/re%40dis.sock", "escaped paths"),
        ("rediss://host:6379", "only redis:// and unix://"),
    ],
)
def test_native_redis_path_reads_tcp_and_unix_socket_uris(uri, served):
    """The C++ get path reads redis-py's plain URI forms, TCP and unix socket; any other form is
    refused with a ValueError naming the URI, its password shown as *** (the store's Python client
    then serves the calls, and logs the reason)."""
    kw = dict(
        password="",
        shard_prefixes=["{t:b0}"],
        script="return 1",
        sha="0" * 40,
        tier_priority=[0, 1, 2],
        connect_timeout_s=1.0,
        socket_timeout_s=1.0,
        pool_size=2,
    )
    if served is True:
        CPP.RedisRoutes(uris=[uri], **kw)  # constructing connects nothing
        return
    with pytest.raises(ValueError, match=served) as err:
        CPP.RedisRoutes(uris=[uri], **kw)
    assert uri.replace("s3cret", "***") in str(err.value) and "s3cret" not in str(err.value)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", ["memory", "redis-shards", "redis-unix", "redis-cluster"])
def test_both_servers_answer_alike(backend, request, monkeypatch):
    """The same calls, answered by grpcio's server (all Python) and by grpc++ (the get path in
    C++ over the in-memory index, or over two Redis endpoints or a Redis Cluster through hiredis
    and the store's own Lua script; or over one Redis's unix socket): the same replies, codes,
    details and metrics. And by grpc++
    with every native call handed to the handler threads (UMBP_MASTER_INLINE_BYTES=0; by default
    only batches larger than 1 KiB go there)."""
    pair = request.getfixturevalue("redis_pair") if backend in ("redis-shards", "redis-unix") else None
    cluster = request.getfixturevalue("redis_cluster") if backend == "redis-cluster" else None
    seed = random.randrange(1 << 30)
    answers = {}
    scraped = {}
    for kind in ("python", "cpp", "cpp-handed") if CPP is not None else ("python",):
        monkeypatch.setenv("UMBP_MASTER_INLINE_BYTES", "0" if kind == "cpp-handed" else "1024")
        _C.core.reload_env()
        m = _master(kind.split("-")[0], store=make_store(backend, pair, cluster))
        try:
            native = kind != "python" and CPP.HAVE_NATIVE_ROUTES and (backend == "memory" or CPP.HAVE_NATIVE_REDIS)
            assert (m.native_routes is not None) == native
            answers[kind] = _script(m.address, random.Random(seed))
            errors = {k[0]: v for k, v in m.metrics.rpc_errors._metrics.items()}
            assert errors.get("RegisterClient") is not None, "the handlers' error counter saw the aborts"
            # The routed keys are leased, whichever path routed them: eviction skips them.
            candidates = {c.key for c in m.store.eviction_candidates("node-a", DRAM, time.time())}
            assert not candidates, f"{kind}: every key was routed, so leased: {sorted(candidates)[:3]}"
            text = generate_latest(m.metrics.registry).decode()
            scraped[kind] = [
                line
                for line in text.splitlines()
                if line.startswith(
                    (
                        "mori_umbp_client_batch_route_get_total",
                        "mori_umbp_client_route_get_total",
                        "mori_umbp_route_get_miss_total",
                        'mori_umbp_master_rpc_latency_seconds_count{rpc="BatchRouteGet"}',
                        'mori_umbp_master_rpc_latency_seconds_count{rpc="RouteGet"}',
                        'mori_umbp_master_rpc_latency_seconds_count{rpc="BatchLookup"}',
                        'mori_umbp_master_rpc_latency_seconds_count{rpc="BatchRoutePut"}',
                        "mori_umbp_client_batch_route_put_total",
                        "mori_umbp_route_put_outcome_total",
                    )
                )
            ]
            if native:  # in C++: 4 BatchRouteGet (hits, misses, excluded, after the put's report),
                # 3 RouteGet (hit, miss, excluded), the 2 BatchLookups and the 3 well-formed
                # BatchRoutePuts (existence from the index, or by EXISTS over Redis); not the
                # unparsable one, nor the two naming pending puts
                assert m.native_routes.answered == 12
        finally:
            m.stop(0)
            monkeypatch.delenv("UMBP_MASTER_INLINE_BYTES")
            _C.core.reload_env()
    # node-b: 10 + 10 HBM hits and the pending put (its put's target, the most available);
    # node-a: 30 + 54 + 40 (node-b excluded) + keys[20] + the two values it kept + the put once
    # node-a reported it
    assert 'mori_umbp_client_batch_route_get_total{node="node-a"} 128.0' in scraped["python"]
    assert 'mori_umbp_client_batch_route_get_total{node="node-b"} 21.0' in scraped["python"]
    assert "mori_umbp_route_get_miss_total 11.0" in scraped["python"]
    assert 'mori_umbp_client_route_get_total{node="node-a"} 1.0' in scraped["python"]
    assert 'mori_umbp_client_route_get_total{node="node-b"} 1.0' in scraped["python"]
    assert 'mori_umbp_master_rpc_latency_seconds_count{rpc="RouteGet"} 3.0' in scraped["python"]
    assert 'mori_umbp_master_rpc_latency_seconds_count{rpc="BatchRouteGet"} 6.0' in scraped["python"]
    assert 'mori_umbp_master_rpc_latency_seconds_count{rpc="BatchLookup"} 2.0' in scraped["python"]
    # Puts by node: node-b pend, p1 and pend again; node-a p2, then pend and p4 (node-b excluded).
    # Outcomes over the four calls (the malformed one counts its latency only).
    assert 'mori_umbp_client_batch_route_put_total{node="node-b"} 3.0' in scraped["python"]
    assert 'mori_umbp_client_batch_route_put_total{node="node-a"} 3.0' in scraped["python"]
    assert 'mori_umbp_route_put_outcome_total{outcome="routed"} 5.0' in scraped["python"]
    assert 'mori_umbp_route_put_outcome_total{outcome="already_exists"} 2.0' in scraped["python"]
    assert 'mori_umbp_route_put_outcome_total{outcome="unavailable"} 2.0' in scraped["python"]
    assert 'mori_umbp_master_rpc_latency_seconds_count{rpc="BatchRoutePut"} 4.0' in scraped["python"]
    for kind in ("cpp", "cpp-handed"):
        if kind in scraped:
            assert sorted(scraped[kind]) == sorted(scraped["python"]), f"{kind}: the counts are the Python handler's"
    got = answers["python"]
    assert [n.node_id for n in got[0].nodes] == ["node-b", "node-a"]
    assert list(got[0].node_ref) == [1] * 10 + [2] * 30 and list(got[0].tier) == [HBM] * 10 + [DRAM] * 30
    assert len(got[0].offset) == 40 and list(got[11].node_ref) == [1] * 40 and got[12].node_id == "node-a"
    routed = got[1]
    assert len(routed.node_ref) == 72 and list(routed.node_ref[64:]) == [0] * 8
    assert [n.peer_address for n in routed.nodes] == ["10.0.0.2:7", "10.0.0.1:7"]
    assert got[2].found and got[2].peer_address == "10.0.0.2:7" and not got[3].found
    assert got[5] == (grpc.StatusCode.INVALID_ARGUMENT, "RegisterClient: node_id must not be empty")
    assert got[6][0] == grpc.StatusCode.ALREADY_EXISTS
    assert got[7][0] == grpc.StatusCode.INVALID_ARGUMENT and "UMBP_HIT_QUERY_MAX_BATCH" in got[7][1]
    assert got[9][0] == grpc.StatusCode.UNIMPLEMENTED
    assert got[10][0] == grpc.StatusCode.INTERNAL
    put_to = got[13].entries[0].node_id
    assert got[13].entries[0].outcome == pb.ROUTE_PUT_OUTCOME_ROUTED and put_to == "node-b"
    pend = got[14]
    assert [pend.nodes[r - 1].node_id if r else None for r in pend.node_ref] == [put_to, None, "node-a"]
    assert list(pend.size)[:2] == [777, 0] and list(pend.checksum)[:2] == [0, 0]
    assert list(got[15].found) == [False, True, True]  # the pending put counts as found
    # The batch of every outcome; then node-b excluded.
    exists, routed_, unavailable = pb.ROUTE_PUT_OUTCOME_ALREADY_EXISTS, pb.ROUTE_PUT_OUTCOME_ROUTED, 0
    batch = got[16].entries
    # p1 takes 600 MiB of node-b's 1 GiB HBM, p2 then goes to node-a's DRAM, and p3 fits neither.
    assert [e.outcome for e in batch] == [exists, routed_, exists, routed_, unavailable, routed_, unavailable]
    assert [e.node_id for e in batch] == ["", "node-b", "", put_to, "", "node-a", ""]
    assert [e.tier for e in batch] == [0, HBM, 0, HBM, 0, DRAM, 0]
    assert batch[1].peer_address == "10.0.0.2:7" and batch[5].peer_address == "10.0.0.1:7"
    assert [(e.outcome, e.node_id) for e in got[17].entries] == [(routed_, "node-a"), (routed_, "node-a")]
    kept = got[18]  # the values no node had room for are routed to their writer, which kept them
    assert [kept.nodes[r - 1].node_id if r else None for r in kept.node_ref] == ["node-a", "node-a"]
    after = got[19]
    assert list(after.node_ref)[0] == 0 and after.nodes[after.node_ref[1] - 1].node_id == "node-a"
    assert list(after.size) == [0, 777] and list(after.offset) == [0, 1 << 30] and list(after.checksum) == [0, 99]
    for kind in ("cpp", "cpp-handed"):
        if kind in answers:
            assert answers[kind] == got, f"{kind}, seed {seed}"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", SERVERS)
def test_signed_calls_under_both_servers(kind):
    secret = bytes.fromhex(_C.core.random_secret_hex())
    m = _master(kind, secret=secret)
    try:
        ch = grpc.insecure_channel(m.address)
        stub = pb_grpc.UMBPMasterStub(ch)
        req = pb.BatchLookupRequest(keys=[uid("k")])
        md = sign(secret, "/umbp.UMBPMaster/BatchLookup", req.SerializeToString())
        assert list(stub.BatchLookup(req, metadata=md, timeout=5).found) == [False]
        refused = [
            (None, "unsigned"),
            (md, "replayed"),  # the same nonce again
            (sign(secret, "/umbp.UMBPMaster/RouteGet", req.SerializeToString()), "bad signature"),
            (sign(os.urandom(32), "/umbp.UMBPMaster/BatchLookup", req.SerializeToString()), "bad signature"),
        ]
        for metadata, why in refused:
            with pytest.raises(grpc.RpcError) as err:
                stub.BatchLookup(req, metadata=metadata, timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED and why in err.value.details()
        assert m.metrics.auth_refused._value.get() == len(refused)
        ch.close()
    finally:
        m.stop(0)


@pytestmark_cpp
@pytest.mark.timeout(60)
def test_signed_route_gets_are_answered_natively():
    """With a job secret the grpc++ server checks the signature in C++ and answers a signed
    BatchRouteGet/RouteGet hit without Python; refusals are the same, whichever path."""
    if not CPP.HAVE_NATIVE_ROUTES:
        pytest.skip("no native get path in this build")
    secret = bytes.fromhex(_C.core.random_secret_hex())
    m = _master("cpp", secret=secret)
    try:
        keys = [uid("k") for _ in range(16)]
        ch = grpc.insecure_channel(m.address)
        signed = pb_grpc.UMBPMasterStub(grpc.intercept_channel(ch, SigningInterceptor(secret)))
        node = uid("n")
        caps = [pb.TierCapacity(tier=DRAM, total_capacity_bytes=GIB, available_capacity_bytes=GIB)]
        signed.RegisterClient(pb.RegisterClientRequest(node_id=node, peer_address="10.0.0.9:7", tier_capacities=caps))
        events = [
            pb.KvEvent(kind=pb.KvEvent.ADD, key=k, tier=DRAM, size=100 + i, offset=i * 4096, checksum=1 + i)
            for i, k in enumerate(keys)
        ]
        signed.Heartbeat(pb.HeartbeatRequest(node_id=node, bundles=[pb.EventBundle(seq=1, events=events)]))
        stub = pb_grpc.UMBPMasterStub(ch)
        before = m.native_routes.answered
        req = pb.BatchRouteGetRequest(keys=keys)
        reply = stub.BatchRouteGet(
            req, metadata=sign(secret, "/umbp.UMBPMaster/BatchRouteGet", req.SerializeToString())
        )
        assert list(reply.size) == [100 + i for i in range(16)] and list(reply.checksum) == [1 + i for i in range(16)]
        one = pb.RouteGetRequest(key=keys[3])
        got = stub.RouteGet(one, metadata=sign(secret, "/umbp.UMBPMaster/RouteGet", one.SerializeToString()))
        assert got.found and got.size == 103 and got.peer_address == "10.0.0.9:7"
        assert m.native_routes.answered == before + 2, "both signed hits were answered in C++"
        md = sign(secret, "/umbp.UMBPMaster/BatchRouteGet", req.SerializeToString())
        stub.BatchRouteGet(req, metadata=md)
        refused0 = m.metrics.auth_refused._value.get()
        for metadata, why in (
            (md, "replayed call"),
            (None, "unsigned"),
            (sign(os.urandom(32), "/umbp.UMBPMaster/BatchRouteGet", req.SerializeToString()), "bad signature"),
        ):
            with pytest.raises(grpc.RpcError) as err:
                stub.BatchRouteGet(req, metadata=metadata, timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED and why in err.value.details()
        assert m.metrics.auth_refused._value.get() == refused0 + 3
        assert m.native_routes.answered == before + 3, "refused calls were not answered"
        ch.close()
    finally:
        m.stop(0)


@pytestmark_cpp
@pytest.mark.timeout(60)
def test_cpp_server_passes_calls_through():
    seen = []

    def handler(method, request, metadata, peer, remaining):
        seen.append((method, metadata, peer, remaining))
        if method == "/t.T/Fail":
            return 9, "failed precondition: told so", b""
        if method == "/t.T/Raise":
            raise RuntimeError("a dispatcher bug")
        return 0, "", request[::-1]

    server = CPP.MasterGrpcServer("127.0.0.1:0", handler, workers=4)
    port = server.start()
    try:
        ch = grpc.insecure_channel(
            f"127.0.0.1:{port}",
            options=[("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)],
        )
        echo = ch.unary_unary("/t.T/Echo")
        body = os.urandom(9 << 20)  # past grpc's 4 MiB default limit
        assert echo(body, timeout=10, metadata=[("x-a", "1"), ("x-b-bin", b"\x00\xff")]) == body[::-1]
        method, metadata, peer, remaining = seen[-1]
        assert method == "/t.T/Echo" and ("x-a", "1") in metadata and ("x-b-bin", b"\x00\xff") in metadata
        assert peer.startswith("ipv4:127.0.0.1:") and 0 < remaining <= 10
        assert echo(b"", timeout=5) == b""
        echo(b"x")  # no deadline
        assert seen[-1][3] is None
        with pytest.raises(grpc.RpcError) as err:
            ch.unary_unary("/t.T/Fail")(b"", timeout=5)
        assert (err.value.code(), err.value.details()) == (
            grpc.StatusCode.FAILED_PRECONDITION,
            "failed precondition: told so",
        )
        with pytest.raises(grpc.RpcError) as err:
            ch.unary_unary("/t.T/Raise")(b"", timeout=5)
        assert err.value.code() == grpc.StatusCode.UNKNOWN and "a dispatcher bug" in err.value.details()

        # Many callers at once, each reply its own request's.
        errors = echo_from_threads(lambda b: echo(b, timeout=10))
        assert not errors
        ch.close()
    finally:
        server.stop(0)
    with pytest.raises(Exception, match="cannot listen"):  # the port is not ours any more... or is taken
        CPP.MasterGrpcServer("256.0.0.1:1", handler).start()


@pytestmark_cpp
@pytest.mark.timeout(60)
def test_cpp_server_stop_finishes_calls_in_flight():
    started = threading.Event()

    def slow(method, request, metadata, peer, remaining):
        started.set()
        time.sleep(0.5)
        return 0, "", b"done"

    server = CPP.MasterGrpcServer("127.0.0.1:0", slow, workers=2)
    port = server.start()
    ch = grpc.insecure_channel(f"127.0.0.1:{port}")
    result = {}
    t = threading.Thread(
        target=lambda: result.setdefault("r", _outcome(lambda: ch.unary_unary("/t.T/S")(b"", timeout=10)))
    )
    t.start()
    assert started.wait(10)
    waiter = threading.Thread(target=server.wait)
    waiter.start()
    server.stop(5)
    waiter.join(5)
    assert not waiter.is_alive(), "wait() returns once stopped"
    t.join(10)
    assert result["r"] == b"done"
    ch.close()
    server.stop(0)  # again: nothing


@pytestmark_cpp
@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", SERVERS)
def test_native_client_channel_answers_as_grpcio(kind):
    """The clients' native channel (UMBP_GRPC_CLIENT=cpp: grpc++, signed in C++) and grpcio's
    stubs get the same replies, codes and details from either master server, signed or not; a
    wrong secret is refused, a dead server is UNAVAILABLE, a deadline is DEADLINE_EXCEEDED within
    it, and future() calls complete."""
    from mori.umbp.distributed.grpc_channels import CallFailed, Channel

    secret = bytes.fromhex(_C.core.random_secret_hex())
    m = _master(kind, secret=secret)
    services = [(pb_grpc.UMBPMasterStub, pb.DESCRIPTOR.services_by_name["UMBPMaster"], pb)]
    try:
        peer = PeerSession(m.address, "node-a", {DRAM: (GIB, GIB)}, peer_address="10.0.0.1:7", secret=secret)
        keys = [uid("k") for _ in range(20)]
        peer.heartbeat([("add", k, DRAM, 100 + i, i * 4096, 7 + i) for i, k in enumerate(keys)])
        outcomes = {}
        for client in ("python", "cpp"):
            ch = Channel(m.address, services, secret=secret, kind=client)
            assert ch.kind == client
            stub = ch.stubs[0]
            outcomes[client] = [
                _outcome(lambda: stub.BatchRouteGet(pb.BatchRouteGetRequest(keys=keys + ["miss"]), timeout=5)),
                _outcome(lambda: stub.RouteGet(pb.RouteGetRequest(key=keys[5]), timeout=5)),
                _outcome(lambda: stub.BatchLookup(pb.BatchLookupRequest(keys=["miss", keys[0]]), timeout=5)),
                _outcome(lambda: stub.RegisterClient(pb.RegisterClientRequest(node_id=""), timeout=5)),
                _outcome(lambda: stub.BatchRoutePut(pb.BatchRoutePutRequest(keys=["x"], block_sizes=[]), timeout=5)),
                _outcome(lambda: stub.BatchLookup.future(pb.BatchLookupRequest(keys=[keys[1]]), timeout=5).result()),
            ]
            ch.close()
        got = outcomes["cpp"]
        assert list(got[0].size) == [100 + i for i in range(20)] + [0] and list(got[0].checksum)[:20] == [
            7 + i for i in range(20)
        ]
        assert got[1].found and got[1].peer_address == "10.0.0.1:7" and list(got[2].found) == [False, True]
        assert got[3] == (grpc.StatusCode.INVALID_ARGUMENT, "RegisterClient: node_id must not be empty")
        assert got[4][0] == grpc.StatusCode.INVALID_ARGUMENT and list(got[5].found) == [True]
        assert got == outcomes["python"]
        # A channel used in a forked child says so instead of hanging in grpc++.
        stub = Channel(m.address, services, secret=secret, kind="cpp").stubs[0]
        stub.BatchLookup(pb.BatchLookupRequest(keys=[keys[0]]), timeout=5)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                stub.BatchLookup(pb.BatchLookupRequest(keys=[keys[0]]), timeout=5)
                os.write(w, b"answered")
            except RuntimeError as exc:
                os.write(w, str(exc).encode()[:500])
            os._exit(0)
        os.close(w)
        said = os.read(r, 1000).decode()
        os.waitpid(pid, 0)
        os.close(r)
        assert "forked child" in said, said
        for wrong in (os.urandom(32), None):
            stub = Channel(m.address, services, secret=wrong, kind="cpp").stubs[0]
            with pytest.raises(CallFailed) as err:
                stub.BatchLookup(pb.BatchLookupRequest(keys=[keys[0]]), timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert ("bad signature" if wrong else "unsigned") in err.value.details()
        peer.close()
    finally:
        m.stop(0)
    stub = Channel(m.address, services, secret=secret, kind="cpp").stubs[0]  # nobody listens now
    t0 = time.monotonic()
    with pytest.raises(CallFailed) as err:
        stub.BatchLookup(pb.BatchLookupRequest(keys=["k"]), timeout=2)
    assert err.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    assert time.monotonic() - t0 < 3

    server = CPP.MasterGrpcServer("127.0.0.1:0", lambda *a: (time.sleep(1.0), (0, "", b""))[1], workers=2)
    port = server.start()
    try:
        stub = Channel(f"127.0.0.1:{port}", services, kind="cpp").stubs[0]
        t0 = time.monotonic()
        with pytest.raises(CallFailed) as err:
            stub.BatchLookup(pb.BatchLookupRequest(keys=["k"]), timeout=0.2)
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED and time.monotonic() - t0 < 0.9
    finally:
        server.stop(0)


def _maps_after(code: str) -> str:
    """/proc/self/maps of a fresh interpreter after running ``code``."""
    out = subprocess.run(
        [sys.executable, "-c", code + "\nprint(open('/proc/self/maps').read())"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.mark.timeout(240)
def test_import_mori_loads_no_grpcpp_and_the_server_loads_with_torch_and_grpcio():
    """grpc++ and protobuf live in mori.umbp._master_server alone: `import mori` and its apps
    (EP, shmem, IO, the UMBP client) never map them. The server's module loads before grpcio
    (after it is how every master here imports them); with torch too (a master process may
    import all three), in both orders, when MORI_TEST_ALL_IMPORT_ORDERS=1 (torch's import costs
    CI 6-12 s per process)."""
    # One interpreter: mori's packages first (their maps checked), then the server's module and
    # grpcio. (mori.ep imports torch, 5 s here: it joins with the torch orders.)
    apps = "import mori, mori.shmem, mori.io, mori.umbp\n"
    check = "m = open('/proc/self/maps').read(); assert 'libgrpc++' not in m and 'libprotobuf' not in m, m\n"
    server = "from mori.umbp import _master_server as s; assert s.worker_threads(16) >= 2\n"
    if CPP is None:
        _maps_after(apps + check)
        pytest.skip("no grpc++ in this build")
    orders = [apps + check + server + "import grpc\n"]
    if os.environ.get("MORI_TEST_ALL_IMPORT_ORDERS") == "1" and importlib.util.find_spec("torch"):
        torch = "import torch; torch.ones(2).sum()\n"
        apps = apps.replace("mori.shmem", "mori.ep, mori.shmem")
        orders = [apps + check + torch + "import grpc\n" + server, apps + check + server + "import grpc\n" + torch]
    for code in orders:
        assert "libgrpc++" in _maps_after(code)
