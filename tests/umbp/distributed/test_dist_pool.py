# SPDX-License-Identifier: MIT
"""The distributed pool end to end: a master (in-process, in-memory store) and two workers as two
processes ("engines") on one host. Puts on one, gets on the other, bytes checked on fresh random
data; remote writes and remote reads through MORI-IO, zero-copy and staged; SSD-only keys staged
by their owner; remote-fetch caching; a lookup-only scheduler client."""

from __future__ import annotations

import random
import re
import time

import pytest
from dist_harness import start_workers, start_writer_and_owner
from umbp_master_harness import fast_settings, running_master, uid

from mori.umbp.distributed import UMBPMasterClient
from mori.umbp.distributed.master_server import cpp_server

pytestmark = pytest.mark.timeout(120)
MIB = 1 << 20


@pytest.fixture(scope="module")
def master():
    with running_master(settings=fast_settings()) as m:
        yield m


@pytest.fixture(scope="module")
def pair(master):
    """Worker a (small DRAM) and worker b (large): most_available routes a's puts to b. Shared by
    the module's tests (each uses fresh keys and compares counters before and after)."""
    a, b = start_writer_and_owner(master.address)
    yield a, b
    a.close()
    b.close()


def _stat(w, name: str) -> int:
    return w.ask("stats")["stats"][name]


def _keys(n: int) -> list[str]:
    return [uid("k") for _ in range(n)]


@pytest.mark.parametrize("size,batch", [(4096, 32), (1 << 20, 4), (6 << 20, 1)])
def test_put_on_one_get_on_other(pair, size, batch):
    a, b = pair
    keys = _keys(batch)
    seed = random.randrange(1 << 30)
    before = a.ask("stats")["stats"]
    assert a.ask("put", keys=keys, size=size, seed=seed)["ok"] == [True] * batch
    # a's DRAM is the smaller: the master routed the values to b (remote writes from a). Those
    # that fit a's 4 MiB staging buffer b read from there itself, in the allocate call (pulled);
    # the 6 MiB value a wrote and committed.
    after = a.ask("stats")["stats"]
    assert after["remote_puts"] == before["remote_puts"] + batch
    assert after["pulled_puts"] == before["pulled_puts"] + (batch if size * batch <= 4 * MIB else 0)
    b.ask("heartbeat")  # b's ADD events (with each value's place) reach the master now
    for reader in (b, a):  # b owns them (local hits); a reads them back remotely
        got = reader.ask("get", keys=keys, size=size, seed=seed)
        assert got["ok"] == [True] * batch and got["right"] == [True] * batch
    after = a.ask("stats")["stats"]
    assert after["remote_gets"] == before["remote_gets"] + batch
    # The master's route gave each value's place in b's arena: read with no resolve at b.
    assert after["routed_location_reads"] == before["routed_location_reads"] + batch
    # A key nobody stored is a miss, and nothing is written into the caller's buffer.
    miss = b.ask("get", keys=[uid("absent")], size=size, seed=seed)
    assert miss["ok"] == [False] and miss["untouched_misses"] == [True]
    # The wrong size is a miss too, remotely as locally.
    assert a.ask("get", keys=keys[:1], size=size - 64, seed=seed)["ok"] == [False]


@pytest.mark.parametrize("pool", [True, False], ids=["zero-copy", "staged"])
def test_remote_paths(pair, pool):
    """Writes from and reads into registered memory (zero-copy) or unregistered memory (staging)."""
    a, b = pair
    keys = _keys(8)
    seed = random.randrange(1 << 30)
    pulled = _stat(a, "pulled_puts")
    assert a.ask("put", keys=keys, size=256 << 10, seed=seed, pool=pool)["ok"] == [True] * 8
    # b read them itself, from a's pool or a's staging buffer, in the allocate call.
    assert _stat(a, "pulled_puts") == pulled + 8
    # Once b has seen a's buffer, its grpc++ peer server pulls a's puts in C++ (the Python
    # service, under UMBP_PEER_SERVER=python or without protobuf in the build, pulls them all).
    native = _stat(b, "peer_native_allocate_calls")
    assert a.ask("put", keys=_keys(2), size=4096, seed=seed, pool=pool)["ok"] == [True] * 2
    grown = _stat(b, "peer_native_allocate_calls") - native
    from mori.umbp.distributed.grpc_servers import cpp_server, server_kind

    in_cpp = server_kind(None, "UMBP_PEER_SERVER") == "cpp" and cpp_server().HAVE_NATIVE_ROUTES
    assert grown == (1 if in_cpp else 0)
    assert _stat(a, "pulled_puts") == pulled + 10
    got = a.ask("get", keys=keys, size=256 << 10, seed=seed, pool=pool)
    assert got["right"] == [True] * 8
    assert b.ask("exists", keys=keys + [uid("absent")])["found"] == [True] * 8 + [False]
    assert a.ask("exists", keys=keys + [uid("absent")] + keys)["consecutive"] == 8


