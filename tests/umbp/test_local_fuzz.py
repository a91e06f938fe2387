# SPDX-License-Identifier: MIT
"""Model-based fuzz of the local store (hypothesis): put / get / exists / batch ops / flush / clear
against a dict, with a DRAM tier small enough that every run evicts.

With the SSD tier on, nothing may be lost (and no put refused): every key put since the last clear is found, with the
bytes of its first put. With the SSD tier off, an evicted key may miss (and a later put may store
it again), but a hit must return the bytes of some put of that key since the last clear, never
anything else; a put may be refused when eviction cannot make room, and then stores nothing."""

from __future__ import annotations

import shutil
import tempfile

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mori.umbp import UMBPClient, UMBPConfig

KiB = 1024
NUM_KEYS = 24


def key_name(k: int) -> str:
    return f"page_{k:02d}_" + "x" * (k % 5)


def key_size(k: int) -> int:
    return 1 * KiB + 977 * k  # 1 KiB .. ~23 KiB, one size per key


def version_bytes(k: int, version: int) -> np.ndarray:
    return np.random.default_rng(k * 100_003 + version).integers(0, 256, size=key_size(k), dtype=np.uint8)


keys_st = st.integers(0, NUM_KEYS - 1)


class LocalStoreModel(RuleBasedStateMachine):
    with_ssd = False

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="umbp-fuzz-")
        cfg = UMBPConfig()
        cfg.dram.capacity_bytes = 96 * KiB  # a handful of values: every run evicts
        cfg.eviction.candidate_window = 4
        cfg.ssd.enabled = self.with_ssd
        cfg.ssd.storage_dir = self.dir
        cfg.ssd.capacity_bytes = 64 * 1024 * KiB
        cfg.copy_pipeline.queue_depth = 8
        self.client = UMBPClient(cfg)
        self.first: dict[int, int] = {}  # key -> version of the first put since the last clear
        self.seen: dict[int, set[int]] = {}  # key -> every version put since the last clear
        self.next_version = 1

    def teardown(self) -> None:
        self.client.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _record_put(self, k: int, version: int, stored: bool) -> None:
        if not stored:
            # Only a DRAM-only store may refuse (a batch larger than what eviction can free),
            # and then the key was not there and still is not.
            assert not self.with_ssd, f"put of {key_name(k)} refused with the SSD tier on"
            assert not self.client.exists(key_name(k))
            return
        self.first.setdefault(k, version)
        self.seen.setdefault(k, set()).add(version)

    def _check_read(self, k: int, hit: bool, out: np.ndarray) -> None:
        if k not in self.first:
            assert not hit, f"{key_name(k)} found, never put since the last clear"
            return
        if self.with_ssd:
            assert hit, f"{key_name(k)} lost with the SSD tier on"
            assert np.array_equal(out, version_bytes(k, self.first[k])), f"{key_name(k)}: not its first value"
        elif hit:
            assert any(np.array_equal(out, version_bytes(k, v)) for v in self.seen[k]), f"{key_name(k)}: wrong bytes"

    def _new_version(self) -> int:
        self.next_version += 1
        return self.next_version

    @rule(k=keys_st)
    def put(self, k: int) -> None:
        v = self._new_version()
        data = version_bytes(k, v)
        self._record_put(k, v, self.client.put_from_ptr(key_name(k), data.ctypes.data, data.size))

    @rule(ks=st.lists(keys_st, min_size=1, max_size=8), with_depth=st.booleans(), data=st.data())
    def batch_put(self, ks: list[int], with_depth: bool, data: st.DataObject) -> None:
        versions = [self._new_version() for _ in ks]
        bufs = [version_bytes(k, v) for k, v in zip(ks, versions)]
        args = ([key_name(k) for k in ks], [b.ctypes.data for b in bufs], [b.size for b in bufs])
        if with_depth:
            depths = data.draw(st.lists(st.integers(-1, 40), min_size=len(ks), max_size=len(ks)))
            result = self.client.batch_put_from_ptr_with_depth(*args, depths)
        else:
            result = self.client.batch_put_from_ptr(*args)
        for k, v, ok in zip(ks, versions, result):
            self._record_put(k, v, ok)

    @rule(k=keys_st)
    def get(self, k: int) -> None:
        out = np.zeros(key_size(k), dtype=np.uint8)
        self._check_read(k, self.client.get_into_ptr(key_name(k), out.ctypes.data, out.size), out)

    @rule(ks=st.lists(keys_st, min_size=1, max_size=8))
    def batch_get(self, ks: list[int]) -> None:
        outs = [np.zeros(key_size(k), dtype=np.uint8) for k in ks]
        hits = self.client.batch_get_into_ptr(
            [key_name(k) for k in ks], [o.ctypes.data for o in outs], [o.size for o in outs]
        )
        for k, hit, out in zip(ks, hits, outs):
            self._check_read(k, hit, out)

    @rule(k=keys_st)
    def exists(self, k: int) -> None:
        found = self.client.exists(key_name(k))
        if self.with_ssd or k not in self.first:
            assert found == (k in self.first)

    @rule(ks=st.lists(keys_st, min_size=0, max_size=10))
    def batch_exists(self, ks: list[int]) -> None:
        names = [key_name(k) for k in ks]
        each = self.client.batch_exists(names)
        prefix = self.client.batch_exists_consecutive(names)
        expected_prefix = next((i for i, e in enumerate(each) if not e), len(each))
        assert prefix == expected_prefix
        for k, e in zip(ks, each):
            if self.with_ssd or k not in self.first:
                assert e == (k in self.first)

    @precondition(lambda self: self.with_ssd)
    @rule()
    def flush(self) -> None:
        assert self.client.flush()

    @rule()
    def clear(self) -> None:
        assert self.client.clear()
        self.first.clear()
        self.seen.clear()

    @invariant()
    def dram_within_capacity(self) -> None:
        s = self.client.stats()
        assert s["dram_used_bytes"] <= s["dram_capacity_bytes"]


class DramOnly(LocalStoreModel):
    with_ssd = False


class DramAndSsd(LocalStoreModel):
    with_ssd = True


FUZZ = settings(max_examples=25, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestDramOnly = DramOnly.TestCase
TestDramOnly.settings = FUZZ
TestDramAndSsd = DramAndSsd.TestCase
TestDramAndSsd.settings = FUZZ
