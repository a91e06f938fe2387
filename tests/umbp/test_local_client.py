# SPDX-License-Identifier: MIT
"""mori.umbp.UMBPClient in local mode: MORI's semantics (round trip, write-once, page-first K/V
batches, batch_exists_consecutive), argument errors, DRAM eviction (watermarks, prefix depth,
promote-on-read), SSD spill and read-back, the copy pipeline, shared-SSD roles, close()."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import mori.cpp
import mori.umbp as umbp
from mori.umbp import UMBPClient, UMBPConfig

KiB = 1024
MiB = 1024 * KiB


def make_client(
    dram_bytes: int = 4 * MiB,
    ssd_dir: Path | None = None,
    ssd_bytes: int = 64 * MiB,
    **eviction: object,
) -> UMBPClient:
    cfg = UMBPConfig()
    cfg.dram.capacity_bytes = dram_bytes
    cfg.ssd.enabled = ssd_dir is not None
    if ssd_dir is not None:
        cfg.ssd.storage_dir = str(ssd_dir)
        cfg.ssd.capacity_bytes = ssd_bytes
    for name, value in eviction.items():
        setattr(cfg.eviction, name, value)
    return UMBPClient(cfg)


def random_bytes(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 256, size=n, dtype=np.uint8)


class PageFirstKvPool:
    """A host KV pool laid out page-first: page p holds its K block then its V block."""

    def __init__(self, num_pages: int, block_bytes: int) -> None:
        self.block_bytes = block_bytes
        self.buf = np.zeros(num_pages * 2 * block_bytes, dtype=np.uint8)

    def page_ptrs(self, pages: list[int]) -> tuple[list[int], list[int]]:
        base = self.buf.ctypes.data
        ptrs: list[int] = []
        for p in pages:
            k = base + p * 2 * self.block_bytes
            ptrs += [k, k + self.block_bytes]
        return ptrs, [self.block_bytes] * len(ptrs)

    def page(self, p: int) -> np.ndarray:
        return self.buf[p * 2 * self.block_bytes : (p + 1) * 2 * self.block_bytes]


def kv_keys(hashes: list[str]) -> list[str]:
    return [f"{h}_{part}" for h in hashes for part in ("k", "v")]


def test_round_trip_exists_clear() -> None:
    rng = np.random.default_rng(1)
    client = make_client()
    data = random_bytes(rng, 4099)
    out = np.zeros_like(data)
    assert client.put_from_ptr("legacy_key", data.ctypes.data, data.size)
    assert client.exists("legacy_key")
    assert not client.exists("other_key")
    assert client.get_into_ptr("legacy_key", out.ctypes.data, out.size)
    assert np.array_equal(out, data)
    assert client.clear()
    assert not client.exists("legacy_key")
    out[:] = 7
    assert not client.get_into_ptr("legacy_key", out.ctypes.data, out.size)
    assert (out == 7).all()
    assert client.get_deployment_mode() == umbp.UMBPDeploymentMode.Local
    assert not client.is_distributed()


def test_mori_cpp_carries_the_umbp_names() -> None:
    for name in umbp.__all__:
        assert getattr(mori.cpp, name) is getattr(umbp, name)
    assert len(umbp.__all__) == 21


@pytest.mark.parametrize("with_ssd", [False, True])
def test_page_first_batches(tmp_path: Path, with_ssd: bool) -> None:
    rng = np.random.default_rng(2)
    client = make_client(ssd_dir=tmp_path / "ssd" if with_ssd else None)
    pool = PageFirstKvPool(num_pages=6, block_bytes=3 * KiB)
    pool.buf[:] = random_bytes(rng, pool.buf.size)
    expected = pool.buf.copy()
    keys = kv_keys([f"hash_{i}" for i in range(6)])
    ptrs, sizes = pool.page_ptrs(list(range(6)))
    assert client.batch_put_from_ptr(keys, ptrs, sizes) == [True] * 12
    pool.buf[:] = 0
    assert client.batch_get_into_ptr(keys, ptrs, sizes) == [True] * 12
    assert np.array_equal(pool.buf, expected)
    assert client.batch_exists(keys + ["missing_k"]) == [True] * 12 + [False]
    assert client.batch_exists_consecutive(keys + ["missing_k"]) == len(keys)
    assert client.batch_exists_consecutive(["missing_k"] + keys) == 0
    assert client.batch_exists_consecutive(keys[:5] + ["missing_k"] + keys[5:]) == 5
    assert client.clear()
    assert client.batch_exists_consecutive(keys) == 0
    assert client.batch_get_into_ptr(keys, ptrs, sizes) == [False] * 12


@pytest.mark.parametrize("with_ssd", [False, True])
def test_repeated_put_keeps_original_value(tmp_path: Path, with_ssd: bool) -> None:
    rng = np.random.default_rng(3)
    client = make_client(ssd_dir=tmp_path / "ssd" if with_ssd else None)
    pool = PageFirstKvPool(num_pages=1, block_bytes=2 * KiB)
    keys = kv_keys(["dedup"])
    ptrs, sizes = pool.page_ptrs([0])
    first = random_bytes(rng, pool.buf.size)
    pool.buf[:] = first
    assert client.batch_put_from_ptr(keys, ptrs, sizes) == [True, True]
    pool.buf[:] = random_bytes(rng, pool.buf.size)
    assert client.batch_put_from_ptr(keys, ptrs, sizes) == [True, True]
    assert client.put_from_ptr(keys[0], ptrs[0], sizes[0])
    pool.buf[:] = 0
    assert client.batch_get_into_ptr(keys, ptrs, sizes) == [True, True]
    assert np.array_equal(pool.buf, first)
    # A duplicate inside one batch: the first occurrence is stored.
    a, b = random_bytes(rng, 512), random_bytes(rng, 512)
    assert client.batch_put_from_ptr(["twice", "twice"], [a.ctypes.data, b.ctypes.data], [512, 512]) == [True, True]
    out = np.zeros(512, dtype=np.uint8)
    assert client.get_into_ptr("twice", out.ctypes.data, 512)
    assert np.array_equal(out, a)


def test_get_with_the_wrong_size_is_a_miss() -> None:
    rng = np.random.default_rng(4)
    client = make_client()
    data = random_bytes(rng, 1000)
    assert client.put_from_ptr("k", data.ctypes.data, data.size)
    out = np.full(2000, 9, dtype=np.uint8)
    assert not client.get_into_ptr("k", out.ctypes.data, 999)
    assert not client.get_into_ptr("k", out.ctypes.data, 1001)
    assert (out == 9).all()
    assert client.get_into_ptr("k", out.ctypes.data, 1000)
    assert np.array_equal(out[:1000], data)


def test_argument_errors_name_the_argument_and_write_nothing() -> None:
    rng = np.random.default_rng(5)
    client = make_client()
    data = random_bytes(rng, 256)
    p = data.ctypes.data

    def refused(fragment: str, call, *args) -> None:
        with pytest.raises(ValueError, match=fragment):
            call(*args)

    refused("src is a null pointer", client.put_from_ptr, "a", 0, 16)
    refused("size must be > 0", client.put_from_ptr, "a", p, 0)
    refused("key must not be empty", client.put_from_ptr, "", p, 16)
    refused("key is 4033 bytes, over the limit", client.put_from_ptr, "x" * 4033, p, 16)
    refused("dst is a null pointer", client.get_into_ptr, "a", 0, 16)
    refused("size must be > 0", client.get_into_ptr, "a", p, 0)
    refused("key must not be empty", client.exists, "")
    refused("ptrs has 1 entries, keys 2", client.batch_put_from_ptr, ["a", "b"], [p], [8, 8])
    refused("sizes has 1 entries, keys 2", client.batch_put_from_ptr, ["a", "b"], [p, p], [8])
    refused("ptrs\\[1\\] is a null pointer", client.batch_put_from_ptr, ["a", "b"], [p, 0], [8, 8])
    refused("sizes\\[1\\] must be > 0", client.batch_put_from_ptr, ["a", "b"], [p, p], [8, 0])
    refused("keys\\[1\\] is 4033 bytes", client.batch_put_from_ptr, ["a", "x" * 4033], [p, p], [8, 8])
    refused("depths has 1 entries, keys 2", client.batch_put_from_ptr_with_depth, ["a", "b"], [p, p], [8, 8], [1])
    refused("ptrs has 1 entries, keys 2", client.batch_get_into_ptr, ["a", "b"], [p], [8, 8])
    refused("keys\\[0\\] must not be empty", client.batch_exists, [""])
    refused("keys\\[2\\] must not be empty", client.batch_exists_consecutive, ["a", "b", ""])
    with pytest.raises(TypeError):
        client.put_from_ptr("a", -1, 8)
    # Nothing of any refused call was stored.
    assert client.batch_exists(["a", "b"]) == [False, False]
    assert client.stats()["puts"] == 0
    # Accepted at the limit.
    assert client.put_from_ptr("k" * 4032, p, 256)
    assert client.exists("k" * 4032)


def test_dram_only_evicts_at_the_high_watermark_down_to_the_low_one() -> None:
    rng = np.random.default_rng(6)
    value = 4 * KiB
    client = make_client(dram_bytes=64 * KiB)  # high 0.9 -> 14 values fit, low 0.7 -> 11
    values = [random_bytes(rng, value) for _ in range(15)]
    for i in range(14):
        assert client.put_from_ptr(f"v{i}", values[i].ctypes.data, value)
    assert client.stats()["dram_evictions"] == 0
    assert client.put_from_ptr("v14", values[14].ctypes.data, value)
    present = [client.exists(f"v{i}") for i in range(15)]
    # Down to <= 0.7 * 64 KiB with the new value: 10 old ones stay, the 4 oldest go.
    assert present == [False] * 4 + [True] * 11
    assert client.stats()["dram_evictions"] == 4
    out = np.zeros(value, dtype=np.uint8)
    for i in range(4, 15):
        assert client.get_into_ptr(f"v{i}", out.ctypes.data, value)
        assert np.array_equal(out, values[i])
    # Larger than the whole tier, and no SSD: refused and counted.
    big = random_bytes(rng, 65 * KiB)
    assert not client.put_from_ptr("big", big.ctypes.data, big.size)
    assert client.stats()["put_refusals"] == 1


def _expected_evictions(depths: list[int], window: int, count: int) -> set[int]:
    """MORI's rule: among the `window` oldest entries, the deepest goes (the oldest of equals)."""
    order = list(range(len(depths)))  # oldest first
    gone: set[int] = set()
    for _ in range(count):
        candidates = order[:window]
        victim = max(candidates, key=lambda i: (max(depths[i], 0), -order.index(i)))
        order.remove(victim)
        gone.add(victim)
    return gone