@pytest.mark.parametrize("pool", [True, False], ids=["native", "staged"])
def test_located_reads_skip_route_and_resolve(pair, pool):
    """A reader that resolved keys reads them again within the lease straight from the owner (no
    master route, no resolve); a location gone stale (its block now holds another value) fails
    the checksum, is counted stale and forgotten, and the key is read through the routed path:
    right bytes either way. Into the registered pool that is the native located read (one call,
    no GIL); into unregistered memory, the staged read at the places it hands back."""
    a, b = pair
    keys = _keys(4)
    seed = random.randrange(1 << 30)
    assert a.ask("put", keys=keys, size=64 << 10, seed=seed)["ok"] == [True] * 4
    assert a.ask("get", keys=keys, size=64 << 10, seed=seed, pool=pool)["right"] == [True] * 4
    assert a.ask("locations", keys=keys, extend_s=60.0, misplace=[keys[0], keys[1]])["held"] == 4
    hits, stale, gets = _stat(a, "location_cache_hits"), _stat(a, "location_cache_stale"), _stat(a, "remote_gets")
    got_bytes = _stat(a, "remote_get_bytes")
    assert a.ask("get", keys=keys, size=64 << 10, seed=seed, pool=pool)["right"] == [True] * 4
    assert _stat(a, "location_cache_hits") == hits + 3
    assert _stat(a, "location_cache_stale") == stale + 1
    assert _stat(a, "remote_gets") == gets + 4
    assert _stat(a, "remote_get_bytes") == got_bytes + 4 * (64 << 10)
    assert _stat(a, "remote_checksum_failures") == 0  # a stale location is not a corrupt value
    # Read again: the stale key's place was replaced by the one its routed read learnt.
    assert a.ask("get", keys=keys, size=64 << 10, seed=seed, pool=pool)["right"] == [True] * 4
    assert _stat(a, "location_cache_hits") == hits + 7


def test_expired_location_is_not_used(pair):
    """A place whose lease ran out is not read at: the key goes through the routed path (right
    bytes, not a located hit nor a stale one), and is remembered again from that read."""
    a, b = pair
    keys = _keys(3)
    seed = random.randrange(1 << 30)
    assert a.ask("put", keys=keys, size=32 << 10, seed=seed)["ok"] == [True] * 3
    assert a.ask("get", keys=keys, size=32 << 10, seed=seed, pool=True)["right"] == [True] * 3
    # keys[0] expires now; keys[1] would read keys[2]'s value if its (expired) place were used.
    assert a.ask("locations", keys=keys[2:], extend_s=60.0, misplace=[keys[1], keys[2]])["held"] == 1
    assert a.ask("locations", keys=keys[:2], extend_s=-1.0)["held"] == 2
    hits, stale = _stat(a, "location_cache_hits"), _stat(a, "location_cache_stale")
    assert a.ask("get", keys=keys, size=32 << 10, seed=seed, pool=True)["right"] == [True] * 3
    assert _stat(a, "location_cache_hits") == hits + 1
    assert _stat(a, "location_cache_stale") == stale
    assert a.ask("locations", keys=keys)["held"] == 3  # remembered again by the routed reads


def test_exists_then_get_reads_with_no_route(pair):
    """SGLang's load, batch_exists_consecutive then batch_get: the exists call's route gives each
    value's place, so the get reads them from the owner at once (location cache hits, no route),
    bit for bit; a place gone stale by then still reads right through the routed path."""
    a, b = pair
    keys = _keys(6)
    seed = random.randrange(1 << 30)
    assert a.ask("put", keys=keys, size=64 << 10, seed=seed)["ok"] == [True] * 6
    b.ask("heartbeat")  # b's ADD events, with each value's place, reach the master
    hits, routed = _stat(a, "location_cache_hits"), _stat(a, "routed_location_reads")
    assert a.ask("exists", keys=keys + [uid("absent")])["consecutive"] == 6
    assert a.ask("locations", keys=keys, extend_s=60.0, misplace=[keys[5], keys[4]])["held"] == 6
    assert a.ask("get", keys=keys, size=64 << 10, seed=seed)["right"] == [True] * 6
    assert _stat(a, "location_cache_hits") == hits + 5  # keys[5] was misplaced: stale, then routed
    assert _stat(a, "routed_location_reads") == routed + 1


