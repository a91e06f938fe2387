# SPDX-License-Identifier: MIT
"""The native block index (mori._C.umbp.MasterIndex) against its Python reference
(master_block_index.BlockIndex): the same random operations, the same answers."""

from __future__ import annotations

import collections
import random

import pytest

from mori import _C
from mori.umbp.distributed.master_block_index import BlockIndex
from mori.umbp.distributed.master_records import GET_TIER_PRIORITY, ClientRecord, RoutedGets
from mori.umbp.distributed.master_routing import GetRouter
from mori.umbp.distributed.master_store import MetadataStore

TIERS = [int(t) for t in GET_TIER_PRIORITY]


def _native(shards: int = 8):
    return _C.umbp.MasterIndex(shards, TIERS)


def _populate(rng: random.Random, n_nodes: int = 5, n_keys: int = 400, n_ops: int = 3000):
    """The same random adds and removes applied to both indexes; their answers must agree."""
    nodes = [f"node-{rng.getrandbits(32):08x}-{i}" for i in range(n_nodes)]
    keys = [f"key-{rng.getrandbits(64):016x}" for _ in range(n_keys)]
    ref, nat = BlockIndex(4), _native()
    now = 1000.0
    for _ in range(n_ops):
        node, key, tier = rng.choice(nodes), rng.choice(keys), rng.choice(TIERS + [7])
        now += rng.random()
        if rng.random() < 0.7:
            size = rng.randrange(1, 1 << 30)
            assert nat.add(node, key, tier, size, now) == ref.add(node, key, tier, size, now)
        else:
            assert nat.remove(node, key, tier) == ref.remove(node, key, tier)
    return nodes, keys, ref, nat, now


def _copies(route_answer):
    """(node, tier, size) of each copy (the reference keeps no places; the native route's are
    checked through route_choose)."""
    return [tuple(tuple(c)[:3] for c in copies) for copies in route_answer]


def test_native_index_matches_the_reference_on_random_operations():
    rng = random.Random()
    nodes, keys, ref, nat, now = _populate(rng)
    assert len(nat) == len(ref) > 0
    queried = keys + [f"missing-{rng.getrandbits(32)}"]
    assert nat.contains(queried) == ref.contains(queried)
    for node in nodes + ["never-seen"]:
        assert sorted(nat.node_keys(node)) == sorted(ref.node_keys(node))
        assert sorted(nat.node_copies(node)) == sorted(ref.node_copies(node))
    # Routes: copies fastest tier first, insertion order within a tier, exclusions applied;
    # the keys answered get touched and leased exactly as in the reference.
    for _ in range(20):
        batch = rng.sample(queried, 64)
        exclude = frozenset(rng.sample(nodes, rng.randrange(0, 3)))
        now += 1.0
        lease = now + rng.choice([0.5, 2.0])
        assert _copies(nat.route(batch, list(exclude), now, lease)) == _copies(ref.route(batch, exclude, now, lease))
    for node in nodes:
        for tier in TIERS:
            for at in (now - 1.0, now + 0.7, now + 3.0):
                want = sorted((c.key, c.size, c.last_access) for c in ref.candidates(node, tier, at))
                assert sorted(nat.candidates(node, tier, at)) == want
    gone_node = nodes[0]
    assert sorted(nat.remove_node(gone_node)) == sorted(ref.remove_node(gone_node))
    assert nat.node_keys(gone_node) == [] and len(nat) == len(ref)
    assert nat.contains(queried) == ref.contains(queried)


def _reference_choose(
    ref: BlockIndex, batch, exclude, alive, now, lease, strategy: str, rng: random.Random
) -> RoutedGets:
    """The Python path (the stores' default route_get_choose) over the reference index."""

    class Store:
        route_get_batch = staticmethod(lambda keys, excl, t, until: ref.route(keys, excl, t, until))

    return MetadataStore.route_get_choose(Store(), batch, exclude, alive, now, lease, GetRouter(strategy, rng))


