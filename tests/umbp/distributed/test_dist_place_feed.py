# SPDX-License-Identifier: MIT
"""The master's place feed (UMBP_PLACE_FEED_MS): owners' DRAM places reach workers without a
route, so a first get of a key another engine put is one read from its owner. The log itself
(numbering, wrap, gaps, another feed), then workers as processes: fed places read bit for bit
with no route, a stale fed place read right through the routed path, removals forgotten, the
background poll, and a feed that is not read leaving the routed path as it was."""

from __future__ import annotations

import random
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from dist_harness import start_workers, start_writer_and_owner
from prometheus_client import generate_latest
from umbp_master_harness import redis_pair  # noqa: F401 - fixture
from umbp_master_harness import fast_settings, running_master, uid

from mori.umbp.distributed.master_place_feed import MAX_ENTRIES_PER_REPLY, PlaceFeed
from mori.umbp.distributed.master_records import KvEvent, Tier

pytestmark = pytest.mark.timeout(120)
DRAM, SSD = int(Tier.DRAM), int(Tier.SSD)


def _adds(n: int, start: int = 0) -> list[KvEvent]:
    return [KvEvent(True, f"k{start + i}", DRAM, 4096, 4096 * (start + i), 1000 + start + i) for i in range(n)]


def test_feed_numbers_entries_and_keeps_the_latest():
    feed = PlaceFeed(DRAM, capacity=8)
    # Only DRAM places a reader can check, and every DRAM removal, are fed.
    events = _adds(3) + [
        KvEvent(True, "nock", DRAM, 4096, 0, 0),  # no checksum: a reader could not check it
        KvEvent(True, "ssd", SSD, 4096, 0, 7),
        KvEvent(False, "k1", DRAM),
    ]
    assert feed.record("n1", events) == 4
    got = feed.since(0, 0)
    assert (got.feed_id, got.next_seq, got.gap, got.more) == (feed.feed_id, 5, False, False)
    assert [(e.key, e.added, e.offset, e.checksum) for e in got.entries] == [
        ("k0", True, 0, 1000),
        ("k1", True, 4096, 1001),
        ("k2", True, 8192, 1002),
        ("k1", False, 0, 0),
    ]
    assert feed.since(feed.feed_id, 5).entries == []  # nothing new
    assert [e.key for e in feed.since(feed.feed_id, 3).entries] == ["k2", "k1"]
    # Past the capacity the oldest go: a reader that was behind is told it missed some.
    feed.record("n2", _adds(10, start=100))
    behind = feed.since(feed.feed_id, 5)
    assert behind.gap and [e.key for e in behind.entries] == [f"k{100 + i}" for i in range(2, 10)]
    assert behind.next_seq == 15 and all(e.node_id == "n2" for e in behind.entries)
    # Another feed's numbers (a restarted or another master process) mean nothing here: from the oldest.
    other = feed.since(feed.feed_id ^ 2, 14)
    assert not other.gap and len(other.entries) == 8 and other.next_seq == 15
    # A slice is capped; the reader is told more waits.
    part = feed.since(feed.feed_id, 7, max_entries=3)
    assert [e.key for e in part.entries] == ["k102", "k103", "k104"] and part.more and part.next_seq == 10


def test_feed_reply_cap_and_bad_capacity():
    feed = PlaceFeed(DRAM, capacity=MAX_ENTRIES_PER_REPLY * 2)
    feed.record("n", _adds(MAX_ENTRIES_PER_REPLY + 5))
    first = feed.since(0, 0, max_entries=10**9)
    assert len(first.entries) == MAX_ENTRIES_PER_REPLY and first.more
    rest = feed.since(first.feed_id, first.next_seq)
    assert len(rest.entries) == 5 and not rest.more
    with pytest.raises(ValueError, match="capacity"):
        PlaceFeed(DRAM, capacity=0)