@pytest.mark.parametrize("window", [16, 5, 1])
def test_prefix_depth_eviction_order(window: int) -> None:
    rng = np.random.default_rng(7 + window)
    value = 4 * KiB
    client = make_client(dram_bytes=64 * KiB, candidate_window=window)
    depths = [int(d) for d in rng.permutation(14)]
    depths[3] = -1  # no depth: counts as 0
    vals = [random_bytes(rng, value) for _ in range(15)]
    keys = [f"page{i}" for i in range(14)]
    assert (
        client.batch_put_from_ptr_with_depth(keys, [v.ctypes.data for v in vals[:14]], [value] * 14, depths)
        == [True] * 14
    )
    assert client.put_from_ptr("trigger", vals[14].ctypes.data, value)
    gone = {i for i in range(14) if not client.exists(keys[i])}
    assert gone == _expected_evictions(depths, window, 4)


@pytest.mark.parametrize("promote", [True, False])
def test_promote_on_read_keeps_a_read_key(promote: bool) -> None:
    rng = np.random.default_rng(8)
    value = 4 * KiB
    client = make_client(dram_bytes=64 * KiB, auto_promote_on_read=promote)
    vals = [random_bytes(rng, value) for _ in range(15)]
    for i in range(14):
        assert client.put_from_ptr(f"v{i}", vals[i].ctypes.data, value)
    out = np.zeros(value, dtype=np.uint8)
    assert client.get_into_ptr("v0", out.ctypes.data, value)
    assert np.array_equal(out, vals[0])
    assert client.put_from_ptr("v14", vals[14].ctypes.data, value)
    present = [client.exists(f"v{i}") for i in range(5)]
    assert present == ([True, False, False, False, False] if promote else [False, False, False, False, True])