@pytest.mark.parametrize("strategy", ["tier_priority", "random"])
def test_native_choice_matches_the_reference(strategy):
    rng = random.Random()
    nodes, keys, ref, nat, now = _populate(rng)
    before = {k: ref.route([k], frozenset(), now, 0.0)[0] for k in keys}  # all copies (a lease of 0 changes nothing)
    nat.route(keys, [], now, 0.0)
    for _ in range(30):
        batch = rng.sample(keys, 96) + ["missing"]
        exclude = rng.sample(nodes, rng.randrange(0, 2))
        alive = {n: ClientRecord(n, n, n) for n in rng.sample(nodes, rng.randrange(1, len(nodes) + 1))}
        now += 1.0
        got = RoutedGets(*nat.route_choose(batch, exclude, alive, now, now + 2.0, strategy == "random"))
        want = _reference_choose(ref, batch, exclude, alive, now, now + 2.0, strategy, rng)
        assert got.node_ref.count(0) == got.misses == want.misses
        assert len(got.node_ref) == len(got.tier) == len(got.size) == len(batch)
        assert sorted(got.nodes) == sorted(set(got.nodes)) and sum(got.hits) == len(batch) - got.misses
        assert got.hits == [sum(1 for r in got.node_ref if r == i + 1) for i in range(len(got.nodes))]
        for i, key in enumerate(batch):
            live = [c for c in before.get(key, ()) if c.node_id in alive and c.node_id not in exclude]
            if strategy == "tier_priority" and live:
                live = [c for c in live if c.tier == live[0].tier]
            if not live:
                assert got.node_ref[i] == 0 and want.node_ref[i] == 0
                continue
            chosen = (got.nodes[got.node_ref[i] - 1], got.tier[i], got.size[i])
            assert chosen in [tuple(c)[:3] for c in live]
            if len(live) == 1:  # no draw to make: both paths answer the same copy
                assert chosen == (want.nodes[want.node_ref[i] - 1], want.tier[i], want.size[i])
        # the same keys were touched and leased
        for node in nodes:
            for tier in TIERS:
                want_c = sorted((c.key, c.size, c.last_access) for c in ref.candidates(node, tier, now + 1.0))
                assert sorted(nat.candidates(node, tier, now + 1.0)) == want_c


def test_native_choice_draws_every_copy_of_the_fastest_tier():
    nat = _native(2)
    for n in ("a", "b", "c"):
        nat.add(n, "k", TIERS[1], 10, 0.0)
    nat.add("d", "k", TIERS[2], 10, 0.0)
    seen = collections.Counter()
    for _ in range(300):
        nodes, hits, refs, tiers, sizes, misses, _offs, _sums = nat.route_choose(
            ["k"], [], ["a", "b", "c", "d"], 1.0, 2.0
        )
        seen[nodes[0]] += 1
        assert (refs, tiers, sizes, misses, hits) == ([1], [TIERS[1]], [10], 0, [1])
    assert set(seen) == {"a", "b", "c"} and min(seen.values()) > 50
    nodes, _, _, tiers, _, _, _, _ = nat.route_choose(["k"], ["a", "b"], ["a", "b", "c", "d"], 1.0, 2.0)
    assert (nodes, tiers) == (["c"], [TIERS[1]])
    nodes, _, _, tiers, _, _, _, _ = nat.route_choose(["k"], [], ["d"], 1.0, 2.0)
    assert (nodes, tiers) == (["d"], [TIERS[2]])


def test_native_index_hands_out_each_copy_place():
    """A copy's arena offset and checksum (from its owner's ADD event) come back with the route
    that chose it; a later ADD of the same copy moves it; a copy of unknown place gives 0s."""
    rng = random.Random()
    nat = _native(4)
    keys = [f"p{i}" for i in range(40)]
    want = {}
    for k in keys:
        off, ck = rng.randrange(1, 1 << 40) * 64, rng.randrange(1, 1 << 64)
        nat.add("a", k, TIERS[1], 4096, 0.0, off, ck)
        want[k] = (off, ck)
    moved = keys[3]
    want[moved] = (rng.randrange(1, 1 << 30) * 64, rng.randrange(1, 1 << 64))
    nat.add("a", moved, TIERS[1], 4096, 0.0, *want[moved])
    nat.add("b", "unplaced", TIERS[2], 10, 0.0)
    nodes, _, refs, _, _, misses, offs, sums = nat.route_choose(keys + ["unplaced", "absent"], [], ["a", "b"], 1.0, 2.0)
    assert misses == 1 and refs[-1] == 0 and (offs[-1], sums[-1]) == (0, 0)
    assert list(zip(offs[:-2], sums[:-2])) == [want[k] for k in keys]
    assert nodes[refs[-2] - 1] == "b" and (offs[-2], sums[-2]) == (0, 0)


def test_native_index_refuses_bad_arguments():
    with pytest.raises(ValueError, match="shards"):
        _C.umbp.MasterIndex(0, TIERS)
    nat = _native()
    with pytest.raises(ValueError, match=r"keys\[1\]"):
        nat.route_choose(["a", 5], [], [], 0.0, 0.0)
    with pytest.raises(ValueError, match=r"alive\[0\]"):
        nat.route_choose(["a"], [], [b"x"], 0.0, 0.0)
    with pytest.raises(TypeError):
        nat.contains(None)
    assert len(nat) == 0
