# SPDX-License-Identifier: MIT
"""The master as advisor over gRPC: heartbeat-shipped events, seq gaps and full syncs, put
routing (algorithms x affinities, dedup) and tier-priority get routing, dead clients dropped."""

from __future__ import annotations

import collections
import random
import time

import grpc
import pytest
from dist_harness import start_workers
from umbp_master_harness import redis_pair  # noqa: F401 - fixture
from umbp_master_harness import (
    DRAM,
    GIB,
    HBM,
    SSD,
    PeerSession,
    fast_settings,
    make_store,
    pb,
    pb_grpc,
    running_master,
    uid,
)

MIB = 1 << 20


@pytest.fixture(params=["memory", "redis"])
def backend(request, redis_pair):  # noqa: F811
    return lambda: make_store(request.param, redis_pair)


def _stub(address):
    return pb_grpc.UMBPMasterStub(grpc.insecure_channel(address))


def _batch_get(stub, keys, exclude=()):
    r = stub.BatchRouteGet(pb.BatchRouteGetRequest(node_id="reader", keys=keys, exclude_nodes=list(exclude)), timeout=5)
    nodes = [(n.node_id, n.peer_address) for n in r.nodes]
    return [
        None if ref == 0 else (nodes[ref - 1][0], nodes[ref - 1][1], t, s)
        for ref, t, s in zip(r.node_ref, r.tier, r.size)
    ]


def test_events_route_gets_by_tier_priority(backend):
    with running_master(store=backend()) as m:
        a = PeerSession(m.address, uid("a"), {DRAM: (GIB, GIB)})
        b = PeerSession(m.address, uid("b"), {HBM: (GIB, GIB), DRAM: (GIB, GIB)})
        rng = random.Random()
        sizes = {uid("k"): rng.randrange(1, 8 * MIB) for _ in range(12)}
        keys = list(sizes)
        assert a.heartbeat([("add", k, DRAM, sizes[k]) for k in keys]).acked_seq == 1
        assert (
            b.heartbeat(
                [("add", k, HBM, sizes[k]) for k in keys[:4]] + [("add", keys[4], SSD, sizes[keys[4]])]
            ).acked_seq
            == 1
        )
        stub = _stub(m.address)
        got = _batch_get(stub, keys + [uid("missing")])
        assert got[-1] is None
        for k, g in zip(keys[:4], got[:4]):
            assert g == (b.node_id, b.peer_address, HBM, sizes[k]), "HBM beats DRAM"
        assert got[4] == (a.node_id, a.peer_address, DRAM, sizes[keys[4]]), "DRAM beats SSD"
        for k, g in zip(keys[5:], got[5:12]):
            assert g == (a.node_id, a.peer_address, DRAM, sizes[k])
        assert _batch_get(stub, keys[:1], exclude=[b.node_id])[0][0] == a.node_id
        one = stub.RouteGet(pb.RouteGetRequest(key=keys[0], node_id="r"), timeout=5)
        assert (one.found, one.node_id, one.tier, one.size, one.peer_address) == (
            True,
            b.node_id,
            HBM,
            sizes[keys[0]],
            b.peer_address,
        )
        assert not stub.RouteGet(pb.RouteGetRequest(key=uid("nope")), timeout=5).found
        found = stub.BatchLookup(pb.BatchLookupRequest(keys=[keys[3], uid("x")]), timeout=5).found
        assert list(found) == [True, False]


def test_first_reads_get_each_dram_value_place(backend):
    """BatchRouteGet hands out the arena offset and checksum the owner's ADD events gave (from
    Redis as from memory: a first read is one master RPC and the read), 0s where not known."""
    with running_master(store=backend()) as m:
        a = PeerSession(m.address, uid("a"), {DRAM: (GIB, GIB)})
        rng = random.Random()
        keys = [uid("k") for _ in range(16)]
        places = {
            k: (rng.randrange(1, 8 * MIB), rng.randrange(1, 1 << 30) * 64, rng.randrange(1, 1 << 64)) for k in keys[:-1]
        }
        places[keys[-1]] = (rng.randrange(1, 8 * MIB), 0, 0)
        assert a.heartbeat([("add", k, DRAM, *places[k]) for k in keys]).acked_seq == 1
        r = _stub(m.address).BatchRouteGet(pb.BatchRouteGetRequest(node_id="reader", keys=keys + [uid("x")]), timeout=5)
        assert [(n.node_id, n.peer_address) for n in r.nodes] == [(a.node_id, a.peer_address)]
        assert list(zip(r.node_ref, r.tier, r.size, r.offset, r.checksum)) == (
            [(1, DRAM, *places[k]) for k in keys] + [(0, 0, 0, 0, 0)]
        )


