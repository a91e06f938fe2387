# SPDX-License-Identifier: MIT
"""Ranks of the per-host server reading SSD-only values straight from its segment files
(UMBP_SERVER_DIRECT_READS, the server's shared SSD index: umbp/src/ssd_shared_index.h).

The server runs in this process (its counters say which values the ranks read themselves); the
ranks' clients are the real per-host-server clients over the Unix socket, and one test runs four
rank processes against a server process. Values are fresh random bytes, checked bit for bit.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

import mori.umbp as umbp
from mori import _C

PROGRAM = Path(__file__).parent / "programs" / "umbp_rank.py"
sys.path.insert(0, str(PROGRAM.parent))
import umbp_rank  # noqa: E402
from server_wire import OP_BATCH_EXISTS, OP_DIRECT_READS, frame, read_reply  # noqa: E402

pytestmark = pytest.mark.timeout(120)

KIB = 1 << 10


class Pool:
    """An in-process per-host server with a small DRAM tier in front of an SSD tier, and
    registered shared-memory buffers for its ranks' values."""

    def __init__(self, tmp: Path, dram: int, promote: bool) -> None:
        self.dir = tmp / "ssd"
        self.address = f"unix://{tmp}/umbp.sock"
        cfg = umbp.UMBPConfig()
        cfg.dram.capacity_bytes = dram
        cfg.ssd.enabled = True
        cfg.ssd.storage_dir = str(self.dir)
        cfg.ssd.capacity_bytes = 256 << 20
        cfg.eviction.auto_promote_on_read = promote
        self.server = _C.umbp.start_server(self.address, 0, cfg)
        assert self.server is not None
        self.handles: list = []

    def client(self) -> umbp.UMBPClient:
        return umbp_rank.client(self.address)

    def buffer(self, c: umbp.UMBPClient, size: int) -> np.ndarray:
        h, arr = umbp_rank.shm_buffer(size)
        self.handles.append(h)
        assert c.register_memory(h.ptr, size)
        return arr

    def direct_reads(self, c: umbp.UMBPClient) -> int:
        """Values `c` read itself so far. Its notices are one-way: a round trip first (the server
        answers in order, so it has taken every notice sent before)."""
        c.exists("sync")
        return self.server.counters()["direct_reads"]

    def close(self) -> None:
        self.server.stop()
        self.server = None  # its store goes too: the SSD directory's writer lock is let go


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[Pool]:
    p = Pool(tmp_path, dram=256 * KIB, promote=False)
    yield p
    p.close()


def read_all(c: umbp.UMBPClient, dst: np.ndarray, keys: list[str], offsets: list[int], size: int) -> list[bool]:
    """One batch get of `keys` (`size` bytes each) into `dst` at `offsets`."""
    base = int(dst.ctypes.data)
    return c.batch_get_into_ptr(keys, [base + o for o in offsets], [size] * len(keys))


def put_values(c: umbp.UMBPClient, src: np.ndarray, tag: str, sizes: list[int]) -> tuple[list[str], list[int]]:
    """Fresh random values of `sizes`, 4 KiB-aligned in `src`; returns (keys, offsets)."""
    keys, offsets, at = [], [], 0
    for i, n in enumerate(sizes):
        src[at : at + n] = np.random.default_rng().integers(0, 256, n, dtype=np.uint8)
        keys.append(f"{tag}-{i}-{os.urandom(6).hex()}")
        offsets.append(at)
        at += (n + 4095) // 4096 * 4096
    base = int(src.ctypes.data)
    assert c.batch_put_from_ptr(keys, [base + o for o in offsets], sizes) == [True] * len(keys)
    assert c.flush()
    return keys, offsets


