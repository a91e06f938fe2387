# SPDX-License-Identifier: MIT
"""The master's pending puts (mori._C.umbp.PendingPuts): what a route finds, expiry, reports, and
a registry of many live puts that stays cheap to add to."""

from __future__ import annotations

import random
import time

import pytest

from mori import _C


def test_find_expire_done_and_replace():
    p = _C.umbp.PendingPuts()
    rng = random.Random()
    now = 1000.0 + rng.random()
    keys = [f"k{rng.getrandbits(64):016x}" for _ in range(50)]
    sizes = [rng.randrange(1, 1 << 30) for _ in keys]
    for i, (k, z) in enumerate(zip(keys, sizes)):
        p.add(k, f"node-{i % 3}", 2, f"10.0.0.{i % 3}:7", z, now + 1 + i, now)
    assert len(p) == 50
    got = p.find_batch(keys + ["absent"], now + 10.5)
    # expired by now + 10.5: the first ten (expires now + 1 + i <= now + 10.5 for i <= 9)
    assert got[:10] == [None] * 10 and got[-1] is None
    assert got[10:50] == [(f"node-{i % 3}", 2, f"10.0.0.{i % 3}:7", sizes[i]) for i in range(10, 50)]
    p.done(keys[10:20])
    assert p.find_batch(keys[10:21], now) == [None] * 10 + [("node-2", 2, "10.0.0.2:7", sizes[20])]
    p.add(keys[20], "node-x", 1, "10.9.9.9:7", 5, now + 100, now)  # a second route replaces the first
    assert p.find_batch([keys[20]], now) == [("node-x", 1, "10.9.9.9:7", 5)]


@pytest.mark.timeout(60)
def test_many_live_puts_stay_cheap_and_expired_ones_go():
    """Past 100k entries the expired ones are swept out; live ones do not make every add sweep
    the whole registry again (300k live adds took minutes that way)."""
    p = _C.umbp.PendingPuts()
    now = 5000.0
    for i in range(300_000):
        p.add(f"live-{i}", "n", 2, "a:1", 1, now + 3600, now)
    assert len(p) == 300_000
    for i in range(150_000):
        p.add(f"old-{i}", "n", 2, "a:1", 1, now + 1, now)
    # Later, the old ones have expired: the next sweep (at twice the size after the last) drops them.
    later = now + 10
    for i in range(450_001):
        p.add(f"new-{i}", "n", 2, "a:1", 1, later + 3600, later)
        if len(p) < 300_000 + 150_000 + i + 1:
            break
    assert len(p) < 300_000 + 150_000 + 450_001, "the expired puts were never swept out"
    assert p.find_batch(["old-7", "live-7"], later) == [None, ("n", 2, "a:1", 1)]


class _ReportedBetweenTheLooks:
    """A store whose first answer for `key` is a miss, and which then takes the owner's report of
    it (the index gets it, the pending record goes) before the servicer looks at the pending
    puts: what a heartbeat applied on another handler thread at that moment does."""

    def __init__(self, store, state, node_id: str, key: str) -> None:
        self._store, self._state, self._node, self._key = store, state, node_id, key
        self.raced = False

    def _report(self) -> None:
        from mori.umbp.distributed.master_records import EventBundle, KvEvent

        self.raced = True
        bundle = EventBundle(1, [KvEvent(True, self._key, 2, 4096, 0, 0)])
        self._store.apply_heartbeat(self._node, time.time(), {}, [bundle], False, 0)
        self._state.pending.done([self._key])

    def route_get_choose(self, keys, *args):
        out = self._store.route_get_choose(keys, *args)
        if not self.raced and self._key in keys:
            self._report()
        return out

    def lookup_batch(self, keys):
        out = self._store.lookup_batch(keys)
        if not self.raced and self._key in keys:
            self._report()
        return out

    def __getattr__(self, name):
        return getattr(self._store, name)


@pytest.mark.parametrize("rpc", ["BatchRouteGet", "BatchLookup"])
def test_a_key_reported_between_the_two_looks_is_found(rpc):
    """A route looks in the index, then at the pending puts; an owner's report adds the key to
    the index, then ends its pending record. A key reported between the two looks was in
    neither: the route now sees the report and looks again (it answered a miss before, for a
    key whose put had returned: a reader right after a writer missed it)."""
    from mori.umbp.distributed.master_metrics import MasterMetrics
    from mori.umbp.distributed.master_records import ClientRecord, TierCapacity
    from mori.umbp.distributed.master_service import MasterState, UMBPMasterServicer
    from mori.umbp.distributed.master_settings import MasterSettings
    from mori.umbp.distributed.master_store_memory import InMemoryMetadataStore
    from mori.umbp.proto import umbp_pb2 as pb

    store = InMemoryMetadataStore()
    state = MasterState(store, MasterSettings(), MasterMetrics(), peers=None)
    now = time.time()
    node = f"owner-{random.getrandbits(32):08x}"
    rec = ClientRecord(node, "127.0.0.1", "127.0.0.1:1", capacities={2: TierCapacity(1 << 30, 1 << 30)})
    assert store.register_client(rec, now, now + 60)
    key = f"k{random.getrandbits(64):016x}"
    state.pending.add(key, node, 2, "127.0.0.1:1", 4096, now + 60, now)  # routed for a put
    racing = _ReportedBetweenTheLooks(store, state, node, key)
    state.store = racing
    servicer = UMBPMasterServicer(state)
    if rpc == "BatchRouteGet":
        resp = servicer.BatchRouteGet(pb.BatchRouteGetRequest(node_id="reader", keys=[key, "absent"]), None)
        assert racing.raced
        assert resp.node_ref[0] != 0 and resp.nodes[resp.node_ref[0] - 1].node_id == node
        assert resp.node_ref[1] == 0
    else:
        resp = servicer.BatchLookup(pb.BatchLookupRequest(node_id="reader", keys=[key, "absent"]), None)
        assert racing.raced
        assert list(resp.found) == [True, False]