@pytest.mark.timeout(120)
def test_first_read_through_a_redis_master_needs_no_resolve(redis_pair):  # noqa: F811
    """Two workers and a Redis-backed master: values a put (pulled by b, the larger) are read back
    by a at the places b's ADD events gave, through Redis: no BatchResolveKeys, bytes checked."""
    with running_master(store=make_store("redis", redis_pair)) as m:
        a, b = start_workers(
            dict(master=m.address, node_id=uid("a"), dram=16 << 20),
            dict(master=m.address, node_id=uid("b"), dram=160 << 20),
            # Not a test of deadlines: a first contact on a loaded 2-core box may take over 1 s.
            env={"UMBP_LOOKUP_TIMEOUT_MS": "5000"},
        )
        try:
            keys = [uid("k") for _ in range(6)]
            seed = random.randrange(1 << 30)
            before = a.ask("stats")["stats"]
            assert a.ask("put", keys=keys, size=96 << 10, seed=seed)["ok"] == [True] * 6
            b.ask("heartbeat")  # b's ADD events, with each value's place, reach Redis now
            got = a.ask("get", keys=keys, size=96 << 10, seed=seed)
            assert got["right"] == [True] * 6
            after = a.ask("stats")["stats"]
            why = f"a: {a.moved_since(before)}\nb's log:\n{b.stderr_so_far()[-3000:]}"
            assert after["pulled_puts"] == before["pulled_puts"] + 6, why
            assert after["routed_location_reads"] == before["routed_location_reads"] + 6, why
            assert after["routed_location_stale"] == before["routed_location_stale"]
        finally:
            a.close()
            b.close()


def test_seq_gap_asks_for_full_sync(backend):
    with running_master(store=backend()) as m:
        a = PeerSession(m.address, uid("a"), {DRAM: (GIB, GIB)})
        k1, k2, k3 = uid("k"), uid("k"), uid("k")
        a.heartbeat([("add", k1, DRAM, 10)])
        r = a.heartbeat([("add", k2, DRAM, 20)], seq=3)  # bundle 2 was lost
        assert r.request_full_sync and r.acked_seq == 1
        stub = _stub(m.address)
        assert list(stub.BatchLookup(pb.BatchLookupRequest(keys=[k1, k2]), timeout=5).found) == [True, False]
        r = a.heartbeat([("add", k2, DRAM, 20), ("add", k3, DRAM, 30)], seq=0, full_sync=True, baseline=3)
        assert not r.request_full_sync and r.acked_seq == 3
        assert list(stub.BatchLookup(pb.BatchLookupRequest(keys=[k1, k2, k3]), timeout=5).found) == [False, True, True]
        unknown = stub.Heartbeat(pb.HeartbeatRequest(node_id=uid("ghost")), timeout=5)
        assert unknown.status == pb.CLIENT_STATUS_UNKNOWN