_event = st.builds(
    KvEvent,
    st.booleans(),
    st.sampled_from(["a", "b", "c", "d"]),
    st.sampled_from([DRAM, DRAM, SSD]),
    st.integers(0, 1 << 40),
    st.integers(0, 1 << 40),
    st.sampled_from([0, 1, (1 << 64) - 1]),
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    capacity=st.integers(1, 9),
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("record"), st.sampled_from(["n1", "n2"]), st.lists(_event, max_size=12)),
            st.tuples(
                st.just("since"), st.sampled_from(["own", "zero", "other"]), st.integers(0, 40), st.integers(0, 12)
            ),
        ),
        max_size=30,
    ),
)
@pytest.mark.parametrize("kind", ["memory", "redis"])
def test_feed_against_a_model(kind, redis_pair, capacity, steps):  # noqa: F811
    """Any sequence of records and reads against a plain list of every entry ever fed: the log
    (in memory, or the Redis store's stream) hands out exactly the model's entries, numbers,
    gaps and `more`, whatever the capacity, the asked number (past the end, wrapped away,
    another feed's) and the cap."""
    if kind == "memory":
        feed = PlaceFeed(DRAM, capacity=capacity)
    else:
        import redis

        from mori.umbp.distributed.master_place_feed_redis import RedisPlaceFeed

        feed = RedisPlaceFeed(redis.Redis.from_url(redis_pair[0].uri), f"{{{uid('m')}:ctl}}", DRAM, capacity)
    log: list[tuple] = []  # every entry ever fed, entry n at log[n - 1]
    for step in steps:
        if step[0] == "record":
            _, node, events = step
            fed = [
                (node, e.key, e.add, e.offset if e.add else 0, e.size if e.add else 0, e.checksum if e.add else 0)
                for e in events
                if e.tier == DRAM and (e.checksum or not e.add)
            ]
            assert feed.record(node, events) == len(fed)
            log += fed
            continue
        _, which, seq, most = step
        feed_id = {"own": feed.feed_id, "zero": 0, "other": feed.feed_id ^ 4}[which]
        got = feed.since(feed_id, seq, most)
        nxt = len(log) + 1
        oldest = max(1, nxt - capacity)
        fresh = which != "own" or seq == 0
        gap = not fresh and seq < oldest
        start = oldest if fresh or gap else min(seq, nxt)
        stop = min(nxt, start + (most or MAX_ENTRIES_PER_REPLY))
        assert (got.feed_id, got.next_seq, got.gap, got.more) == (feed.feed_id, stop, gap, stop < nxt)
        assert [(e.node_id, e.key, e.added, e.offset, e.size, e.checksum) for e in got.entries] == log[
            start - 1 : stop - 1
        ]


