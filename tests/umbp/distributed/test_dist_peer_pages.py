# SPDX-License-Identifier: MIT
"""The owned-pages store's peer hooks (umbp/src/peer_pages.h) in one process, no master: slots
(allocate / commit / abort, write-once), read leases that pin and expire, SSD staging, the event
log with its sequence numbers, snapshots, master-driven eviction."""

from __future__ import annotations

import ctypes
import time

import numpy as np
import pytest

from mori import _C

pytestmark = pytest.mark.timeout(60)
umbp = _C.umbp
DRAM, SSD = umbp.UMBPTierType.DRAM, umbp.UMBPTierType.SSD
ADD, REMOVE = 0, 1


def owned_store(tmp_path=None, dram: int = 4 << 20):
    cfg = umbp.UMBPConfig()
    cfg.dram.capacity_bytes = dram
    cfg.dram.prefault = False
    cfg.ssd.enabled = tmp_path is not None
    if tmp_path is not None:
        cfg.ssd.storage_dir = str(tmp_path)
        cfg.ssd.capacity_bytes = 64 << 20
        cfg.ssd.segment_size_bytes = 4 << 20
        cfg.copy_pipeline.async_enabled = False
    d = umbp.UMBPDistributedConfig()
    d.master_config.master_address = "127.0.0.1:1"
    d.master_config.node_id = "n"
    d.master_config.node_address = "127.0.0.1"
    d.ssd_staging_buffer_size = 1 << 20
    d.ssd_staging_buffer_slots = 2
    cfg.distributed = d
    return umbp.UMBPClient(cfg, True)


def rand(n: int) -> np.ndarray:
    return np.random.default_rng().integers(0, 256, n, dtype=np.uint8)


def arena_view(store, offset: int, size: int) -> np.ndarray:
    base, cap = store.peer_arena()[:2]
    assert 0 <= offset and offset + size <= cap
    return np.frombuffer((ctypes.c_uint8 * size).from_address(base + offset), dtype=np.uint8)


