# SPDX-License-Identifier: MIT
"""The master's pending puts (mori._C.umbp.PendingPuts): what a route finds, expiry, reports, and
a registry of many live puts that stays cheap to add to."""

from __future__ import annotations

import random

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