def test_redis_feed_is_one_for_every_master_process(redis_pair):  # noqa: F811
    """Over the Redis store the feed is the store's: places an owner reported through one master
    reach a worker reading through another (as behind `umbp_master --workers N`), with the same
    feed id and numbers; a restarted master goes on with it; a reader behind the trimmed part is
    told of the gap."""
    from umbp_master_harness import PeerSession

    from mori.umbp.distributed.master_place_feed_redis import RedisPlaceFeed
    from mori.umbp.distributed.master_service import UMBPMasterAdminServicer
    from mori.umbp.distributed.master_store_redis import RedisMetadataStore, RedisSettings
    from mori.umbp.proto import require

    admin_pb = require("umbp_admin_pb2")
    settings = RedisSettings(uri=redis_pair[0].uri, namespace=uid("feed"), block_shards=4)

    def poll(m, feed_id=0, since=0):
        return UMBPMasterAdminServicer(m.state).PlaceFeed(
            admin_pb.PlaceFeedRequest(node_id="t", feed_id=feed_id, since_seq=since), None
        )

    with running_master(store=RedisMetadataStore(settings)) as first:
        with running_master(store=RedisMetadataStore(settings)) as second:
            assert isinstance(first.state.place_feed, RedisPlaceFeed)
            owner = PeerSession(first.address, uid("o"), {DRAM: (1 << 30, 1 << 29)})
            try:
                owner.heartbeat([("add", f"r{i}", DRAM, 4096, 4096 * i, 77 + i) for i in range(5)])
                owner.heartbeat([("remove", "r1", DRAM, 0)])
                got = poll(second)
                assert [(k, a, o, c) for k, a, o, c in zip(got.keys, got.added, got.offset, got.checksum)] == [
                    (f"r{i}", True, 4096 * i, 77 + i) for i in range(5)
                ] + [("r1", False, 0, 0)]
                assert [n.node_id for n in got.nodes] == [owner.node_id] and not got.gap
                assert poll(first).SerializeToString() == got.SerializeToString()  # one feed, one numbering
                # The grpc++ server answers from the same stream by the same script, byte for byte.
                if second.native_routes is not None and getattr(second.native_routes, "place_feed", None):
                    for fid, since, most in [(0, 0, 0), (got.feed_id, 2, 3), (got.feed_id, 10**6, 0), (7, 4, 2)]:
                        req = admin_pb.PlaceFeedRequest(node_id="t", feed_id=fid, since_seq=since, max_entries=most)
                        python = UMBPMasterAdminServicer(second.state).PlaceFeed(req, None).SerializeToString()
                        assert second.native_routes.place_feed(req.SerializeToString()) == python, (fid, since, most)
                assert list(poll(second, got.feed_id, got.next_seq).keys) == []
                owner.heartbeat([("add", "r9", DRAM, 4096, 0, 5)])
                new = poll(second, got.feed_id, got.next_seq)
                assert list(new.keys) == ["r9"] and new.feed_id == got.feed_id
            finally:
                owner.close()
    with running_master(store=RedisMetadataStore(settings)) as third:  # restarted: the same feed
        again = poll(third, got.feed_id, got.next_seq)
        assert again.feed_id == got.feed_id and list(again.keys) == ["r9"]
        small = RedisPlaceFeed(third.state.store._ctl, third.state.store._ctl_prefix, DRAM, capacity=3)
        small.record("n", _adds(4, start=50))  # trims the stream to 3: r9 and the first add go
        behind = small.since(got.feed_id, got.next_seq)
        assert behind.gap and [e.key for e in behind.entries] == ["k51", "k52", "k53"]
        assert behind.next_seq == got.next_seq + 5 and not small.since(got.feed_id, behind.next_seq).entries
        # The same numbers as the in-memory log: the model test's rules hold here too.
        assert [e.key for e in small.since(got.feed_id, behind.next_seq - 2).entries] == ["k52", "k53"]


def test_a_reply_becomes_the_places_to_remember():
    """A worker turns a reply into the keys that left and, per owner, the places to remember: the
    last word on a key wins, places without a checksum or with no owner listed are dropped, each
    owner's places keep their order."""
    from mori.umbp.distributed.distributed_client import _feed_columns
    from mori.umbp.proto import require

    admin_pb = require("umbp_admin_pb2")
    resp = admin_pb.PlaceFeedResponse(
        nodes=[admin_pb.PlaceFeedNode(node_id="n1"), admin_pb.PlaceFeedNode(node_id="n2")],
        # a: added on n2; b: added on n1, then removed; c: removed, then added on n1; d: no
        # checksum; e: an owner not listed; f: added on n1 with a 64-bit checksum; g: removed.
        node_ref=[2, 1, 1, 1, 1, 1, 3, 1, 2],
        keys=["a", "b", "b", "c", "c", "d", "e", "f", "g"],
        added=[True, True, False, False, True, True, True, True, False],
        offset=[10, 20, 0, 0, 40, 50, 60, 70, 0],
        size=[1, 2, 0, 0, 4, 5, 6, 7, 0],
        checksum=[11, 22, 0, 0, 44, 0, 66, (1 << 64) - 1, 0],
    )
    gone, by_ref = _feed_columns(resp)
    assert gone == ["b", "g"]
    assert by_ref == {1: (["c", "f"], [40, 70], [4, 7], [44, (1 << 64) - 1]), 2: (["a"], [10], [1], [11])}
    assert _feed_columns(admin_pb.PlaceFeedResponse()) == ([], {})


