# SPDX-License-Identifier: MIT
"""UMBPMasterClient against our master: the semantics MORI's test_umbp_master_client.py pins
(registration, the external-KV index, hit counters once per unique hash, batch caps, restarts)."""

from __future__ import annotations

import time

import pytest
from umbp_master_harness import redis_pair  # noqa: F401 - fixture
from umbp_master_harness import master_process, running_master, stop_process, uid

from mori.core.errors import InvalidArgument
from mori.core.ports import free_port, restartable_port
from mori.umbp import UMBPTierType
from mori.umbp.distributed import UMBPExternalKvHitCountEntry, UMBPExternalKvNodeMatch, UMBPMasterClient

GIB = 1 << 30
CAPS = {UMBPTierType.DRAM: (GIB, GIB)}


@pytest.fixture(scope="module")
def master():
    with running_master() as m:
        yield m.address


def _hashes(n: int) -> list[str]:
    return [uid("hash") for _ in range(n)]


class _Registered:
    def __init__(self, address, node_id=None, caps=None):
        self.node_id = node_id or uid("node")
        self.client = UMBPMasterClient(address, node_id=self.node_id, node_address=self.node_id)
        self.client.register_self(caps or CAPS)

    def __enter__(self):
        return self.node_id

    def __exit__(self, *exc):
        self.client.unregister_self()
        self.client.close()


def _mine(matches, node_id):
    return [m for m in matches if m.node_id == node_id]


def test_moris_module_names():
    import mori.cpp

    assert mori.cpp.UMBPMasterClient is UMBPMasterClient
    assert mori.cpp.UMBPExternalKvNodeMatch is UMBPExternalKvNodeMatch
    assert mori.cpp.UMBPExternalKvHitCountEntry is UMBPExternalKvHitCountEntry


def test_construction_never_raises_and_starts_unregistered():
    c = UMBPMasterClient(f"127.0.0.1:{free_port()}", node_id="n1", node_address="n1:8080")
    assert not c.is_registered()
    assert "n1" in repr(c)


def test_register_unregister_state(master):
    node = uid("reg")
    c = UMBPMasterClient(master, node_id=node, node_address=node + ":8080")
    c.register_self(CAPS)
    assert c.is_registered()
    with pytest.raises(RuntimeError, match="alive"):
        UMBPMasterClient(master, node_id=node).register_self(CAPS)
    c.unregister_self()
    assert not c.is_registered()
    c.unregister_self()  # not registered: a no-op
    with pytest.raises(InvalidArgument, match="node_id"):
        UMBPMasterClient(master).register_self(CAPS)
    with pytest.raises(ValueError, match="available"):
        UMBPMasterClient(master, node_id=uid("n")).register_self({UMBPTierType.DRAM: (1, 2)})


def test_connection_refused_raises_runtime_error_quickly():
    c = UMBPMasterClient(f"127.0.0.1:{free_port()}", node_id="n", node_address="n:1", lookup_timeout_ms=1500)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError):
        c.register_self(CAPS)
    with pytest.raises(RuntimeError):
        c.match_external_kv(["some-hash"])
    assert time.monotonic() - t0 < 4.0


def test_empty_and_unknown_queries(master):
    c = UMBPMasterClient(master)
    assert c.match_external_kv([]) == []
    assert c.match_external_kv(_hashes(5)) == []
    assert c.get_external_kv_hit_counts(_hashes(3)) == []


def test_report_revoke_round_trips(master):
    hashes = _hashes(4)
    caps = {UMBPTierType.HBM: (GIB, GIB), UMBPTierType.DRAM: (GIB, GIB)}
    with _Registered(master, caps=caps) as node:
        c = UMBPMasterClient(master)
        c.report_external_kv_blocks(node, hashes, UMBPTierType.HBM)
        c.report_external_kv_blocks(node, hashes, UMBPTierType.DRAM)
        c.report_external_kv_blocks(node, hashes, UMBPTierType.SSD)
        (m,) = _mine(c.match_external_kv(hashes), node)
        assert m.hashes_by_tier == {UMBPTierType.HBM: hashes, UMBPTierType.DRAM: hashes, UMBPTierType.SSD: hashes}
        assert m.matched_hash_count() == 4, "a hash in several tiers counts once"
        assert m.peer_address == ""
        c.revoke_external_kv_blocks(node, hashes, UMBPTierType.HBM)
        c.revoke_all_external_kv_blocks_at_tier(node, UMBPTierType.SSD)
        (m,) = _mine(c.match_external_kv(hashes), node)
        assert m.hashes_by_tier == {UMBPTierType.DRAM: hashes}
        c.revoke_external_kv_blocks(node, hashes[:2], UMBPTierType.DRAM)
        (m,) = _mine(c.match_external_kv(hashes), node)
        assert m.hashes_by_tier == {UMBPTierType.DRAM: hashes[2:]}
        c.revoke_all_external_kv_blocks_for_node(node)
        assert _mine(c.match_external_kv(hashes), node) == []


def test_reports_of_unregistered_nodes_are_ignored(master):
    c = UMBPMasterClient(master)
    hashes = _hashes(2)
    ghost = uid("ghost")
    c.report_external_kv_blocks(ghost, hashes, UMBPTierType.DRAM)
    assert _mine(c.match_external_kv(hashes), ghost) == []
    node = uid("dead")
    r = UMBPMasterClient(master, node_id=node, node_address=node)
    r.register_self(CAPS)
    r.unregister_self()
    c.report_external_kv_blocks(node, hashes, UMBPTierType.DRAM)
    assert _mine(c.match_external_kv(hashes), node) == []
    # revoking for an unknown node is a no-op
    c.revoke_external_kv_blocks(uid("unknown"), hashes, UMBPTierType.DRAM)
    c.revoke_all_external_kv_blocks_at_tier(uid("unknown"), UMBPTierType.DRAM)