def test_a_corrupted_value_in_a_large_read_is_one_counted_miss(pair):
    """The values of a 4 MiB batch read are checked in one native call (on the hash team): a value
    corrupted in the owner's arena (one byte of the 4th of 8) is a miss, counted, and every other
    value of the batch is read, bit for bit, around it."""
    a, b = pair
    keys = _keys(8)
    seed = random.randrange(1 << 30)
    assert a.ask("put", keys=keys, size=512 << 10, seed=seed)["ok"] == [True] * 8
    b.ask("heartbeat")  # the places reach the master: a first read is routed straight there
    b.ask("corrupt", key=keys[3])
    failures = _stat(a, "remote_checksum_failures")
    got = a.ask("get", keys=keys, size=512 << 10, seed=seed)
    assert got["ok"] == [i != 3 for i in range(8)]
    assert got["right"] == [i != 3 for i in range(8)]
    # The routed read failed its checksum, so did the read after the owner's resolve: one miss.
    assert _stat(a, "remote_checksum_failures") == failures + 1


def test_umbp_peer_threads_sets_the_peer_servers_threads():
    """UMBP_PEER_THREADS: the threads answering a worker's grpc++ UMBPPeer calls. With 2, values
    put from one worker into the other's pages (its peer server pulls them) and SSD-free reads
    back are exact; below 2 a worker is refused at construction, naming the setting."""
    with running_master(settings=fast_settings()) as master:
        a, b = start_workers(
            dict(master=master.address, node_id=uid("a"), dram=16 << 20, pool_bytes=8 << 20),
            dict(master=master.address, node_id=uid("b"), dram=64 << 20, pool_bytes=8 << 20),
            env={"UMBP_PEER_THREADS": "2"},
        )
        try:
            # grpc++ built: its workers are the setting (grpcio's server, in a build without it: None).
            assert b.ask("stats")["peer_threads"] == (2 if cpp_server() is not None else None)
            keys, seed = _keys(24), random.randrange(1 << 30)
            assert a.ask("put", keys=keys, size=96 << 10, seed=seed)["ok"] == [True] * 24
            assert _stat(b, "dram_keys") >= 24  # b owns them (a's DRAM is small)
            assert a.ask("get", keys=keys, size=96 << 10, seed=seed, pool=True)["right"] == [True] * 24
        finally:
            a.close()
            b.close()
        with pytest.raises(AssertionError, match="UMBP_PEER_THREADS"):
            start_workers(dict(master=master.address, node_id=uid("c"), dram=16 << 20), env={"UMBP_PEER_THREADS": "1"})


def test_write_once_across_workers(pair):
    """A key put again (from either worker, with other bytes) keeps its first value."""
    a, b = pair
    keys = _keys(4)
    assert a.ask("put", keys=keys, size=8192, seed=1000)["ok"] == [True] * 4
    assert b.ask("put", keys=keys, size=8192, seed=2000)["ok"] == [True] * 4
    assert a.ask("put", keys=keys, size=8192, seed=3000)["ok"] == [True] * 4
    for w in (a, b):
        assert w.ask("get", keys=keys, size=8192, seed=1000)["right"] == [True] * 4


def _outcomes(m, outcome: str) -> float:
    return m.metrics.registry.get_sample_value("mori_umbp_route_put_outcome_total", {"outcome": outcome}) or 0.0