@pytest.fixture(scope="module")
def master():
    with running_master(settings=fast_settings()) as m:
        yield m


def test_native_feed_answers_as_the_python_handler():
    """The grpc++ server answers PlaceFeed from the same log without the interpreter lock: its
    replies are the Python handler's byte for byte (owners in first-use order, an owner gone
    left out, REMOVEs, other tiers and unchecked ADDs skipped, the reply cap, gaps, another
    feed's id), and a worker's poll through the server is answered natively."""
    from umbp_master_harness import PeerSession

    from mori.umbp.distributed.master_service import UMBPMasterAdminServicer
    from mori.umbp.proto import require

    admin_pb = require("umbp_admin_pb2")
    pb = require("umbp_pb2")
    with running_master(settings=fast_settings()) as m:
        if m.native_routes is None:
            pytest.skip("the master's native path is not built here (grpc++ and protoc): PlaceFeed is Python's")
        rng = random.Random()
        caps = {DRAM: (1 << 30, 1 << 29)}
        peers = [PeerSession(m.address, uid(f"o{i}"), caps) for i in range(3)]
        try:
            for round_ in range(3):
                for p in rng.sample(peers, len(peers)):
                    events = []
                    for j in range(rng.randrange(1, 40)):
                        key = f"{p.node_id}-{round_}-{j}"
                        tier = rng.choice([DRAM, DRAM, DRAM, SSD])
                        if rng.random() < 0.2:
                            events.append(("remove", key, tier, 0))
                        else:
                            ck = rng.choice([0, rng.getrandbits(64) | 1, rng.getrandbits(64) | 1])
                            events.append(("add", key, tier, 4096 * (j + 1), rng.getrandbits(40), ck))
                    p.heartbeat(events)
            gone = peers[1]
            gone.stub.UnregisterClient(pb.UnregisterClientRequest(node_id=gone.node_id), timeout=5)
            time.sleep(0.25)  # past the 0.2 s both paths may cache the live owners for
            fid = m.state.place_feed.feed_id
            handler = UMBPMasterAdminServicer(m.state)
            asks = [(0, 0, 0), (fid, 1, 0), (fid, 5, 7), (fid, 10**6, 0), (fid ^ 2, 9, 3), (fid, 0, 10**6)]
            for feed_id, since, most in asks:
                req = admin_pb.PlaceFeedRequest(node_id="t", feed_id=feed_id, since_seq=since, max_entries=most)
                native = m.native_routes.place_feed(req.SerializeToString())
                python = handler.PlaceFeed(req, None).SerializeToString()
                assert native == python, (feed_id, since, most)
            whole = admin_pb.PlaceFeedResponse.FromString(
                m.native_routes.place_feed(admin_pb.PlaceFeedRequest(since_seq=0).SerializeToString())
            )
            assert whole.keys and gone.node_id not in [n.node_id for n in whole.nodes]
            assert not any(k.startswith(gone.node_id) for k in whole.keys)
            # Through the server: answered natively (the native count moves, the reply the same).
            before = m.native_routes.answered
            from mori.umbp.distributed.grpc_channels import Channel

            admin_grpc = require("umbp_admin_pb2_grpc")
            stub = Channel(
                m.address,
                [(admin_grpc.UMBPMasterAdminStub, admin_pb.DESCRIPTOR.services_by_name["UMBPMasterAdmin"], admin_pb)],
            ).stubs[0]
            got = stub.PlaceFeed(admin_pb.PlaceFeedRequest(node_id="t"), timeout=5)
            assert got == whole and m.native_routes.answered == before + 1
        finally:
            for p in peers:
                p.close()


@pytest.fixture(scope="module")
def pair(master):
    """Writer/reader a (small DRAM: its puts are routed to b) and owner b; the feed is read only
    when a test asks ("place_feed")."""
    a, b = start_writer_and_owner(master.address)
    yield a, b
    a.close()
    b.close()


