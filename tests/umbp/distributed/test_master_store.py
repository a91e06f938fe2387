# SPDX-License-Identifier: MIT
"""The metadata store contract, run against every backend: in memory, one Redis, two Redis
endpoints (block shards spread over them) and a Redis Cluster. Real redis-servers, no mock."""

from __future__ import annotations

import random
import time

import pytest
from umbp_master_harness import redis_cluster, redis_pair  # noqa: F401 - fixtures
from umbp_master_harness import make_store, uid

from mori.umbp.distributed.master_records import ClientRecord, EventBundle, KvEvent, TierCapacity
from mori.umbp.distributed.master_routing import GetRouter

KINDS = ["memory", "redis", "redis-shards", "redis-cluster"]
HBM, DRAM, SSD = 1, 2, 3


@pytest.fixture(params=KINDS)
def store(request, redis_pair, redis_cluster):  # noqa: F811
    s = make_store(request.param, redis_pair, redis_cluster)
    yield s
    s.close()


def _register(store, node, now, caps=None):
    rec = ClientRecord(
        node_id=node,
        node_address=node,
        peer_address=f"{node}:7",
        capacities=caps or {DRAM: TierCapacity(1 << 30, 1 << 30)},
    )
    assert store.register_client(rec, now, expiry=30)


def _bundle(seq, events):
    return EventBundle(seq, [KvEvent(k == "add", key, tier, size) for k, key, tier, size in events])


def test_events_feed_the_index_in_seq_order(store):
    rng = random.Random()
    now = time.time()
    a, b = uid("a"), uid("b")
    _register(store, a, now)
    _register(store, b, now)
    keys = {uid("k"): rng.randrange(1, 1 << 20) for _ in range(40)}
    items = list(keys.items())
    out = store.apply_heartbeat(
        a,
        now,
        {},
        [
            _bundle(1, [("add", k, DRAM, s) for k, s in items[:20]]),
            _bundle(2, [("add", k, HBM, s) for k, s in items[20:]]),
        ],
        False,
        0,
    )
    assert (out.acked_seq, out.request_full_sync) == (2, False)
    assert sorted(out.added) == sorted(items)
    # the same key on node b in DRAM: two copies now
    store.apply_heartbeat(b, now, {}, [_bundle(1, [("add", items[0][0], DRAM, items[0][1])])], False, 0)
    routed = store.route_get_batch([k for k, _ in items] + ["missing-" + uid("m")], frozenset(), now, now + 2)
    assert not routed[-1]
    assert {(loc.node_id, loc.tier, loc.size) for loc in routed[0]} == {(a, DRAM, items[0][1]), (b, DRAM, items[0][1])}
    for (k, s), locs in zip(items[1:20], routed[1:20]):
        assert [(l.node_id, l.tier, l.size) for l in locs] == [(a, DRAM, s)]
    for (k, s), locs in zip(items[20:], routed[20:40]):
        assert [(l.node_id, l.tier, l.size) for l in locs] == [(a, HBM, s)]
    # excluded nodes are left out
    assert [l.node_id for l in store.route_get_batch([items[0][0]], frozenset({a}), now, now)[0]] == [b]
    assert store.lookup_batch([items[5][0], "nope-" + uid("n")]) == [True, False]
    assert store.key_count() == 40

    # a re-sent (already applied) bundle is skipped; the next one applies
    out = store.apply_heartbeat(
        a,
        now,
        {},
        [_bundle(2, [("remove", items[20][0], HBM, 0)]), _bundle(3, [("remove", items[1][0], DRAM, 0)])],
        False,
        0,
    )
    assert out.acked_seq == 3 and not out.request_full_sync
    assert out.removed == [(items[1][0], items[1][1])]
    assert store.lookup_batch([items[1][0], items[20][0]]) == [False, True]

    # a gap applies nothing and asks for a full sync
    out = store.apply_heartbeat(a, now, {}, [_bundle(5, [("remove", items[2][0], DRAM, 0)])], False, 0)
    assert out.request_full_sync and out.acked_seq == 3
    assert store.lookup_batch([items[2][0]]) == [True]

    # the full sync is the node's whole truth
    keep = items[2:6]
    out = store.apply_heartbeat(a, now, {}, [_bundle(0, [("add", k, DRAM, s) for k, s in keep])], True, 9)
    assert out.acked_seq == 9 and not out.request_full_sync
    assert sorted(store.node_keys(a)) == sorted(k for k, _ in keep)
    # the key b also holds survives a's full sync
    assert store.lookup_batch([items[0][0]]) == [True]
    assert store.key_count() == 5
    out = store.apply_heartbeat(a, now, {}, [_bundle(10, [])], False, 0)
    assert out.acked_seq == 10