def test_engine_over_quota_stores_nothing_and_no_room_stays_local(tmp_path):
    """A worker over its engine quota gets False and the value is nowhere (not kept locally);
    when no node has room by the master's count (no quota involved) the writer keeps the value."""
    with running_master(settings=fast_settings()) as m:
        ids = uid("qa"), uid("qb")
        # w1 writes over its quota; w2 (with an SSD) writes with no quota
        w1, w2 = start_workers(
            dict(master=m.address, node_id=ids[0], dram=6 << 20, pool_bytes=1 << 20),
            dict(master=m.address, node_id=ids[1], dram=6 << 20, pool_bytes=1 << 20, ssd_dir=str(tmp_path)),
        )
        try:
            UMBPMasterClient(m.address, node_id="admin").set_engine_quota(ids[0], 3 * MIB)
            keys = _keys(5)
            seed = random.randrange(1 << 30)
            assert w1.ask("put", keys=keys[:2], size=MIB, seed=seed)["ok"] == [True, True]
            assert w1.ask("put", keys=keys[2:4], size=MIB, seed=seed + 2)["ok"] == [True, False]
            assert w1.ask("put", keys=keys[4:], size=MIB, seed=seed + 4)["ok"] == [False]
            assert _stat(w1, "quota_refused_puts") == 2
            for w in (w1, w2):  # the refused keys are nowhere; the admitted ones everywhere
                assert w.ask("exists", keys=keys)["found"] == [True, True, True, False, False]
                got = w.ask("get", keys=keys, size=MIB, seed=seed)
                assert got["ok"] == [True, True, True, False, False]
                assert got["right"][:3] == [True] * 3 and got["untouched_misses"][3:] == [True, True]
            # another engine is not held to w1's quota
            assert w2.ask("put", keys=keys[3:4], size=MIB, seed=seed + 3)["ok"] == [True]
            # No room: the master routes puts to memory tiers only, and a 7 MiB value fits no
            # node's 6 MiB DRAM. It answers UNAVAILABLE; w2 keeps the value in its own store (SSD).
            unavailable = _outcomes(m, "unavailable")
            big = _keys(1)
            puts = _stat(w2, "remote_puts")
            assert w2.ask("put", keys=big, size=7 * MIB, seed=seed)["ok"] == [True]
            assert _outcomes(m, "unavailable") == unavailable + 1
            assert _stat(w2, "remote_puts") == puts  # stored locally, not routed to a peer
            assert _stat(w2, "quota_refused_puts") == 0
            got = w2.ask("get", keys=big, size=7 * MIB, seed=seed)
            assert got["ok"] == [True] and got["right"] == [True]
            assert w1.ask("exists", keys=big)["found"] == [True]  # the master knows w2 holds it
        finally:
            w1.close()
            w2.close()


@pytest.fixture
def ssd_spill(tmp_path):
    """An owner with 8 MiB of DRAM and an SSD tier, after its own puts of 12 values of 1 MiB
    (key i: seed + i), which its DRAM evicted to the SSD in part, flushed and reported; and a
    reader: (master, owner, reader, keys, seed)."""
    with running_master(settings=fast_settings(route_put_affinity="local")) as master:
        owner, reader = start_workers(
            dict(master=master.address, node_id=uid("owner"), dram=8 << 20, ssd_dir=str(tmp_path / "ssd")),
            dict(master=master.address, node_id=uid("reader"), dram=4 << 20),
        )
        try:
            seed = random.randrange(1 << 30)
            keys = _keys(12)
            for i, k in enumerate(keys):
                assert owner.ask("put", keys=[k], size=1 << 20, seed=seed + i)["ok"] == [True]
            owner.ask("flush")
            owner.ask("heartbeat")
            st = owner.ask("stats")["stats"]
            assert st["dram_evictions"] > 0 and st["ssd_keys"] == 12
            yield master, owner, reader, keys, seed
        finally:
            owner.close()
            reader.close()


def test_ssd_only_key_staged_by_its_owner(ssd_spill):
    """Values the owner evicted from DRAM to its SSD are staged there for a remote reader."""
    _master, _owner, reader, keys, seed = ssd_spill
    # Key i was put with seed + i: the batch get checks key i against seed + i as well.
    assert reader.ask("get", keys=keys, size=1 << 20, seed=seed)["right"] == [True] * 12


def test_cluster_wide_clear_removes_every_tier(ssd_spill):
    """UMBPMasterClient.clear_cluster() leaves nothing readable: the owner's DRAM values and the
    ones it keeps only on its SSD are all gone (MORI's EvictKey alone frees DRAM and refuses the
    rest), and a reader misses every key."""
    master, owner, reader, keys, seed = ssd_spill
    with UMBPMasterClient(master.address, node_id=uid("admin")) as admin:
        out = admin.clear_cluster()
    assert out["keys_evicted"] == 12 and out["keys_refused"] == 0, out
    st = owner.ask("stats")["stats"]
    assert st["ssd_keys"] == 0 and st["dram_keys"] == 0, st
    owner.ask("heartbeat")
    got = reader.ask("get", keys=keys, size=1 << 20, seed=seed)
    assert got["ok"] == [False] * 12 and all(got["untouched_misses"]), got