def test_batch_route_put_dedup_and_most_available(backend):
    with running_master(store=backend()) as m:
        small = PeerSession(m.address, uid("small"), {DRAM: (GIB, 100 * MIB)})
        big = PeerSession(m.address, uid("big"), {DRAM: (GIB, 300 * MIB)})
        held = uid("held")
        small.heartbeat([("add", held, DRAM, MIB)])
        stub = _stub(m.address)
        fresh = [uid("p") for _ in range(6)]
        r = stub.BatchRoutePut(
            pb.BatchRoutePutRequest(
                node_id="w", keys=[held] + fresh + [fresh[0]], block_sizes=[MIB] + [50 * MIB] * 6 + [MIB]
            ),
            timeout=5,
        )
        outcomes = [e.outcome for e in r.entries]
        assert outcomes[0] == pb.ROUTE_PUT_OUTCOME_ALREADY_EXISTS
        assert outcomes[-1] == pb.ROUTE_PUT_OUTCOME_ALREADY_EXISTS, "a key twice in one batch is routed once"
        targets = [e.node_id for e in r.entries[1:7]]
        assert all(o == pb.ROUTE_PUT_OUTCOME_ROUTED for o in outcomes[1:7])
        assert all(e.tier == DRAM and e.peer_address for e in r.entries[1:7])
        # 300 MiB vs 100 MiB free, 50 MiB each, most-available first: big, big, big, big, then tie-break
        assert targets[:4] == [big.node_id] * 4
        assert collections.Counter(targets) == {big.node_id: 5, small.node_id: 1}
        # a second writer of a routed (not yet committed) key is sent to the same node
        again = stub.RoutePut(pb.RoutePutRequest(key=fresh[2], node_id="w2", block_size=50 * MIB), timeout=5)
        assert (again.outcome, again.node_id) == (pb.ROUTE_PUT_OUTCOME_ROUTED, targets[2])
        # no room anywhere
        full = stub.RoutePut(pb.RoutePutRequest(key=uid("huge"), node_id="w", block_size=2 * GIB), timeout=5)
        assert full.outcome == pb.ROUTE_PUT_OUTCOME_UNAVAILABLE and full.node_id == ""
        # HBM before DRAM
        hbm = PeerSession(m.address, uid("hbm"), {HBM: (GIB, 10 * MIB)})
        r = stub.RoutePut(pb.RoutePutRequest(key=uid("h"), node_id="w", block_size=MIB), timeout=5)
        assert (r.node_id, r.tier) == (hbm.node_id, HBM)
        r = stub.RoutePut(
            pb.RoutePutRequest(key=uid("h"), node_id="w", block_size=MIB, exclude_nodes=[hbm.node_id]), timeout=5
        )
        assert r.tier == DRAM
        with pytest.raises(grpc.RpcError) as err:
            stub.BatchRoutePut(pb.BatchRoutePutRequest(keys=["a", "b"], block_sizes=[1]), timeout=5)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_routed_put_counts_until_its_heartbeat_and_after(backend):
    """A 4 MiB HBM that took a 3 MiB put has room for no second one: before the owner's
    heartbeat (the bytes routed there count) and just after it (the capacity it reported counts,
    not the record the master's client cache holds from before it); the next ones go to DRAM."""
    with running_master(store=backend()) as m:
        a = PeerSession(m.address, uid("a"), {DRAM: (8 * MIB, 8 * MIB)})
        b = PeerSession(m.address, uid("b"), {HBM: (4 * MIB, 4 * MIB), DRAM: (64 * MIB, 64 * MIB)})
        stub = _stub(m.address)
        keys = [uid("k") for _ in range(3)]

        def route(key):
            r = stub.RoutePut(pb.RoutePutRequest(key=key, node_id=a.node_id, block_size=3 * MIB), timeout=5)
            return r.node_id, r.tier

        assert route(keys[0]) == (b.node_id, HBM)
        assert route(keys[1]) == (b.node_id, DRAM)  # before the heartbeat: 1 MiB of HBM left
        b.caps[HBM] = (4 * MIB, MIB)  # what b reports once the first value is in
        b.caps[DRAM] = (64 * MIB, 61 * MIB)
        b.heartbeat([("add", keys[0], HBM, 3 * MIB), ("add", keys[1], DRAM, 3 * MIB)])
        assert route(keys[2]) == (b.node_id, DRAM)  # at once after it: still no HBM room


@pytest.mark.parametrize("affinity", ["local", "same"])
def test_put_affinity(affinity):
    with running_master(settings=fast_settings(route_put_affinity=affinity)) as m:
        me = PeerSession(m.address, uid("me"), {DRAM: (GIB, 10 * MIB)})
        other = PeerSession(m.address, uid("other"), {DRAM: (GIB, GIB)})
        stub = _stub(m.address)
        r = stub.BatchRoutePut(
            pb.BatchRoutePutRequest(node_id=me.node_id, keys=[uid("a"), uid("b"), uid("c")], block_sizes=[4 * MIB] * 3),
            timeout=5,
        )
        got = [(e.outcome, e.node_id) for e in r.entries]
        if affinity == "local":  # only the writer's node; the third does not fit
            assert got == [(pb.ROUTE_PUT_OUTCOME_ROUTED, me.node_id)] * 2 + [(pb.ROUTE_PUT_OUTCOME_UNAVAILABLE, "")]
        else:  # the writer first, then whoever has room
            assert got == [(pb.ROUTE_PUT_OUTCOME_ROUTED, me.node_id)] * 2 + [
                (pb.ROUTE_PUT_OUTCOME_ROUTED, other.node_id)
            ]