def test_ssd_only_values_are_read_by_the_rank_itself(pool: Pool, monkeypatch) -> None:
    c = pool.client()
    sizes = [64 * KIB] * 12 + [64 * KIB + 100, 5000, 300 * KIB, 1]  # whole blocks, tails, pieces, a byte
    src = pool.buffer(c, 2 << 20)
    dst = pool.buffer(c, 2 << 20)
    keys, offsets = put_values(c, src, "direct", sizes)
    base = int(dst.ctypes.data)
    before = c.stats()
    # One at a time (the rank's single reads, large ones in pieces), then as one batch.
    for k, o, n in zip(keys, offsets, sizes):
        dst[o : o + n] = 0
        assert c.get_into_ptr(k, base + o, n)
        assert np.array_equal(dst[o : o + n], src[o : o + n]), k
    direct = pool.direct_reads(c)
    dst[:] = 0
    assert c.batch_get_into_ptr(keys, [base + o for o in offsets], sizes) == [True] * len(keys)
    for o, n in zip(offsets, sizes):
        assert np.array_equal(dst[o : o + n], src[o : o + n])
    after = c.stats()
    # Most values left the 256 KiB DRAM tier: read by the rank, and counted by the server as
    # the SSD hits they are; the rest came from the server's DRAM.
    assert direct >= len(keys) // 2
    assert pool.direct_reads(c) >= 2 * direct - 1
    assert after["ssd_hits"] - before["ssd_hits"] == pool.direct_reads(c)
    assert after["gets"] - before["gets"] == 2 * len(keys)
    assert after["misses"] == before["misses"]
    # A wrong size, a missing key: misses (asked of the server), nothing read by the rank.
    d = pool.direct_reads(c)
    assert not c.get_into_ptr(keys[0], base, sizes[0] - 1)
    assert not c.get_into_ptr("direct-missing", base, 4096)
    assert pool.direct_reads(c) == d
    # Turned off, a new client asks the server for everything.
    monkeypatch.setenv("UMBP_SERVER_DIRECT_READS", "0")
    off = pool.client()
    for r in pool.handles:
        off.register_memory(r.ptr, r.mapped_size)
    dst[:] = 0
    assert off.batch_get_into_ptr(keys, [base + o for o in offsets], sizes) == [True] * len(keys)
    assert np.array_equal(dst[: offsets[-1] + 1], src[: offsets[-1] + 1])
    assert pool.direct_reads(off) == d
    off.close()
    c.close()


def test_unaligned_and_unregistered_destinations(pool: Pool) -> None:
    c = pool.client()
    src = pool.buffer(c, 1 << 20)
    keys, offsets = put_values(c, src, "unaligned", [64 * KIB] * 8)
    dst = np.zeros(600 * KIB, dtype=np.uint8)  # plain memory, not registered
    base = int(dst.ctypes.data) + 1  # not 4 KiB-aligned: read through the page cache
    before = pool.direct_reads(c)
    for i, (k, o) in enumerate(zip(keys, offsets)):
        assert c.get_into_ptr(k, base + i * 64 * KIB, 64 * KIB)
        assert np.array_equal(dst[1 + i * 64 * KIB : 1 + (i + 1) * 64 * KIB], src[o : o + 64 * KIB])
    assert pool.direct_reads(c) > before
    c.close()