def _stats(w) -> dict:
    return w.ask("stats")["stats"]


def _put_and_feed(a, b, prefix: str, n: int, size: int) -> tuple[list[str], int]:
    """n fresh keys put by a (owned by b), b's events shipped, a's feed read: (keys, seed)."""
    keys = [uid(prefix) for _ in range(n)]
    seed = random.randrange(1 << 30)
    assert a.ask("put", keys=keys, size=size, seed=seed)["ok"] == [True] * n
    b.ask("heartbeat")  # b's ADD events, with each value's place, reach the master and its feed
    a.ask("place_feed")
    return keys, seed


@pytest.mark.parametrize("pool", [True, False], ids=["native", "staged"])
def test_fed_places_are_read_with_no_route(pair, pool):
    """Keys a put (owned by b) are read by a from the places the feed gave: location cache hits,
    no routed read, bit for bit, into registered memory (the native read) and not (staged)."""
    a, b = pair
    before = _stats(a)
    keys, seed = _put_and_feed(a, b, "f", 6, 64 << 10)
    assert a.ask("locations", keys=keys)["held"] == 6, a.moved_since(before)
    assert _stats(a)["fed_places"] >= before["fed_places"] + 6
    mid = _stats(a)
    got = a.ask("get", keys=keys, size=64 << 10, seed=seed, pool=pool)
    assert got["ok"] == [True] * 6 and got["right"] == [True] * 6
    after = _stats(a)
    assert after["location_cache_hits"] == mid["location_cache_hits"] + 6, a.moved_since(mid)
    assert after["routed_location_reads"] == mid["routed_location_reads"]
    assert after["remote_gets"] == mid["remote_gets"] + 6 and after["remote_checksum_failures"] == 0


def _calls(master, rpc: str) -> float:
    """Calls of ``rpc`` the master answered (either path), from a scrape of its metrics."""
    for line in generate_latest(master.metrics.registry).decode().splitlines():
        if line.startswith(f'mori_umbp_master_rpc_latency_seconds_count{{rpc="{rpc}"}}'):
            return float(line.split()[-1])
    return 0.0


def _route_get_calls(master) -> float:
    return _calls(master, "BatchRouteGet")


def test_exists_of_fed_keys_asks_no_master(pair, master):
    """SGLang's load (batch_exists_consecutive, then batch_get) of keys whose places were fed:
    no master call at all, and the get reads them from the owner, bit for bit."""
    a, b = pair
    keys, seed = _put_and_feed(a, b, "e", 5, 64 << 10)
    calls = _route_get_calls(master)
    ex = a.ask("exists", keys=keys)
    assert ex["found"] == [True] * 5 and ex["consecutive"] == 5
    assert _route_get_calls(master) == calls, "the fed places answered"
    before = _stats(a)
    assert a.ask("get", keys=keys, size=64 << 10, seed=seed, pool=True)["right"] == [True] * 5
    assert _stats(a)["location_cache_hits"] == before["location_cache_hits"] + 5
    # A key not fed is asked for, as before (and is not found).
    assert a.ask("exists", keys=[uid("absent")])["found"] == [False]
    assert _route_get_calls(master) > calls
    # The prefix stops at the first key neither stored here nor fed; the ones after it count not.
    mixed = keys[:3] + [uid("absent")] + keys[3:]
    ex = a.ask("exists", keys=mixed)
    assert ex["found"] == [True] * 3 + [False, True, True] and ex["consecutive"] == 3


def test_stale_fed_place_reads_right_through_the_route(pair):
    """A fed place that no longer holds its value (here: pointed at another key's value) fails
    its checksum; the key is read through the routed path, right bytes, counted stale."""
    a, b = pair
    keys, seed = _put_and_feed(a, b, "s", 3, 32 << 10)
    assert a.ask("locations", keys=keys, misplace=[keys[0], keys[1]])["held"] == 3
    before = _stats(a)
    got = a.ask("get", keys=keys, size=32 << 10, seed=seed, pool=True)
    assert got["right"] == [True] * 3
    after = _stats(a)
    assert after["location_cache_hits"] == before["location_cache_hits"] + 2, a.moved_since(before)
    assert after["location_cache_stale"] == before["location_cache_stale"] + 1
    assert after["remote_checksum_failures"] == before["remote_checksum_failures"]