def test_remote_fetch_caching(master, pair):
    """cache_remote_fetches with SIZE admission (1 MiB here) keeps a local copy of small values
    read from a peer (then owned and served here), never of larger ones."""
    a, b = pair
    (c,) = start_workers(dict(master=master.address, node_id=uid("c"), dram=8 << 20, cache_remote=True))
    try:
        small, large = _keys(4), _keys(2)
        s = random.randrange(1 << 30)
        a.ask("put", keys=small, size=64 << 10, seed=s)  # routed to b
        a.ask("put", keys=large, size=2 << 20, seed=s + 100)
        assert c.ask("get", keys=small, size=64 << 10, seed=s)["right"] == [True] * 4
        assert c.ask("get", keys=large, size=2 << 20, seed=s + 100)["right"] == [True] * 2
        st = c.ask("stats")["stats"]
        assert st["remote_fetches_cached"] == 4 and st["dram_keys"] == 4
        before = st["remote_gets"]
        assert c.ask("get", keys=small, size=64 << 10, seed=s)["right"] == [True] * 4
        assert _stat(c, "remote_gets") == before  # served from the local copy
    finally:
        c.close()


def test_pull_finished_after_the_writers_deadline_is_not_committed(pair):
    """The owner reads a put's values from the writer inside the writer's BatchAllocateSlots; a
    read that ends after the writer's deadline is not committed (the writer has given up, and its
    staging buffer may hold other bytes by then): the owner aborts the slots, the writer counts
    the peer failed and keeps the values itself, and readers get the right bytes from it."""
    a, b = pair
    keys = _keys(4)
    seed = random.randrange(1 << 30)
    sa, sb = a.ask("stats")["stats"], b.ask("stats")["stats"]
    b.ask("late_pulls", count=1)
    assert a.ask("put", keys=keys, size=64 << 10, seed=seed)["ok"] == [True] * 4
    failed_at = time.monotonic()
    after = a.ask("stats")["stats"]
    assert after["remote_errors"] == sa["remote_errors"] + 1  # b's BatchAllocateSlots: its deadline
    assert (after["remote_puts"], after["pulled_puts"]) == (sa["remote_puts"], sa["pulled_puts"])
    assert after["dram_keys"] == sa["dram_keys"] + 4  # a kept them
    # b's late pull ends 0.3 s past a's deadline: then its slots are aborted, nothing is kept.
    give_up = time.monotonic() + 30
    while b.ask("stats")["stats"]["dram_pinned_bytes"] != sb["dram_pinned_bytes"]:
        assert time.monotonic() < give_up, "b's slots of the late pull were never released"
        time.sleep(0.1)
    time.sleep(0.5)
    st = b.ask("stats")["stats"]
    assert (st["dram_keys"], st["dram_pinned_bytes"]) == (sb["dram_keys"], sb["dram_pinned_bytes"])
    got = b.ask("get", keys=keys, size=64 << 10, seed=seed)
    assert got["right"] == [True] * 4
    assert b.ask("stats")["stats"]["remote_gets"] == sb["remote_gets"] + 4  # read from a: b has none
    # Past a's hold-off on b (2 x UMBP_LOOKUP_TIMEOUT_MS: 2 s), puts go to b again (pulled in time).
    time.sleep(max(0.0, failed_at + 2.2 - time.monotonic()))
    more = _keys(2)
    assert a.ask("put", keys=more, size=64 << 10, seed=seed + 8)["ok"] == [True] * 2
    st = a.ask("stats")["stats"]
    assert (st["pulled_puts"], st["remote_errors"]) == (sa["pulled_puts"] + 2, sa["remote_errors"] + 1)


def test_bad_arguments_write_nothing(pair):
    a, b = pair
    keys = _keys(2)
    with pytest.raises(AssertionError, match="InvalidArgument.*size of key .* must be > 0"):
        a.ask("put", keys=keys, size=0, seed=1)
    assert b.ask("exists", keys=keys)["found"] == [False, False]
    # A get's one native call checks its arguments before it reads anything.
    with pytest.raises(AssertionError, match=r"InvalidArgument.*batch_get_into_ptr: sizes\[0\] must be > 0"):
        a.ask("get", keys=keys, size=0, seed=1, pool=True)
    with pytest.raises(AssertionError, match=r"InvalidArgument.*batch_get_into_ptr: key.*bytes"):
        a.ask("get", keys=["k" * 70000], size=4096, seed=1, pool=True)