def test_unregister_drops_the_nodes_external_kv(master):
    hashes = _hashes(3)
    reg = _Registered(master)
    c = UMBPMasterClient(master)
    c.report_external_kv_blocks(reg.node_id, hashes, UMBPTierType.DRAM)
    assert _mine(c.match_external_kv(hashes), reg.node_id)
    reg.__exit__()
    assert _mine(c.match_external_kv(hashes), reg.node_id) == []


def test_bad_arguments_raise_naming_them(master):
    c = UMBPMasterClient(master)
    with pytest.raises(RuntimeError, match="node_id"):
        c.report_external_kv_blocks("", ["h"], UMBPTierType.DRAM)
    with _Registered(master) as node:
        with pytest.raises(RuntimeError, match="hashes"):
            c.report_external_kv_blocks(node, [], UMBPTierType.DRAM)
        with pytest.raises(ValueError, match="tier"):
            c.report_external_kv_blocks(node, ["h"], UMBPTierType.Unknown)
        with pytest.raises(ValueError, match="hashes"):
            c.match_external_kv("not-a-list")


def test_hit_counts(master):
    hot, missing = uid("hot"), uid("missing")
    with _Registered(master) as a, _Registered(master) as b:
        c = UMBPMasterClient(master)
        c.report_external_kv_blocks(a, [hot], UMBPTierType.DRAM)
        c.report_external_kv_blocks(a, [hot], UMBPTierType.HBM)
        c.report_external_kv_blocks(b, [hot], UMBPTierType.DRAM)
        for _ in range(3):
            assert c.match_external_kv([hot])
        assert c.get_external_kv_hit_counts([hot]) == [], "count_as_hit=False records nothing"
        matches = c.match_external_kv([hot, hot, hot, missing], count_as_hit=True)
        assert {m.node_id for m in matches} == {a, b}
        counts = {e.hash: e.hit_count_total for e in c.get_external_kv_hit_counts([hot, hot, missing])}
        assert counts == {hot: 1}, "once per unique matched hash, however many nodes hold it"
        for _ in range(3):
            c.match_external_kv([hot], count_as_hit=True)
        c.revoke_external_kv_blocks(a, [hot], UMBPTierType.DRAM)
        c.revoke_external_kv_blocks(a, [hot], UMBPTierType.HBM)
        c.revoke_external_kv_blocks(b, [hot], UMBPTierType.DRAM)
        assert c.match_external_kv([hot], count_as_hit=True) == []
        (entry,) = c.get_external_kv_hit_counts([hot])
        assert (entry.hash, entry.hit_count_total) == (hot, 4), "counts survive revoke"


def test_oversized_hit_count_batch_is_refused(master):
    c = UMBPMasterClient(master)
    with pytest.raises(RuntimeError, match="UMBP_HIT_QUERY_MAX_BATCH"):
        c.get_external_kv_hit_counts(_hashes(4097))


def test_large_batch_and_multi_node(master):
    hashes = _hashes(500)
    with _Registered(master) as a, _Registered(master) as b:
        c = UMBPMasterClient(master)
        c.report_external_kv_blocks(a, hashes, UMBPTierType.DRAM)
        c.report_external_kv_blocks(b, hashes[:7], UMBPTierType.HBM)
        got = {m.node_id: m for m in c.match_external_kv(hashes + _hashes(10))}
        assert set(got[a].hashes_by_tier[UMBPTierType.DRAM]) == set(hashes)
        assert got[b].hashes_by_tier == {UMBPTierType.HBM: hashes[:7]}


def test_record_reprs():
    m = UMBPExternalKvNodeMatch()
    m.node_id = "my-node"
    m.hashes_by_tier = {UMBPTierType.HBM: ["h1", "h2"], UMBPTierType.DRAM: ["h2"]}
    assert "my-node" in repr(m) and m.matched_hash_count() == 2
    e = UMBPExternalKvHitCountEntry()
    e.hash, e.hit_count_total = "my-hash", 7
    assert "my-hash" in repr(e) and "7" in repr(e)


def _restart_keeps_external_kv(env: dict) -> bool:
    port = restartable_port()  # the master comes back on it
    node, hashes = uid("restart"), _hashes(3)
    proc = master_process(port, env)
    try:
        reg = UMBPMasterClient(f"127.0.0.1:{port}", node_id=node, node_address=node)
        reg.register_self(CAPS)
        q = UMBPMasterClient(f"127.0.0.1:{port}")
        q.report_external_kv_blocks(node, hashes, UMBPTierType.DRAM)
        q.match_external_kv(hashes, count_as_hit=True)
        assert _mine(q.match_external_kv(hashes), node)
        stop_process(proc)
        proc = master_process(port, env)
        q2 = UMBPMasterClient(f"127.0.0.1:{port}")
        kept = bool(_mine(q2.match_external_kv(hashes), node))
        counts = {e.hash: e.hit_count_total for e in q2.get_external_kv_hit_counts(hashes)}
        assert counts == ({h: 1 for h in hashes} if kept else {})
        return kept
    finally:
        stop_process(proc)


def test_restarted_in_memory_master_loses_external_state():
    assert _restart_keeps_external_kv({"UMBP_METADATA_BACKEND": "memory"}) is False


def test_restarted_redis_master_keeps_external_state(redis_pair):  # noqa: F811
    env = {"UMBP_METADATA_BACKEND": "redis", "UMBP_REDIS_URI": redis_pair[0].uri, "UMBP_REDIS_NAMESPACE": uid("ns")}
    assert _restart_keeps_external_kv(env) is True