def test_removed_values_are_forgotten(pair):
    """b's clear() removes its values; the REMOVE events reach a through the feed, which forgets
    their places: a's gets are misses that write nothing, and no stale read is tried."""
    a, b = pair
    keys, seed = _put_and_feed(a, b, "r", 4, 16 << 10)
    assert a.ask("locations", keys=keys)["held"] == 4
    assert b.ask("clear")["ok"]
    b.ask("heartbeat")
    before = _stats(a)
    a.ask("place_feed")
    assert a.ask("locations", keys=keys)["held"] == 0
    assert _stats(a)["fed_removals"] >= before["fed_removals"] + 4
    mid = _stats(a)
    got = a.ask("get", keys=keys, size=16 << 10, seed=seed)
    assert got["ok"] == [False] * 4 and got["untouched_misses"] == [True] * 4
    assert _stats(a)["location_cache_stale"] == mid["location_cache_stale"]


def test_unread_feed_leaves_the_routed_path(pair):
    """Without the feed read (UMBP_PLACE_FEED_MS=0 here), a first get is routed as before."""
    a, b = pair
    keys = [uid("u") for _ in range(3)]
    seed = random.randrange(1 << 30)
    assert a.ask("put", keys=keys, size=8 << 10, seed=seed)["ok"] == [True] * 3
    b.ask("heartbeat")
    before = _stats(a)
    assert a.ask("get", keys=keys, size=8 << 10, seed=seed)["right"] == [True] * 3
    after = _stats(a)
    assert after["routed_location_reads"] == before["routed_location_reads"] + 3
    assert after["location_cache_hits"] == before["location_cache_hits"]
    assert after["fed_places"] == before["fed_places"]


def test_background_feed_brings_places_unasked(master):
    """UMBP_PLACE_FEED_MS set: the worker's own thread reads the feed; a reader that never routed
    the keys finds their places within a few periods and reads them with no route."""
    env = {"UMBP_PLACE_FEED_MS": "20"}
    w, owner, reader = start_workers(
        dict(master=master.address, node_id=uid("w"), dram=16 << 20, pool_bytes=16 << 20),
        dict(master=master.address, node_id=uid("o"), dram=320 << 20, pool_bytes=16 << 20),
        dict(master=master.address, node_id=uid("rd"), dram=16 << 20, pool_bytes=16 << 20),
        env=env,
    )
    try:
        # Idle, each poll that brings nothing doubles the wait (up to 10 periods): three workers
        # at 20 ms poll a few times a second each, not 50.
        time.sleep(0.5)  # past the start's burst
        polls = _calls(master, "PlaceFeed")
        time.sleep(2.0)
        idle = _calls(master, "PlaceFeed") - polls
        assert idle <= 3 * 2.0 / 0.2 + 6, f"{idle} polls in 2 s from 3 idle workers"
        keys = [uid("bg") for _ in range(5)]
        seed = random.randrange(1 << 30)
        assert w.ask("put", keys=keys, size=64 << 10, seed=seed)["ok"] == [True] * 5
        owner.ask("heartbeat")
        deadline = time.monotonic() + 10
        while reader.ask("locations", keys=keys)["held"] < 5:
            assert time.monotonic() < deadline, reader.moved_since({})
            time.sleep(0.02)
        before = _stats(reader)
        got = reader.ask("get", keys=keys, size=64 << 10, seed=seed, pool=True)
        assert got["right"] == [True] * 5
        after = _stats(reader)
        assert after["location_cache_hits"] == before["location_cache_hits"] + 5, reader.moved_since(before)
        assert after["routed_location_reads"] == before["routed_location_reads"]
    finally:
        for x in (w, owner, reader):
            x.close()