def test_dram_copies_carry_their_place(store):
    """The owner's ADD event says where a DRAM value lies in its arena and its checksum; the get
    route hands them out with the copy it chose (so a first read needs no resolve at the owner):
    a later ADD moves the place, an ADD of unknown place (checksum 0) or a copy of another tier
    gives 0s, a removed copy's place goes with it, and a full sync sets the places it lists."""
    rng = random.Random()
    now = time.time()
    a, b = uid("a"), uid("b")
    _register(store, a, now)
    _register(store, b, now)
    keys = [uid("k") for _ in range(24)]
    size = {k: rng.randrange(1, 1 << 22) for k in keys}

    def place():
        return rng.randrange(1, 1 << 34) * 64, rng.randrange(1, 1 << 64)

    want = {k: place() for k in keys[:-1]}
    want[keys[-1]] = (0, 0)  # its owner did not say
    events = [KvEvent(True, k, DRAM, size[k], *want[k]) for k in keys]
    assert store.apply_heartbeat(a, now, {}, [EventBundle(1, events)], False, 0).acked_seq == 1

    def routed(ks):
        r = store.route_get_choose(ks, (), {a, b}, now, now + 2, GetRouter())
        return [
            (r.nodes[ref - 1], tier, sz, off, ck) if ref else None
            for ref, tier, sz, off, ck in zip(r.node_ref, r.tier, r.size, r.offset, r.checksum)
        ]

    absent = uid("absent")
    assert routed(keys + [absent]) == [(a, DRAM, size[k], *want[k]) for k in keys] + [None]
    moved, dropped, faster = keys[0], keys[1], keys[2]
    want[moved] = place()
    store.apply_heartbeat(
        a,
        now,
        {},
        [EventBundle(2, [KvEvent(True, moved, DRAM, size[moved], *want[moved]), KvEvent(False, dropped, DRAM)])],
        False,
        0,
    )
    store.apply_heartbeat(b, now, {}, [EventBundle(1, [KvEvent(True, faster, HBM, size[faster])])], False, 0)
    assert routed([moved, dropped, faster]) == [
        (a, DRAM, size[moved], *want[moved]),
        None,
        (b, HBM, size[faster], 0, 0),
    ]
    # with b gone, a's DRAM copy of `faster` serves, its place kept all along
    store.unregister_client(b)
    assert routed([faster]) == [(a, DRAM, size[faster], *want[faster])]
    # a full sync: the places it lists (one now unknown), the keys it leaves out gone
    synced = keys[3:8]
    want.update({k: place() for k in synced[:-1]})
    want[synced[-1]] = (0, 0)
    store.apply_heartbeat(
        a, now, {}, [EventBundle(0, [KvEvent(True, k, DRAM, size[k], *want[k]) for k in synced])], True, 5
    )
    assert routed(synced + keys[8:10]) == [(a, DRAM, size[k], *want[k]) for k in synced] + [None, None]


def test_registration_liveness_and_reaping(store):
    now = time.time()
    a = uid("a")
    _register(store, a, now)
    rec = ClientRecord(node_id=a, node_address="x", peer_address="y")
    assert not store.register_client(rec, now + 1, expiry=30), "a live node id cannot be taken"
    assert store.apply_heartbeat(uid("ghost"), now, {}, [], False, 0).status == 0
    store.apply_heartbeat(
        a, now, {DRAM: TierCapacity(100, 40, 30)}, [_bundle(1, [("add", "k-" + a, DRAM, 60)])], False, 0
    )
    got = store.get_client(a)
    assert (
        got.peer_address,
        got.capacities[DRAM].total,
        got.capacities[DRAM].available,
        got.capacities[DRAM].max_allocatable,
        got.acked_seq,
    ) == (f"{a}:7", 100, 40, 30, 1)
    assert a in {c.node_id for c in store.alive_clients()}
    store.external_kv.report(a, ["h-" + a], DRAM)
    assert store.reap_expired(now + 10, expiry=30) == []
    assert store.reap_expired(now + 31, expiry=30) == [a]
    assert store.get_client(a) is None
    assert store.lookup_batch(["k-" + a]) == [False]
    assert store.external_kv.match(["h-" + a]) == {}
    # an expired id can register again, from scratch
    assert store.register_client(rec, now + 40, expiry=30)
    assert store.get_client(a).acked_seq == 0


