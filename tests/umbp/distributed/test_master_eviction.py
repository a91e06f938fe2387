# SPDX-License-Identifier: MIT
"""Master-driven eviction through the peers (watermarks, LRU, leased keys skipped, pluggable
strategy), the cluster-wide clear, and per-engine quotas."""

from __future__ import annotations

import random
import time

import grpc
import pytest
from umbp_master_harness import DRAM, GIB, PeerSession, TestPeer, fast_settings, pb, pb_grpc, running_master, uid

from mori.umbp.distributed import UMBPMasterClient
from mori.umbp.distributed.master_eviction import LruStrategy, make_strategy, register_strategy
from mori.umbp.distributed.master_records import EvictionCandidate

MIB = 1 << 20


def _setup(m, n_keys=10, size=MIB, total=10 * MIB, pinned=()):
    keys = [uid("k") for _ in range(n_keys)]
    peer = TestPeer({k: size for k in keys}, pinned=frozenset(pinned))
    node = PeerSession(m.address, uid("n"), {DRAM: (total, total - n_keys * size)}, peer_address=peer.address)
    node.heartbeat([("add", k, DRAM, size) for k in keys])
    return keys, peer, node


def test_eviction_brings_a_full_tier_to_the_low_watermark_lru_first():
    with running_master(settings=fast_settings(eviction_high_wm=0.55, eviction_low_wm=0.5)) as m:
        keys, peer, node = _setup(m)  # 10 x 1 MiB in 10 MiB: 100% used
        stub = pb_grpc.UMBPMasterStub(grpc.insecure_channel(m.address))
        # read keys 0..5 (in order): they get leases and newer access times
        for k in keys[:6]:
            stub.RouteGet(pb.RouteGetRequest(key=k), timeout=5)
            time.sleep(0.002)
        freed = m.state.eviction.run_once()
        # 5 MiB must go; keys 0..5 are leased, so 6..9 (4 MiB) are all that can
        assert freed == {node.node_id: 4 * MIB}
        assert sorted(peer.evict_requests[0]) == sorted(keys[6:])
        # after the leases (2 s) run out, LRU order picks the oldest reads first
        node.caps[DRAM] = (10 * MIB, 4 * MIB)  # the peer's new truth: 6 MiB used
        node.heartbeat([("remove", k, DRAM, 0) for k in keys[6:]])
        freed = m.state.eviction.run_once(now=time.time() + 3)
        assert freed == {node.node_id: MIB}  # 6 used, low watermark 5: one key
        assert peer.evict_requests[1] == [keys[0]]
        peer.stop()


def test_peer_has_the_last_word_and_index_changes_only_by_events():
    with running_master(settings=fast_settings(eviction_high_wm=0.5, eviction_low_wm=0.01)) as m:
        keys, peer, node = _setup(m, pinned=[])
        peer.pinned = frozenset(keys[:3])  # being served: the peer refuses these
        freed = m.state.eviction.run_once()
        assert freed == {node.node_id: 7 * MIB}
        stub = pb_grpc.UMBPMasterStub(grpc.insecure_channel(m.address))
        assert all(stub.BatchLookup(pb.BatchLookupRequest(keys=keys), timeout=5).found), (
            "the index shrinks on the peer's REMOVE events, not on EvictKey"
        )
        node.heartbeat([("remove", k, DRAM, 0) for k in keys[3:]])
        assert list(stub.BatchLookup(pb.BatchLookupRequest(keys=keys), timeout=5).found) == [True] * 3 + [False] * 7
        peer.stop()


def test_strategies_are_pluggable():
    c = [EvictionCandidate(uid("k"), random.randrange(1, 100), random.random()) for _ in range(20)]
    lru = LruStrategy().select(c, bytes_needed=150)
    assert lru == sorted(c, key=lambda x: (x.last_access, x.key))[: len(lru)]
    assert sum(x.size for x in lru) >= 150 and sum(x.size for x in lru[:-1]) < 150
    big = make_strategy("largest_first").select(c, bytes_needed=150)
    assert big[0].size == max(x.size for x in c)

    class Newest:
        def select(self, candidates, bytes_needed):
            return sorted(candidates, key=lambda x: -x.last_access)[:1]

    register_strategy("newest-test", Newest)
    assert make_strategy("newest-test").select(c, 1) == [max(c, key=lambda x: x.last_access)]
    with pytest.raises(ValueError, match="UMBP_EVICTION_STRATEGY"):
        make_strategy("no-such")