@pytest.mark.parametrize("size,count", [(4096, 8), (256 << 10, 12)], ids=["serial", "team"])
def test_batch_commit_and_verify_hash_every_value(size, count):
    """commit() and verify() hash each value of a batch once, on the caller's thread (under 1 MiB)
    or on the hash team (1 MiB and more): every value published with its own checksum, and a
    reader's check true exactly for the values whose bytes match."""
    s = owned_store(dram=16 << 20)
    vals = [rand(size) for _ in range(count)]
    keys = [f"v{i}" for i in range(count)]
    grants = s.peer_allocate(keys, [size] * count)
    for (outcome, _slot, off), v in zip(grants, vals):
        assert outcome == 1
        arena_view(s, off, size)[:] = v
    assert s.peer_commit([g[1] for g in grants], keys) == [True] * count
    want = [umbp.value_checksum(v.ctypes.data, size) for v in vals]
    resolved = s.peer_resolve(keys)
    assert [r[4] for r in resolved] == want and [r[2] for r in resolved] == [g[2] for g in grants]
    got = [np.zeros(size, dtype=np.uint8) for _ in range(count)]
    for r, g in zip(resolved, got):
        g[:] = arena_view(s, r[2], size)  # what a reader's MORI-IO read lands
        s.peer_release(r[5])
    got[count // 2][size // 3] ^= 0x5A  # one value corrupted on the way
    assert s.peer_verify([g.ctypes.data for g in got], [size] * count, want) == [i != count // 2 for i in range(count)]
    with pytest.raises(Exception, match="verify: 2 ptrs, 1 sizes and 2 checksums"):
        s.peer_verify([got[0].ctypes.data, got[1].ctypes.data], [size], want[:2])


def test_slot_write_commit_read(tmp_path):
    s = owned_store()
    val = rand(100_000)
    ((outcome, slot, off),) = s.peer_allocate(["k"], [val.nbytes])
    assert outcome == 1 and off % 64 == 0
    assert not s.exists("k")  # invisible until committed
    arena_view(s, off, val.nbytes)[:] = val  # what a peer's MORI-IO write does
    assert s.peer_commit([slot], ["k"]) == [True]
    assert s.peer_commit([slot], ["k"]) == [False]  # a slot commits once
    out = np.zeros_like(val)
    assert s.get_into_ptr("k", out.ctypes.data, out.nbytes) and np.array_equal(out, val)
    # Write-once: the key cannot be allocated again.
    assert s.peer_allocate(["k"], [8])[0][0] == 2
    # Resolve: where it is, its checksum, a lease.
    ((found, tier, roff, size, checksum, lease),) = s.peer_resolve(["k"])
    assert found and tier == DRAM and roff == off and size == val.nbytes
    assert checksum == umbp.value_checksum(val.ctypes.data, val.nbytes)
    assert lease and s.peer_release(lease) and not s.peer_release(lease)
    assert s.peer_resolve(["absent"])[0][0] is False
    # Abort drops a pending slot and is idempotent; a key with an aborted slot can be put again.
    ((o2, slot2, _),) = s.peer_allocate(["k2"], [4096])
    assert s.peer_abort([slot2, slot2, 12345]) == [True, True, True]
    assert not s.exists("k2") and s.peer_commit([slot2], ["k2"]) == [False]
    assert s.peer_allocate(["k2"], [4096])[0][0] == 1
    # Larger than the arena: no space (the writer re-routes).
    assert s.peer_allocate(["huge"], [64 << 20])[0][0] == 4
    s.close()


def test_events_snapshot_and_evictions():
    s = owned_store(dram=1 << 20)
    vals = {f"e{i}": rand(200_000) for i in range(8)}  # more than 1 MiB: early ones get evicted
    for k, v in vals.items():
        assert s.put_from_ptr(k, v.ctypes.data, v.nbytes)
    events = s.peer_drain_events()
    seqs = [e[4] for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # gapless, increasing
    adds = [e[1] for e in events if e[0] == ADD]
    removes = [e[1] for e in events if e[0] == REMOVE]
    assert adds == list(vals) and removes and set(removes) < set(vals)
    assert all(e[2] == DRAM for e in events) and all(e[3] == 200_000 for e in events if e[0] == ADD)
    held = [k for k in vals if s.exists(k)]
    assert sorted(held) == sorted(set(vals) - set(removes))
    baseline, keys = s.peer_snapshot()
    assert baseline == seqs[-1] and sorted(k for k, _t, _z, _o, _c in keys) == sorted(held)
    # Each DRAM value's place and checksum, as its ADD event said and as a resolve says.
    places = {k: (o, c) for k, _t, _z, o, c in keys}
    add_places = {e[1]: (e[5], e[6]) for e in events if e[0] == ADD}
    for k in held:
        found, tier, off, _size, checksum, lease = s.peer_resolve([k])[0]
        assert found and tier == DRAM and checksum != 0
        assert places[k] == add_places[k] == (off, checksum)
        s.peer_release(lease)
    # Master-driven eviction: a leased key is kept (0 bytes freed), the others go, with REMOVE events.
    lease = s.peer_resolve([held[0]])[0][5]
    freed = s.peer_evict([held[0], held[1], "absent"])
    assert freed[0] == 0 and freed[1] >= 200_000 and freed[2] == 0
    assert [(e[0], e[1]) for e in s.peer_drain_events()] == [(REMOVE, held[1])]
    # The lease runs out by itself (UMBP_DRAM_READ_LEASE_MS, 500 ms), then the key can go.
    time.sleep(0.8)
    assert not s.peer_release(lease)
    assert s.peer_evict([held[0]])[0] > 0
    s.clear()
    assert sorted(e[1] for e in s.peer_drain_events()) == sorted([held[0]] + held[2:])
    s.close()


def test_ssd_only_value_is_staged(tmp_path):
    s = owned_store(tmp_path, dram=1 << 20)
    vals = {f"s{i}": rand(300_000) for i in range(6)}
    for k, v in vals.items():
        assert s.put_from_ptr(k, v.ctypes.data, v.nbytes)
    s.flush()
    ssd_only = [k for k in vals if s.peer_resolve([k])[0][1] == SSD]
    assert ssd_only, "nothing was evicted to the SSD"
    k = ssd_only[0]
    ev = s.peer_drain_events()
    assert (ADD, k, SSD) in [(e[0], e[1], e[2]) for e in ev] and (REMOVE, k, DRAM) in [(e[0], e[1], e[2]) for e in ev]
    staging_ptr, staging_size, slot = s.peer_arena()[2:]
    assert staging_size == 2 * slot and slot >= 300_000
    outcome, off, size, checksum, lease = s.peer_prepare_ssd_read(k, 300_000)
    assert outcome == 0 and size == 300_000 and lease
    staged = np.frombuffer((ctypes.c_uint8 * size).from_address(staging_ptr + off), dtype=np.uint8)
    assert np.array_equal(staged, vals[k]) and checksum == umbp.value_checksum(vals[k].ctypes.data, size)
    assert s.peer_prepare_ssd_read(k, 1000)[0] == 3  # larger than the reader's buffer
    assert s.peer_prepare_ssd_read("absent", 0)[0] == 1  # a miss
    second = s.peer_prepare_ssd_read(k, 0)
    assert second[0] == 0
    assert s.peer_prepare_ssd_read(k, 0)[0] == 2  # both slots leased: NO_SLOT (retry)
    assert s.peer_release(lease) and s.peer_release(second[4])
    assert s.peer_prepare_ssd_read(k, 0)[0] == 0
    s.close()


def test_peer_calls_refused_on_a_local_store():
    cfg = umbp.UMBPConfig()
    cfg.dram.capacity_bytes = 1 << 20
    cfg.ssd.enabled = False
    local = umbp.UMBPClient(cfg)
    with pytest.raises(RuntimeError, match="peer_"):
        local.peer_arena()
    local.close()
    with pytest.raises(ValueError, match="config.distributed is not set"):
        umbp.UMBPClient(cfg, True)