def test_spill_to_ssd_read_back_then_clear(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    value = 64 * KiB
    client = make_client(dram_bytes=512 * KiB, ssd_dir=tmp_path / "ssd")
    vals = {f"spill{i}": random_bytes(rng, value) for i in range(40)}  # 2.5 MiB through 512 KiB
    keys = list(vals)
    for chunk in range(0, 40, 8):
        ks = keys[chunk : chunk + 8]
        assert client.batch_put_from_ptr(ks, [vals[k].ctypes.data for k in ks], [value] * 8) == [True] * 8
    assert client.flush()
    stats = client.stats()
    assert stats["dram_evictions"] > 0
    assert stats["ssd_keys"] == 40
    assert client.batch_exists_consecutive(keys) == 40
    outs = [np.zeros(value, dtype=np.uint8) for _ in keys]
    assert client.batch_get_into_ptr(keys, [o.ctypes.data for o in outs], [value] * 40) == [True] * 40
    for k, o in zip(keys, outs):
        assert np.array_equal(o, vals[k])
    after = client.stats()
    assert after["ssd_hits"] > 0 and after["dram_hits"] + after["ssd_hits"] == 40 and after["misses"] == 0
    # Write-once holds across the tiers too.
    first_ssd_only = keys[0]
    other = random_bytes(rng, value)
    assert client.put_from_ptr(first_ssd_only, other.ctypes.data, value)
    out = np.zeros(value, dtype=np.uint8)
    assert client.get_into_ptr(first_ssd_only, out.ctypes.data, value)
    assert np.array_equal(out, vals[first_ssd_only])
    assert client.clear()
    assert client.batch_exists(keys) == [False] * 40
    assert client.batch_get_into_ptr(keys, [o.ctypes.data for o in outs], [value] * 40) == [False] * 40
    assert client.stats()["ssd_keys"] == 0


def test_a_new_client_finds_what_the_last_one_wrote(tmp_path: Path) -> None:
    rng = np.random.default_rng(10)
    vals = {f"r{i}": random_bytes(rng, 10_000 + i) for i in range(10)}
    vals["L" * 4032] = random_bytes(rng, 777)  # the longest key there is
    first = make_client(ssd_dir=tmp_path / "ssd")
    for k, v in vals.items():
        assert first.put_from_ptr(k, v.ctypes.data, v.size)
    first.close()
    with pytest.raises(RuntimeError, match="closed"):
        first.exists("r0")
    second = make_client(ssd_dir=tmp_path / "ssd")
    for k, v in vals.items():
        out = np.zeros_like(v)
        assert second.get_into_ptr(k, out.ctypes.data, out.size)
        assert np.array_equal(out, v)
    assert second.stats()["ssd_hits"] == 11


@pytest.mark.parametrize("async_enabled,queue_depth", [(True, 1), (False, 4096)])
def test_copy_pipeline_loses_nothing(tmp_path: Path, async_enabled: bool, queue_depth: int) -> None:
    rng = np.random.default_rng(11)
    cfg = UMBPConfig()
    cfg.dram.capacity_bytes = 256 * KiB
    cfg.ssd.storage_dir = str(tmp_path / "ssd")
    cfg.ssd.capacity_bytes = 64 * MiB
    cfg.copy_pipeline.async_enabled = async_enabled
    cfg.copy_pipeline.queue_depth = queue_depth
    cfg.copy_pipeline.worker_threads = 1
    cfg.copy_pipeline.batch_max_ops = 3
    client = UMBPClient(cfg)
    vals = [random_bytes(rng, 16 * KiB) for _ in range(48)]
    for i, v in enumerate(vals):
        assert client.put_from_ptr(f"c{i}", v.ctypes.data, v.size)
    if not async_enabled:
        assert client.stats()["ssd_keys"] == 48  # written before each put returned
    assert client.flush()
    stats = client.stats()
    assert stats["ssd_keys"] == 48 and stats["ssd_copy_failures"] == 0
    for i, v in enumerate(vals):
        out = np.zeros_like(v)
        assert client.get_into_ptr(f"c{i}", out.ctypes.data, v.size)
        assert np.array_equal(out, v)


def test_shared_ssd_leader_and_follower(tmp_path: Path) -> None:
    rng = np.random.default_rng(12)
    d = tmp_path / "shared"
    leader_cfg = UMBPConfig()
    leader_cfg.dram.capacity_bytes = 1 * MiB
    leader_cfg.ssd.storage_dir = str(d)
    leader_cfg.ssd.capacity_bytes = 64 * MiB
    leader_cfg.role = umbp.UMBPRole.SharedSSDLeader
    leader = UMBPClient(leader_cfg)
    follower_cfg = UMBPConfig()
    follower_cfg.ssd.storage_dir = str(d)
    follower_cfg.ssd.capacity_bytes = 64 * MiB
    follower_cfg.follower_mode = True  # MORI's older spelling of the role
    follower = UMBPClient(follower_cfg)
    for round_ in range(3):
        keys = [f"mla{round_}_{i}" for i in range(4)]
        vals = [random_bytes(rng, 20_000) for _ in keys]
        assert leader.batch_put_from_ptr(keys, [v.ctypes.data for v in vals], [v.size for v in vals]) == [True] * 4
        # Visible to the follower as soon as the leader's put returned.
        assert follower.batch_exists_consecutive(keys) == 4
        outs = [np.zeros_like(v) for v in vals]
        assert follower.batch_get_into_ptr(keys, [o.ctypes.data for o in outs], [v.size for v in vals]) == [True] * 4
        for o, v in zip(outs, vals):
            assert np.array_equal(o, v)
    own = random_bytes(rng, 100)
    assert not follower.put_from_ptr("from_follower", own.ctypes.data, own.size)
    assert not leader.exists("from_follower")


def test_threads_never_see_wrong_bytes(tmp_path: Path) -> None:
    client = make_client(dram_bytes=192 * KiB, ssd_dir=tmp_path / "ssd")
    errors: list[str] = []

    def value_of(key: int) -> np.ndarray:
        return np.random.default_rng(1000 + key).integers(0, 256, size=8 * KiB + key, dtype=np.uint8)

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(150):
            k = int(rng.integers(0, 40))
            v = value_of(k)
            if rng.random() < 0.5:
                if not client.put_from_ptr(f"t{k}", v.ctypes.data, v.size):
                    errors.append(f"put t{k} refused")
            else:
                out = np.zeros_like(v)
                if client.get_into_ptr(f"t{k}", out.ctypes.data, out.size) and not np.array_equal(out, v):
                    errors.append(f"wrong bytes for t{k}")

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert client.flush()
    for k in range(40):
        if client.exists(f"t{k}"):
            v = value_of(k)
            out = np.zeros_like(v)
            assert client.get_into_ptr(f"t{k}", out.ctypes.data, out.size)
            assert np.array_equal(out, v)


def test_local_mode_extras() -> None:
    client = make_client()
    buf = np.zeros(4096, dtype=np.uint8)
    assert client.register_memory(buf.ctypes.data, buf.size)
    client.deregister_memory(buf.ctypes.data)
    assert client.match_external_kv(["h1", "h2"]) == []
    assert client.match_external_kv(["h1"], count_as_hit=True) == []
    assert client.get_external_kv_hit_counts(["h1"]) == []
    assert not client.report_external_kv_blocks(["h1"], umbp.UMBPTierType.DRAM)
    assert not client.revoke_external_kv_blocks(["h1"], umbp.UMBPTierType.DRAM)
    assert not client.revoke_all_external_kv_blocks_at_tier(umbp.UMBPTierType.HBM)
    match = umbp.UMBPExternalKvMatch()
    match.node_id = "n0"
    match.hashes_by_tier = {umbp.UMBPTierType.DRAM: ["a", "b"], umbp.UMBPTierType.HBM: ["b", "c"]}
    assert match.matched_hash_count() == 3
    assert "n0" in repr(match)
    client.close()
    client.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        client.put_from_ptr("a", buf.ctypes.data, 8)


def test_config_fields_and_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = UMBPConfig()
    assert cfg.dram.capacity_bytes == 4 << 30 and cfg.dram.high_watermark == 0.9
    assert cfg.eviction.candidate_window == 16 and cfg.eviction.auto_promote_on_read
    assert cfg.copy_pipeline.worker_threads == 2
    assert cfg.distributed is None and cfg.standalone_process is None
    sp = umbp.UMBPStandaloneProcessConfig()
    sp.address = "unix:///tmp/x.sock"
    cfg.standalone_process = sp
    assert cfg.standalone_process.address == "unix:///tmp/x.sock"
    cfg.standalone_process = None
    monkeypatch.setenv("UMBP_DRAM_CAPACITY", "3MiB")
    monkeypatch.setenv("UMBP_SSD_ENABLED", "0")
    env_cfg = UMBPConfig.from_environment()
    assert env_cfg.dram.capacity_bytes == 3 * MiB and not env_cfg.ssd.enabled
    bad = UMBPConfig()
    bad.ssd.enabled = False
    bad.dram.low_watermark = 0.95
    with pytest.raises(ValueError, match="watermark"):
        UMBPClient(bad)


def _arena(capacity: int) -> int:
    """Address of the DRAM tier's arena: the memory file of that size in /proc/self/maps."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split()
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        if "umbp-host-buffer" in line and hi - lo == capacity:
            return lo
    raise AssertionError("no DRAM arena mapping found")


@pytest.mark.parametrize("with_ssd", [False, True])
def test_dram_checksum_catches_a_flipped_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_ssd: bool) -> None:
    monkeypatch.setenv("UMBP_VERIFY_DRAM_CHECKSUM", "1")
    rng = np.random.default_rng(13)
    capacity = 328 * KiB  # a size no other mapping here has
    cfg = UMBPConfig()
    cfg.dram.capacity_bytes = capacity
    cfg.dram.use_shared_memory = True  # a named memory file, so the test can find the arena
    cfg.ssd.enabled = with_ssd
    cfg.ssd.storage_dir = str(tmp_path / "ssd")
    cfg.ssd.capacity_bytes = 64 * MiB
    client = UMBPClient(cfg)
    data = random_bytes(rng, 5000)
    assert client.put_from_ptr("victim", data.ctypes.data, data.size)
    assert client.flush()
    arena = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_ubyte * capacity).from_address(_arena(capacity)))
    assert np.array_equal(arena[: data.size], data)  # first fit: the first value sits at offset 0
    arena[1234] ^= 0x40
    out = np.full(data.size, 3, dtype=np.uint8)
    hit = client.get_into_ptr("victim", out.ctypes.data, out.size)
    stats = client.stats()
    assert stats["corrupt_reads"] == 1
    if with_ssd:
        # The DRAM copy is dropped; the SSD copy (verified too) serves the read.
        assert hit and np.array_equal(out, data) and stats["ssd_hits"] == 1
    else:
        assert not hit and (out == 3).all() and not client.exists("victim")


def test_a_value_larger_than_dram_goes_straight_to_the_ssd(tmp_path: Path) -> None:
    rng = np.random.default_rng(14)
    client = make_client(dram_bytes=256 * KiB, ssd_dir=tmp_path / "ssd")
    big = random_bytes(rng, 1 * MiB + 3)
    assert client.put_from_ptr("big", big.ctypes.data, big.size)
    stats = client.stats()
    assert stats["put_refusals"] == 0 and stats["dram_keys"] == 0 and stats["ssd_keys"] == 1
    out = np.zeros_like(big)
    assert client.get_into_ptr("big", out.ctypes.data, out.size)
    assert np.array_equal(out, big)
    assert client.stats()["ssd_hits"] == 1


def test_follower_in_another_process_reads_the_leaders_puts(tmp_path: Path) -> None:
    d = tmp_path / "shared"
    leader_cfg = UMBPConfig()
    leader_cfg.dram.capacity_bytes = 1 * MiB
    leader_cfg.ssd.storage_dir = str(d)
    leader_cfg.ssd.capacity_bytes = 64 * MiB
    leader_cfg.force_ssd_copy_on_write = True  # MORI's older spelling of SharedSSDLeader
    leader = UMBPClient(leader_cfg)
    keys = [f"{i:064x}_0_k" for i in range(16)]
    vals = [np.random.default_rng(500 + i).integers(0, 256, size=30_000 + i, dtype=np.uint8) for i in range(16)]
    assert leader.batch_put_from_ptr(keys, [v.ctypes.data for v in vals], [v.size for v in vals]) == [True] * 16
    follower = textwrap.dedent(
        f"""
        import numpy as np
        from mori.umbp import UMBPClient, UMBPConfig, UMBPRole
        cfg = UMBPConfig()
        cfg.ssd.storage_dir = {str(d)!r}
        cfg.ssd.capacity_bytes = {64 * MiB}
        cfg.role = UMBPRole.SharedSSDFollower
        c = UMBPClient(cfg)
        keys = [f"{{i:064x}}_0_k" for i in range(16)]
        assert c.batch_exists_consecutive(keys + ["missing"]) == 16
        vals = [np.random.default_rng(500 + i).integers(0, 256, size=30_000 + i, dtype=np.uint8) for i in range(16)]
        outs = [np.zeros_like(v) for v in vals]
        assert c.batch_get_into_ptr(keys, [o.ctypes.data for o in outs], [o.size for o in outs]) == [True] * 16
        assert all(np.array_equal(o, v) for o, v in zip(outs, vals))
        print("follower ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", follower], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "follower ok" in out.stdout
