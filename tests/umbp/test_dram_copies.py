# SPDX-License-Identifier: MIT
"""The DRAM tier's copy paths, bit for bit at each switch size: values around 64 KiB (the
arena's non-temporal stores start there), calls around 1 MiB (the copy team takes over, in
pieces of 256 KiB .. 1 MiB; 4 MiB for a team under 4 threads), odd lengths and pointers off every
alignment, the team of 4 (MORI_COPY_THREADS=4), of 2 and none (1), with the put's checksum taken in the copy's pass (or by the
team) and checked on every get. And batch_exists_consecutive's in-place reading of a list of str
against the other forms Python may hand it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mori import _C
from mori.umbp import UMBPClient, UMBPConfig

KiB = 1024
MiB = 1024 * KiB


@pytest.fixture(params=[1, 2, 4], ids=["team-off", "team-of-2", "team-of-4"])
def client(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MORI_COPY_THREADS", str(request.param))
    # Checksums taken at put and verified on every DRAM hit: a hash of the wrong bytes (or of
    # a piece the team skipped) turns the get into a miss.
    monkeypatch.setenv("UMBP_VERIFY_DRAM_CHECKSUM", "1")
    _C.core.reload_env()
    cfg = UMBPConfig()
    cfg.dram.capacity_bytes = 64 * MiB
    cfg.ssd.enabled = False
    c = UMBPClient(cfg)
    yield c
    c.close()
    monkeypatch.undo()
    _C.core.reload_env()


def stored_counters(client: UMBPClient) -> tuple[int, int]:
    s = client.stats()
    return s["dram_hits"], s["corrupt_reads"]


# (value sizes of one batch call) around each switch: 64 KiB values, 1 MiB calls, piece edges.
CALLS = [
    [64 * KiB - 1],
    [64 * KiB],
    [64 * KiB + 1],
    [MiB - 1],
    [MiB],
    [MiB + 4097],
    [2 * MiB + 3],
    [4 * MiB - 1],
    [4 * MiB + 512 * KiB + 7],
    [300_001] * 5,  # a batch over 1 MiB of values under one piece
    [64 * KiB + 3] * 17,  # 17 values just past the streaming size, 1.06 MiB together
    [5, 64 * KiB, 3 * MiB + 1, 17, 700_001],  # mixed: tiny values beside pieces of one large one
]


@pytest.mark.parametrize("sizes", CALLS, ids=lambda s: "+".join(str(x) for x in s))
def test_put_get_exact_at_the_switch_sizes(client: UMBPClient, sizes: list[int]) -> None:
    rng = np.random.default_rng(sum(sizes))
    total = sum(sizes)
    # Source and destination regions with room to place each value off every alignment.
    src = rng.integers(0, 256, size=total + 64 * len(sizes), dtype=np.uint8)
    dst = np.zeros_like(src)
    src_offs, dst_offs, at_s, at_d = [], [], 0, 0
    for i, n in enumerate(sizes):
        shift_s, shift_d = (1 + 7 * i) % 64, (13 + 5 * i) % 64  # never 32-byte aligned, never equal
        src_offs.append(at_s + shift_s)
        dst_offs.append(at_d + shift_d)
        at_s += n + 64
        at_d += n + 64
    keys = [f"copy-{len(sizes)}-{i}-{n}" for i, n in enumerate(sizes)]
    base_s, base_d = src.ctypes.data, dst.ctypes.data
    assert all(client.batch_put_from_ptr(keys, [base_s + o for o in src_offs], sizes))
    hits0, corrupt0 = stored_counters(client)
    got = client.batch_get_into_ptr(keys, [base_d + o for o in dst_offs], sizes)
    assert all(got), got
    assert stored_counters(client) == (hits0 + len(sizes), corrupt0)
    for i, n in enumerate(sizes):
        s, d = src_offs[i], dst_offs[i]
        assert np.array_equal(dst[d : d + n], src[s : s + n]), f"value {i} ({n} bytes)"
        # Nothing written around the value (the head/tail handling of the vector copies).
        assert dst[d - 1] == 0 and dst[d + n] == 0, f"value {i} ({n} bytes): bytes beside it written"
    # The single-value calls as well, one value per call (the single-put path).
    for i, n in enumerate(sizes):
        one = f"single-{keys[i]}"
        assert client.put_from_ptr(one, base_s + src_offs[i], n)
        out = np.zeros(n + 3, dtype=np.uint8)
        assert client.get_into_ptr(one, out.ctypes.data + 3, n)
        assert np.array_equal(out[3:], src[src_offs[i] : src_offs[i] + n])


def test_exists_consecutive_reads_every_form_of_keys(tmp_path: Path) -> None:
    cfg = UMBPConfig()
    cfg.dram.capacity_bytes = 4 * MiB
    cfg.ssd.enabled = True
    cfg.ssd.storage_dir = str(tmp_path)
    cfg.ssd.capacity_bytes = 64 * MiB
    client = UMBPClient(cfg)
    data = np.arange(4096, dtype=np.uint8)
    # ASCII keys, keys with multi-byte UTF-8 (stored from the same str: the same bytes), and a
    # key stored as bytes.
    keys = [f"{i:064x}__k" for i in range(6)] + ["clé-ü-日本-0", "clé-ü-日本-1"]
    assert all(client.batch_put_from_ptr(keys, [data.ctypes.data] * len(keys), [data.size] * len(keys)))
    assert client.batch_exists_consecutive(keys) == len(keys)
    assert client.batch_exists_consecutive(tuple(keys)) == len(keys)
    assert client.batch_exists_consecutive(keys + ["missing"] + keys) == len(keys)
    assert client.batch_exists_consecutive(["clé-ü-日本-1", "clé-ü-日本-2"]) == 1
    assert client.batch_exists_consecutive([]) == 0
    # bytes keys take the converting path and find the same values.
    assert client.batch_exists_consecutive([k.encode() for k in keys[:3]] + [b"missing"]) == 3
    with pytest.raises(TypeError, match="list of str"):
        client.batch_exists_consecutive("abc")
    with pytest.raises(Exception, match=r"keys\[1\] must not be empty"):
        client.batch_exists_consecutive(["a", ""])
    # Past the DRAM prefix the SSD tier answers (values evicted from DRAM to the SSD).
    big = np.ones(1 * MiB, dtype=np.uint8)
    spill = [f"spill-{i}" for i in range(8)]
    assert all(client.batch_put_from_ptr(spill, [big.ctypes.data] * 8, [big.size] * 8))
    client.flush()
    assert client.batch_exists_consecutive(spill) == 8
    assert client.batch_exists_consecutive(spill + ["missing"] + keys) == 8
    client.close()