def segment_descriptors(directory: Path) -> list[str]:
    """This process's descriptors of files in `directory` (deleted ones too)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(directory)) and ".log" in target:
            out.append(target)
    return out


def test_cleared_values_are_misses_and_their_files_are_let_go(pool: Pool) -> None:
    c = pool.client()
    src = pool.buffer(c, 1 << 20)
    dst = pool.buffer(c, 1 << 20)
    keys, offsets = put_values(c, src, "cleared", [64 * KIB] * 12)
    assert read_all(c, dst, keys, offsets, 64 * KIB) == [True] * 12
    assert pool.direct_reads(c) > 0
    assert c.clear()
    dst[:] = 0
    # The index no longer places them: every get asks the server, which has nothing.
    assert read_all(c, dst, keys, offsets, 64 * KIB) == [False] * 12
    assert not dst.any()
    # The rank closed its descriptors of the deleted segments (they would hold the disk space).
    assert not [t for t in segment_descriptors(pool.dir) if t.endswith("(deleted)")]
    # New values after the clear are read again.
    keys, offsets = put_values(c, src, "after", [64 * KIB] * 12)
    assert read_all(c, dst, keys, offsets, 64 * KIB) == [True] * 12
    assert np.array_equal(dst[: 12 * 64 * KIB], src[: 12 * 64 * KIB])
    c.close()


def test_a_successors_clear_reaches_a_rank_that_read_from_the_old_server(tmp_path: Path) -> None:
    """A rank holding the index (and the segment files) of a server that has since stopped must
    not read from them: the successor on the same directory may have cleared it."""
    pool = Pool(tmp_path, dram=256 * KIB, promote=False)
    c = pool.client()
    src = pool.buffer(c, 1 << 20)
    dst = pool.buffer(c, 1 << 20)
    keys, offsets = put_values(c, src, "restart", [64 * KIB] * 8)
    assert read_all(c, dst, keys, offsets, 64 * KIB) == [True] * 8
    assert pool.direct_reads(c) > 0
    pool.close()
    successor = Pool(tmp_path, dram=256 * KIB, promote=False)  # same socket, same storage_dir
    try:
        other = successor.client()
        assert other.batch_exists(keys) == [True] * 8  # it found what its predecessor wrote
        assert other.clear()
        dst[:] = 0
        assert read_all(c, dst, keys, offsets, 64 * KIB) == [False] * 8
        assert not dst.any()
        other.close()
        c.close()
    finally:
        successor.close()


def test_a_value_changed_on_disk_is_a_miss_not_wrong_bytes(pool: Pool) -> None:
    c = pool.client()
    src = pool.buffer(c, 1 << 20)
    dst = pool.buffer(c, 1 << 20)
    keys, offsets = put_values(c, src, "corrupt", [64 * KIB] * 4)
    put_values(c, pool.buffer(c, 1 << 20), "later", [64 * KIB] * 4)  # the first four leave DRAM
    base = int(dst.ctypes.data)
    # The first value's bytes in its segment file, one byte flipped.
    needle = src[offsets[0] : offsets[0] + 4096].tobytes()
    for seg in sorted(pool.dir.glob("*.log")):
        data = seg.read_bytes()
        at = data.find(needle)
        if at >= 0:
            with open(seg, "r+b") as f:
                f.seek(at + 100)
                f.write(bytes([data[at + 100] ^ 0xFF]))
            break
    else:
        pytest.fail("the value is not in any segment file")
    before = c.stats()
    assert c.batch_get_into_ptr(keys, [base + o for o in offsets], [64 * KIB] * 4) == [False, True, True, True]
    for o in offsets[1:]:
        assert np.array_equal(dst[o : o + 64 * KIB], src[o : o + 64 * KIB])
    # The rank saw the mismatch and asked the server, which found it too and dropped the value.
    assert c.stats()["corrupt_reads"] == before["corrupt_reads"] + 1
    assert pool.direct_reads(c) == 3
    assert not c.exists(keys[0])
    c.close()


def test_a_value_read_by_the_rank_is_promoted_by_the_server(tmp_path: Path) -> None:
    pool = Pool(tmp_path, dram=512 * KIB, promote=True)
    try:
        c = pool.client()
        src = pool.buffer(c, 1 << 20)
        dst = pool.buffer(c, 1 << 20)
        keys, _ = put_values(c, src, "promote", [128 * KIB] * 4)
        put_values(c, pool.buffer(c, 1 << 20), "later", [128 * KIB] * 4)  # the first four are on the SSD: evictable
        base = int(dst.ctypes.data)
        first = keys[0]  # evicted from DRAM by the four after it
        assert c.get_into_ptr(first, base, 128 * KIB)
        assert pool.direct_reads(c) == 1  # and the server has taken the notice
        dram_hits = c.stats()["dram_hits"]
        dst[: 128 * KIB] = 0
        assert c.get_into_ptr(first, base, 128 * KIB)
        assert np.array_equal(dst[: 128 * KIB], src[: 128 * KIB])
        assert pool.direct_reads(c) == 1  # the second came from the server's DRAM
        assert c.stats()["dram_hits"] == dram_hits + 1
        c.close()
    finally:
        pool.close()


def test_lying_direct_read_notices_change_nothing(tmp_path: Path) -> None:
    """A worker's notice of values it read itself is one-way: a malformed one, one naming memory
    outside its regions, or bytes that do not match the checksum it claims are not admitted into
    DRAM, get no reply, and the connection goes on serving."""
    pool = Pool(tmp_path, dram=1 << 20, promote=True)
    try:
        c = pool.client()
        src = pool.buffer(c, 1 << 20)
        keys, _ = put_values(c, src, "lie", [64 * KIB] * 2)
        keys_before = c.stats()["dram_keys"]
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(pool.address[len("unix://") :])
            s.settimeout(10)

            def item(key: str, region: int, offset: int, size: int, checksum: int) -> bytes:
                k = key.encode()
                return struct.pack("<I", len(k)) + k + struct.pack("<IQQQ", region, offset, size, checksum)

            notices = [
                b"\x05\x00",  # malformed
                struct.pack("<I", 1) + item("lie-x", 7, 0, 64 * KIB, 1),  # no region 7
                struct.pack("<I", 1) + item(keys[0], 0, 0, 64 * KIB, 123),  # unregistered: counted only
                struct.pack("<I", 1000) + item(keys[0], 0, 0, 1, 1),  # a count past the payload
            ]
            for i, n in enumerate(notices):
                s.sendall(frame(OP_DIRECT_READS, n, 100 + i))
            k = b"lie-x"
            s.sendall(frame(OP_BATCH_EXISTS, struct.pack("<II", 1, len(k)) + k, 7))
            req, status, body = read_reply(s)  # the first reply is the exists: no notice was answered
            assert (req, status, body) == (7, 0, b"\x00")
        assert c.stats()["dram_keys"] == keys_before
        assert c.batch_exists(keys) == [True, True]
        c.close()
    finally:
        pool.close()


def test_four_rank_processes_read_each_others_values_from_the_ssd(tmp_path: Path) -> None:
    sockdir = tmp_path / "sock"
    sockdir.mkdir()
    address = f"unix://{sockdir}/umbp.sock"
    log = tmp_path / "server.log"
    env = dict(os.environ, PYTHONUNBUFFERED="1", UMBP_DRAM_PREFAULT="0")
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "mori.umbp.server", "--address", address, "--dram-capacity", "1MiB"]
            + ["--ssd-dir", str(tmp_path / "ssd"), "--ssd-capacity", "256MiB"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        end = time.monotonic() + 30
        while not (sockdir / "umbp.sock").exists():
            assert server.poll() is None and time.monotonic() < end, log.read_text()
            time.sleep(0.02)
        sync = tmp_path / "sync"
        sync.mkdir()
        ranks = []
        for r in range(4):
            out = open(tmp_path / f"r{r}.log", "wb")
            ranks.append(
                subprocess.Popen(
                    [sys.executable, str(PROGRAM), "share", address, str(r), "4", str(sync)],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            )
            out.close()
        for r, p in enumerate(ranks):
            try:
                rc = p.wait(timeout=90)
            except subprocess.TimeoutExpired:
                p.kill()
                pytest.fail(f"rank {r} hung: {(tmp_path / f'r{r}.log').read_text()}")
            text = (tmp_path / f"r{r}.log").read_text()
            assert rc == 0 and f"rank {r} OK" in text, text
        stats = umbp_rank.client(address).stats()
        assert stats["ssd_hits"] > 0 and stats["misses"] == 0, stats
    finally:
        server.kill()
        server.wait(timeout=10)