def test_random_put_is_capacity_weighted():
    with running_master(settings=fast_settings(route_put_algo="random")) as m:
        lo = PeerSession(m.address, uid("lo"), {DRAM: (64 * GIB, GIB)})
        hi = PeerSession(m.address, uid("hi"), {DRAM: (64 * GIB, 9 * GIB)})
        stub = _stub(m.address)
        r = stub.BatchRoutePut(
            pb.BatchRoutePutRequest(node_id="w", keys=[uid("r") for _ in range(400)], block_sizes=[1024] * 400),
            timeout=10,
        )
        c = collections.Counter(e.node_id for e in r.entries)
        assert c[lo.node_id] + c[hi.node_id] == 400
        assert 10 <= c[lo.node_id] <= 80, c  # expected 40 of 400


def test_dead_client_is_dropped_with_its_keys():
    settings = fast_settings(
        heartbeat_ttl_s=0.6, max_missed_heartbeats=1, heartbeat_interval_divisor=2, reaper_interval_s=0.1
    )
    with running_master(settings=settings) as m:
        a = PeerSession(m.address, uid("a"), {DRAM: (GIB, GIB)})
        b = PeerSession(m.address, uid("b"), {DRAM: (GIB, GIB)})
        ka, kb = uid("ka"), uid("kb")
        a.heartbeat([("add", ka, DRAM, 5)])
        b.heartbeat([("add", kb, DRAM, 6)])
        stub = _stub(m.address)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            b.heartbeat()  # b stays alive, a falls silent
            if not stub.BatchLookup(pb.BatchLookupRequest(keys=[ka]), timeout=5).found[0]:
                break
            time.sleep(0.1)
        assert list(stub.BatchLookup(pb.BatchLookupRequest(keys=[ka, kb]), timeout=5).found) == [False, True]
        assert a.heartbeat().status == pb.CLIENT_STATUS_UNKNOWN, "a reaped client must register again"


def test_redis_backed_masters_share_state_and_restart_warm(redis_pair):  # noqa: F811
    from mori.umbp.distributed.master_store_redis import RedisMetadataStore, RedisSettings

    settings = RedisSettings(shard_uris=[r.uri for r in redis_pair], namespace=uid("warm"), block_shards=8)
    keys = [uid("k") for _ in range(20)]
    with running_master(store=RedisMetadataStore(settings)) as first:
        a = PeerSession(first.address, uid("a"), {DRAM: (GIB, GIB)})
        a.heartbeat([("add", k, DRAM, i + 1) for i, k in enumerate(keys)])
        with running_master(store=RedisMetadataStore(settings)) as second:  # a second master, same store
            got = _batch_get(_stub(second.address), keys)
            assert got == [(a.node_id, a.peer_address, DRAM, i + 1) for i in range(20)]
    # every master gone; a new one serves at once, the peer's session continues
    with running_master(store=RedisMetadataStore(settings)) as third:
        assert _batch_get(_stub(third.address), keys)[7] == (a.node_id, a.peer_address, DRAM, 8)
        a.channel = grpc.insecure_channel(third.address)
        a.stub = pb_grpc.UMBPMasterStub(a.channel)
        r = a.heartbeat([("remove", keys[0], DRAM, 0)])
        assert (r.status, r.acked_seq, r.request_full_sync) == (pb.CLIENT_STATUS_ALIVE, 2, False)
        assert _batch_get(_stub(third.address), keys[:2])[0] is None