def test_cluster_wide_clear():
    with running_master() as m:
        keys, peer, node = _setup(m, n_keys=6)
        keys2, peer2, node2 = _setup(m, n_keys=3)
        peer2.pinned = frozenset(keys2[:1])
        c = UMBPMasterClient(m.address, node_id="admin")
        node.stub.ReportExternalKvBlocks(
            pb.ReportExternalKvBlocksRequest(node_id=node.node_id, hashes=["h1", "h2"], tier=DRAM), timeout=5
        )
        dead = PeerSession(m.address, uid("dead"), {DRAM: (GIB, GIB)}, peer_address="127.0.0.1:1")
        dead.heartbeat([("add", uid("x"), DRAM, 1)])
        out = c.clear_cluster()
        assert out["keys_evicted"] == 8 and out["keys_refused"] == 1
        assert out["bytes_freed"] == 8 * MIB
        assert out["unreachable_nodes"] == [dead.node_id]
        assert peer.values == {} and list(peer2.values) == keys2[:1]
        assert c.match_external_kv(["h1", "h2"]) == []
        peer.stop()
        peer2.stop()


def test_engine_quota_refuses_puts_past_it():
    with running_master() as m:
        node = PeerSession(m.address, uid("n"), {DRAM: (GIB, GIB)})
        writer = uid("engine")
        c = UMBPMasterClient(m.address, node_id=writer)
        c.set_engine_quota(writer, 10 * MIB)
        keys = [uid("q") for _ in range(4)]
        got = c.batch_route_put(keys, [4 * MIB] * 4)
        assert [g if g is None else g[0] for g in got] == [node.node_id, node.node_id, None, None]
        assert c.get_engine_usage(writer) == {"quota_bytes": 10 * MIB, "used_bytes": 0, "pending_bytes": 8 * MIB}
        node.heartbeat([("add", k, DRAM, 4 * MIB) for k in keys[:2]])
        assert c.get_engine_usage(writer) == {"quota_bytes": 10 * MIB, "used_bytes": 8 * MIB, "pending_bytes": 0}
        # another engine is not limited by this one's quota
        other = UMBPMasterClient(m.address, node_id=uid("other"))
        assert other.batch_route_put([keys[2]], [4 * MIB])[0][0] == node.node_id
        # freeing the writer's keys gives its budget back
        node.heartbeat([("remove", keys[0], DRAM, 0)])
        assert c.get_engine_usage(writer)["used_bytes"] == 4 * MIB
        assert c.batch_route_put([keys[3]], [4 * MIB])[0][0] == node.node_id
        with pytest.raises(ValueError, match="engine_id"):
            c.set_engine_quota("", 5)


def test_quota_has_its_own_outcome_and_no_room_stays_unavailable():
    """Over quota is QUOTA_EXCEEDED (with the quota), single and batch; no room is UNAVAILABLE."""
    with running_master() as m:
        node = PeerSession(m.address, uid("n"), {DRAM: (64 * MIB, 64 * MIB)})
        writer = uid("engine")
        quota = random.randrange(2, 8) * MIB
        UMBPMasterClient(m.address, node_id=writer).set_engine_quota(writer, quota)
        stub = pb_grpc.UMBPMasterStub(grpc.insecure_channel(m.address))
        r = stub.RoutePut(pb.RoutePutRequest(key=uid("q"), node_id=writer, block_size=quota + 1), timeout=5)
        assert (r.outcome, r.quota_bytes, r.node_id) == (pb.ROUTE_PUT_OUTCOME_QUOTA_EXCEEDED, quota, "")
        b = stub.BatchRoutePut(
            pb.BatchRoutePutRequest(node_id=writer, keys=[uid("q"), uid("q")], block_sizes=[quota, 1]), timeout=5
        )
        assert [(e.outcome, e.quota_bytes) for e in b.entries] == [
            (pb.ROUTE_PUT_OUTCOME_ROUTED, 0),
            (pb.ROUTE_PUT_OUTCOME_QUOTA_EXCEEDED, quota),
        ]
        assert b.entries[0].node_id == node.node_id
        # no node has room (another engine, no quota): still UNAVAILABLE, no quota named
        r = stub.RoutePut(pb.RoutePutRequest(key=uid("q"), node_id=uid("other"), block_size=65 * MIB), timeout=5)
        assert (r.outcome, r.quota_bytes) == (pb.ROUTE_PUT_OUTCOME_UNAVAILABLE, 0)
