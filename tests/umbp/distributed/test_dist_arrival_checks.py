# SPDX-License-Identifier: MIT
"""Located reads over tcp check what they read by checksums hashed as the bytes land
(umbp/src/arrival_checksums.h): two workers on one host with the same-host copy path off
(MORI_IO_DIRECT=0), so reads go through the tcp lanes as between hosts. Values of sizes on and
around the checksum's 256 KiB chunk, read again at their remembered places: right bytes, each
value counted as checked on arrival; a place gone stale is still caught by the arrival check
and read through the routed path."""

from __future__ import annotations

import random

import pytest
from dist_harness import start_writer_and_owner
from umbp_master_harness import fast_settings, running_master, uid

pytestmark = pytest.mark.timeout(180)
CHUNK = 256 << 10


@pytest.fixture(scope="module")
def tcp_pair():
    with running_master(settings=fast_settings()) as m:
        a, b = start_writer_and_owner(m.address, env={"MORI_IO_DIRECT": "0"})
        try:
            yield a, b
        finally:
            a.close()
            b.close()


def _stats(w) -> dict:
    return w.ask("stats")["stats"]


# A value striped over the two lanes (above 192 KiB) lands its first chunk from both at once: the
# part ahead is noted and hashed from memory once the prefix reaches it, so every size counts.
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("size", [1, 4099, 64 << 10, 200 << 10, CHUNK - 1, CHUNK, CHUNK + 1, 360 << 10, 2 << 20])
def test_located_reads_are_checked_as_they_land(tcp_pair, size, batch):
    a, b = tcp_pair
    keys = [uid("k") for _ in range(batch)]
    seed = random.randrange(1 << 30)
    assert a.ask("put", keys=keys, size=size, seed=seed)["ok"] == [True] * batch
    assert a.ask("get", keys=keys, size=size, seed=seed, pool=True)["right"] == [True] * batch  # places learnt
    assert a.ask("locations", keys=keys, extend_s=60.0)["held"] == batch
    for _ in range(3):
        before = _stats(a)
        assert a.ask("get", keys=keys, size=size, seed=seed, pool=True)["right"] == [True] * batch
        after = _stats(a)
        assert after["location_cache_hits"] == before["location_cache_hits"] + batch, a.moved_since(before)
        assert after["location_cache_on_arrival"] == before["location_cache_on_arrival"] + batch, a.moved_since(before)


@pytest.mark.parametrize("size", [64 << 10, 360 << 10])
def test_a_stale_place_fails_its_arrival_check(tcp_pair, size):
    """keys[0]'s place moved onto keys[1]'s value: the bytes that land hash to keys[1]'s checksum,
    not keys[0]'s, so the read is stale (not corrupt) and keys[0] is read through the routed path."""
    a, b = tcp_pair
    keys = [uid("k") for _ in range(3)]
    seed = random.randrange(1 << 30)
    assert a.ask("put", keys=keys, size=size, seed=seed)["ok"] == [True] * 3
    assert a.ask("get", keys=keys, size=size, seed=seed, pool=True)["right"] == [True] * 3
    assert a.ask("locations", keys=keys, extend_s=60.0, misplace=[keys[0], keys[1]])["held"] == 3
    before = _stats(a)
    assert a.ask("get", keys=keys, size=size, seed=seed, pool=True)["right"] == [True] * 3
    after = _stats(a)
    assert after["location_cache_stale"] == before["location_cache_stale"] + 1, a.moved_since(before)
    assert after["location_cache_hits"] == before["location_cache_hits"] + 2, a.moved_since(before)
    assert after["location_cache_on_arrival"] == before["location_cache_on_arrival"] + 3, a.moved_since(before)
    assert after["remote_checksum_failures"] == before["remote_checksum_failures"]