def test_redis_restart_heals_through_reregistration_and_full_sync():
    from mori.umbp.distributed.master_store_redis import RedisMetadataStore, RedisSettings
    from mori.umbp.distributed.redis_server import RedisServerProcess

    server = RedisServerProcess()
    port = server.port
    try:
        store = RedisMetadataStore(RedisSettings(uri=server.uri, namespace=uid("heal"), block_shards=4))
        with running_master(store=store) as m:
            a = PeerSession(m.address, uid("a"), {DRAM: (GIB, GIB)})
            keys = [uid("k") for _ in range(10)]
            a.heartbeat([("add", k, DRAM, 64) for k in keys])
            # The grpc++ server's C++ get path, where built, loads its script into this fresh
            # Redis (NOSCRIPT, then EVAL) and keeps the connection for later calls.
            native = m.native_routes
            assert _batch_get(_stub(m.address), keys) == [(a.node_id, a.peer_address, DRAM, 64)] * 10
            assert native is None or native.answered == 1
            server.stop()  # Redis dies with everything in it
            with pytest.raises(grpc.RpcError):
                a.heartbeat()
            server = RedisServerProcess(port=port)  # back, empty
            deadline = time.monotonic() + 10
            while True:  # what a peer does: heartbeat, and on UNKNOWN register again and full-sync
                try:
                    r = a.heartbeat()
                    break
                except grpc.RpcError:  # the first command on a dead pooled connection fails
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
            assert r.status == pb.CLIENT_STATUS_UNKNOWN
            a.stub.RegisterClient(
                pb.RegisterClientRequest(node_id=a.node_id, peer_address=a.peer_address, tier_capacities=a._caps()),
                timeout=5,
            )
            r = a.heartbeat([("add", k, DRAM, 64) for k in keys], seq=0, full_sync=True, baseline=1)
            assert (r.status, r.acked_seq) == (pb.CLIENT_STATUS_ALIVE, 1)
            # The C++ path's kept connection is dead: that call goes to Python, and so do the calls
            # of the next 0.2 s (RedisRoutes' back-off); then the C++ path serves again.
            for pause in (0.0, 0.3):
                time.sleep(pause)
                got = _batch_get(_stub(m.address), keys)
                assert got == [(a.node_id, a.peer_address, DRAM, 64)] * 10
            assert native is None or native.answered == 2
            # Lookups and put routes ask Redis (EXISTS) from C++ too, over the same connections:
            # whichever path answers, the answers are the store's.
            stub = _stub(m.address)
            for _ in range(2):
                found = stub.BatchLookup(pb.BatchLookupRequest(keys=keys[:3] + [uid("absent")]), timeout=5).found
                assert list(found) == [True, True, True, False]
            fresh = uid("fresh")
            r = stub.BatchRoutePut(
                pb.BatchRoutePutRequest(node_id="w", keys=[keys[0], fresh], block_sizes=[64, 64]), timeout=5
            )
            assert [(e.outcome, e.node_id) for e in r.entries] == [
                (pb.ROUTE_PUT_OUTCOME_ALREADY_EXISTS, ""),
                (pb.ROUTE_PUT_OUTCOME_ROUTED, a.node_id),
            ]
            assert native is None or native.answered == 5
            server.stop()  # Redis gone again: the C++ path leaves the calls to Python, which fails them
            for call in (
                lambda: stub.BatchLookup(pb.BatchLookupRequest(keys=keys[:2]), timeout=5),
                lambda: stub.BatchRoutePut(
                    pb.BatchRoutePutRequest(node_id="w", keys=[uid("x")], block_sizes=[8]), timeout=5
                ),
            ):
                with pytest.raises(grpc.RpcError):
                    call()
            assert native is None or native.answered == 5
    finally:
        server.stop()


def test_bad_routing_settings_are_refused_naming_them():
    from mori.umbp.distributed.master_server import MasterServer

    for kw, name in (
        (dict(route_put_algo="fastest"), "UMBP_ROUTE_PUT_SELECT_ALGO"),
        (dict(route_put_affinity="near"), "UMBP_ROUTE_PUT_NODE_AFFINITY"),
        (dict(route_get_strategy="x"), "UMBP_ROUTE_GET_STRATEGY"),
        (dict(eviction_low_wm=0.95), "UMBP_EVICTION_LOW_WM"),
        (dict(eviction_strategy="mru"), "UMBP_EVICTION_STRATEGY"),
    ):
        with pytest.raises(ValueError, match=name):
            MasterServer("127.0.0.1:0", settings=fast_settings(**kw))