def test_unregister_drops_the_nodes_copies(store):
    now = time.time()
    a, b = uid("a"), uid("b")
    _register(store, a, now)
    _register(store, b, now)
    shared, own = uid("shared"), uid("own")
    store.apply_heartbeat(a, now, {}, [_bundle(1, [("add", shared, DRAM, 7), ("add", own, DRAM, 9)])], False, 0)
    store.apply_heartbeat(b, now, {}, [_bundle(1, [("add", shared, SSD, 7)])], False, 0)
    gone = store.unregister_client(a)
    assert gone == [(own, 9)], "only keys left with no copy are reported gone"
    assert store.lookup_batch([shared, own]) == [True, False]
    assert [(l.node_id, l.tier) for l in store.route_get_batch([shared], frozenset(), now, now)[0]] == [(b, SSD)]
    assert store.unregister_client(a) == []


def test_leases_and_eviction_candidates(store):
    now = time.time()
    a = uid("a")
    _register(store, a, now)
    keys = [uid("k") for _ in range(6)]
    store.apply_heartbeat(a, now, {}, [_bundle(1, [("add", k, DRAM, 100 + i) for i, k in enumerate(keys)])], False, 0)
    store.route_get_batch(keys[:2], frozenset(), now + 1, now + 3)  # leased until now+3
    cands = {c.key: c for c in store.eviction_candidates(a, DRAM, now + 2)}
    assert set(cands) == set(keys[2:])
    assert cands[keys[3]].size == 103
    assert {c.key for c in store.eviction_candidates(a, DRAM, now + 4)} == set(keys)
    accessed = {c.key: c.last_access for c in store.eviction_candidates(a, DRAM, now + 4)}
    assert accessed[keys[0]] == pytest.approx(now + 1) and accessed[keys[5]] == pytest.approx(now)
    assert not store.eviction_candidates(a, HBM, now + 4)


def test_external_kv_index(store):
    now = time.time()
    a, b = uid("a"), uid("b")
    hs = [uid("h") for _ in range(5)]
    store.external_kv.report(a, hs, DRAM)
    store.external_kv.report(a, hs[:2], HBM)
    store.external_kv.report(b, hs[1:3], SSD)
    m = store.external_kv.match(hs + hs[:1] + ["x-" + uid("x")])
    assert m == {a: {DRAM: hs, HBM: hs[:2]}, b: {SSD: hs[1:3]}}
    assert {k: v for k, v in store.external_kv.live_counts().items() if k in (a, b)} == {a: 5, b: 2}
    store.external_kv.revoke(a, hs[:1], DRAM)
    store.external_kv.revoke_tier(a, HBM)
    assert store.external_kv.match(hs) == {a: {DRAM: hs[1:]}, b: {SSD: hs[1:3]}}
    store.external_kv.revoke_node(b)
    assert store.external_kv.match(hs) == {a: {DRAM: hs[1:]}}
    store.external_kv.count_hits(hs[:2], now)
    store.external_kv.count_hits(hs[:1], now + 5)
    assert store.external_kv.hit_counts(hs + hs[:1]) == [(hs[0], 2), (hs[1], 1)]
    assert store.external_kv.drop_stale_hits(now + 6, ttl=3) == 1
    assert store.external_kv.hit_counts(hs) == [(hs[0], 2)]


def test_unreachable_redis_is_refused_or_falls_back_as_configured():
    from umbp_master_harness import fast_settings

    from mori.core.ports import free_port

    from mori.umbp.distributed.master_server import make_store as make_configured_store
    from mori.umbp.distributed.master_store_memory import InMemoryMetadataStore
    from mori.umbp.distributed.master_store_redis import RedisSettings

    dead = f"redis://127.0.0.1:{free_port()}"
    settings = fast_settings(metadata_backend="redis")
    with pytest.raises(RuntimeError, match="UMBP_REDIS_REQUIRED"):
        make_configured_store(settings, RedisSettings(uri=dead, required=True, connect_timeout_ms=200))
    store = make_configured_store(settings, RedisSettings(uri=dead, required=False, connect_timeout_ms=200))
    assert isinstance(store, InMemoryMetadataStore)
    with pytest.raises(ValueError, match="UMBP_REDIS_CLUSTER"):
        RedisSettings(cluster=True, shard_uris=[dead]).validate()