def test_get_peer_info_refuses_a_malformed_engine_desc(pair):
    """GetPeerInfo registers the caller's engine descriptor: one that does not unpack is refused,
    naming the field."""
    import grpc

    from mori.umbp.proto import require

    peer_pb, peer_grpc = require("umbp_peer_pb2"), require("umbp_peer_pb2_grpc")
    _a, b = pair
    with grpc.insecure_channel(b.info["peer"]) as channel:
        stub = peer_grpc.UMBPPeerStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.GetPeerInfo(
                peer_pb.GetPeerInfoRequest(engine_desc=bytes(random.randrange(256) for _ in range(24))), timeout=10
            )
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "engine_desc" in err.value.details()
        assert stub.GetPeerInfo(peer_pb.GetPeerInfoRequest(), timeout=10).engine_desc  # no descriptor: fine


def test_workers_on_grpcs_poll_engine_put_and_get(master):
    """docs/umbp-distributed.md (Round 9) recommends GRPC_POLL_STRATEGY=poll for worker processes
    (each serves UMBPPeer and calls the master and its peers): two workers on that engine put to
    each other and read back exact bytes, and grpc says at its start that it took the engine."""
    env = {"GRPC_POLL_STRATEGY": "poll", "GRPC_VERBOSITY": "DEBUG"}
    a, b = start_workers(
        dict(master=master.address, node_id=uid("a"), dram=16 << 20),
        dict(master=master.address, node_id=uid("b"), dram=160 << 20),
        env=env,
    )
    try:
        keys, seed = _keys(6), random.randrange(1 << 30)
        assert a.ask("put", keys=keys, size=96 << 10, seed=seed)["ok"] == [True] * 6  # routed to b
        assert a.ask("get", keys=keys, size=96 << 10, seed=seed)["right"] == [True] * 6
        assert _stat(a, "remote_gets") >= 6
        for w in (a, b):
            engines = set(re.findall(r"Using polling engine: (\w+)", w.stderr_so_far()))
            assert engines <= {"poll"}, engines  # (a grpc that does not log its engine says nothing)
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("how", ["owner", "cluster"])
def test_a_cleared_value_is_not_read_at_a_remembered_place(pair, master, how):
    """After the owners' clear() (or a cluster-wide clear) a reader that remembered the values'
    places misses them, though their bytes may still lie in the owner's arena: a clear is what
    a user asks for when the values must not be served any more (new weights, a new model), so a
    located read must not find them by their checksums either."""
    a, b = pair
    keys = _keys(4)
    seed = random.randrange(1 << 30)
    assert a.ask("put", keys=keys, size=64 << 10, seed=seed)["ok"] == [True] * 4
    assert a.ask("get", keys=keys, size=64 << 10, seed=seed, pool=True)["right"] == [True] * 4
    assert a.ask("locations", keys=keys, extend_s=60.0)["held"] == 4
    if how == "owner":  # each worker clears what it owns (most_available may have kept one on a)
        b.ask("clear")
        a.ask("clear")
    else:
        with UMBPMasterClient(master.address, node_id=uid("admin")) as admin:
            admin.clear_cluster()
    b.ask("heartbeat")
    got = a.ask("get", keys=keys, size=64 << 10, seed=seed, pool=True)
    assert got["ok"] == [False] * 4, got


def test_a_batch_spread_over_owners_puts_and_gets_side_by_side():
    """A batch the master spreads over three owners (most_available: each key's route counts
    against its owner's room) is put and read back with the three owners' calls side by side:
    every owner holds part of it, and every byte is right through the routed and the located
    reads."""
    with running_master(settings=fast_settings()) as master:
        _spread_over_three_owners(master)


def _spread_over_three_owners(master) -> None:
    a, o1, o2, o3 = start_workers(
        dict(master=master.address, node_id=uid("w"), dram=4 << 20, pool_bytes=16 << 20),
        *(dict(master=master.address, node_id=uid(f"o{k}"), dram=64 << 20) for k in range(3)),
    )
    try:
        keys = _keys(24)
        seed = random.randrange(1 << 30)
        before = [_stat(o, "dram_keys") for o in (o1, o2, o3)]
        assert a.ask("put", keys=keys, size=256 << 10, seed=seed, pool=True)["ok"] == [True] * 24
        held = [_stat(o, "dram_keys") - b for o, b in zip((o1, o2, o3), before)]
        assert sum(held) == 24 and min(held) > 0, held
        for o in (o1, o2, o3):
            o.ask("heartbeat")
        for _ in range(2):  # routed, then at the remembered places
            assert a.ask("get", keys=keys, size=256 << 10, seed=seed, pool=True)["right"] == [True] * 24
    finally:
        for w in (a, o1, o2, o3):
            w.close()
