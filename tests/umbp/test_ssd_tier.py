# SPDX-License-Identifier: MIT
"""The SSD tier alone (mori._C.umbp._SsdTier): round trips, watermark reclaim, restart recovery,
injected corruption, GC, one writer per directory, a reader following the writer, threads."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from mori._C.umbp import _SsdTier
from mori.core.errors import MoriError

KiB = 1024
MiB = 1024 * KiB
RECORD_ALIGN = 4096


def _values(rng: np.random.Generator, sizes: list[int]) -> list[np.ndarray]:
    return [rng.integers(0, 256, size=s, dtype=np.uint8) for s in sizes]


def _aligned_empty(size: int, offset: int = 0) -> np.ndarray:
    """An uninitialised buffer starting `offset` bytes past a 4 KiB boundary."""
    raw = np.empty(size + 2 * RECORD_ALIGN, dtype=np.uint8)
    start = (-raw.ctypes.data) % RECORD_ALIGN + offset
    return raw[start : start + size]


def _record_bytes(key: str, size: int) -> int:
    head = -(-(64 + len(key.encode())) // RECORD_ALIGN) * RECORD_ALIGN
    return head + -(-size // RECORD_ALIGN) * RECORD_ALIGN


def _segments(d: Path) -> list[Path]:
    return sorted(d.glob("seg-*.log"))


@pytest.fixture(params=["io_uring", "posix"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "io_uring":
        probe = _SsdTier(str(tmp_path / "probe"), io_backend="io_uring")
        refused = not probe.stats()["io_uring"]
        del probe
        if refused:
            pytest.skip("the kernel refuses io_uring here (io_uring_queue_init failed; see the log line)")
    return request.param


def _run_py(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout
    )


def test_round_trip_sizes(tmp_path: Path, backend: str) -> None:
    rng = np.random.default_rng()
    sizes = [1, 7, 4095, 4096, 4097, 65 * KiB + 3, 360 * KiB, 4608 * KiB, 5 * MiB]
    tier = _SsdTier(str(tmp_path / "ssd"), capacity_bytes=256 * MiB, segment_size_bytes=8 * MiB, io_backend=backend)
    assert tier.stats()["io_uring"] == (backend == "io_uring")
    assert tier.stats()["direct_io"] is False  # nothing written yet; pread never bypasses the cache
    values = _values(rng, sizes)
    keys = [f"key-{i}-{rng.integers(1 << 62)}" for i in range(len(sizes))]
    for k, v in zip(keys, values):
        assert tier.write(k, v)
        assert tier.contains(k) and tier.value_size(k) == v.nbytes
    for k, v in zip(keys, values):
        for offset in (0, 1, 512):  # O_DIRECT-aligned memory, and memory that is not
            out = _aligned_empty(v.nbytes, offset)
            assert tier.read(k, out)
            np.testing.assert_array_equal(out, v)
    outs = [_aligned_empty(v.nbytes, i % 2) for i, v in enumerate(values)]
    assert tier.read_batch(keys, outs) == [True] * len(keys)
    for out, v in zip(outs, values):
        np.testing.assert_array_equal(out, v)
    # A wrong size and an unknown key are misses, not errors.
    assert not tier.read(keys[5], np.empty(values[5].nbytes - 1, np.uint8))
    assert not tier.read("absent", np.empty(10, np.uint8))
    assert tier.value_size("absent") == 0
    assert tier.read_batch([keys[0], "absent"], [np.empty(1, np.uint8), np.empty(1, np.uint8)]) == [True, False]
    s = tier.stats()
    if backend == "posix":
        assert s["direct_io"] is False
    assert s["keys"] == len(keys) and s["writes"] == len(keys) and s["write_bytes"] == sum(sizes)
    assert s["corrupt_reads"] == 0 and s["used_bytes"] == sum(_record_bytes(k, v.nbytes) for k, v in zip(keys, values))


def test_repeated_write_keeps_first_value(tmp_path: Path) -> None:
    rng = np.random.default_rng()
    first, second = _values(rng, [3000, 3000])
    tier = _SsdTier(str(tmp_path / "ssd"), capacity_bytes=16 * MiB)
    assert tier.write("k", first)
    assert tier.write("k", second)
    assert tier.write_batch(["j", "j"], [second, first]) == [True, True]
    out = np.empty(3000, np.uint8)
    assert tier.read("k", out)
    np.testing.assert_array_equal(out, first)
    assert tier.read("j", out)
    np.testing.assert_array_equal(out, second)
    assert tier.stats()["writes"] == 2


def test_bad_arguments_name_the_argument(tmp_path: Path) -> None:
    tier = _SsdTier(str(tmp_path / "ssd"), capacity_bytes=16 * MiB)
    with pytest.raises(ValueError, match="key"):
        tier.write("", np.ones(4, np.uint8))
    with pytest.raises(ValueError, match="key"):
        tier.write("x" * 4033, np.ones(4, np.uint8))
    with pytest.raises(ValueError, match="size"):
        tier.write("k", np.ones(0, np.uint8))
    with pytest.raises(ValueError, match="one entry per key"):
        tier.read_batch_ptrs(["a", "b"], [1], [1, 1])
    assert tier.stats()["keys"] == 0 and tier.stats()["used_bytes"] == 0
    assert tier.write("x" * 4032, np.ones(4, np.uint8))
    with pytest.raises(ValueError, match="low_watermark"):
        _SsdTier(str(tmp_path / "other"), high_watermark=0.5, low_watermark=0.7)
    blocker = tmp_path / "a_file"
    blocker.write_bytes(b"x")
    with pytest.raises(MoriError, match=str(blocker / "ssd")):
        _SsdTier(str(blocker / "ssd"))


def test_capacity_pressure_drops_oldest_first(tmp_path: Path, backend: str) -> None:
    rng = np.random.default_rng()
    capacity = 8 * MiB
    tier = _SsdTier(
        str(tmp_path / "ssd"),
        capacity_bytes=capacity,
        segment_size_bytes=1 * MiB,
        high_watermark=0.9,
        low_watermark=0.6,
        io_backend=backend,
    )
    n = 64
    values = _values(rng, [256 * KiB - int(rng.integers(0, 4096)) for _ in range(n)])
    keys = [f"p{i}" for i in range(n)]
    for k, v in zip(keys, values):
        assert tier.write(k, v)
        assert tier.stats()["used_bytes"] <= capacity
    present = [tier.contains(k) for k in keys]
    # FIFO by segment: what survives is a suffix of the write order, the newest included.
    first = present.index(True)
    assert first > 0 and all(present[first:]) and not any(present[:first])
    s = tier.stats()
    assert s["evicted_keys"] == first and s["keys"] == n - first
    assert s["used_bytes"] <= 0.9 * capacity
    outs = [np.empty_like(v) for v in values[first:]]
    assert all(tier.read_batch(keys[first:], outs))
    for out, v in zip(outs, values[first:]):
        np.testing.assert_array_equal(out, v)
    # A value larger than the whole tier is refused and leaves nothing behind.
    assert not tier.write("huge", np.ones(capacity + 1, np.uint8))
    assert not tier.contains("huge") and tier.stats()["failed_writes"] == 1
    # clear() empties the tier and the directory; it works again afterwards.
    tier.clear()
    assert tier.stats()["keys"] == 0 and tier.stats()["used_bytes"] == 0 and _segments(tmp_path / "ssd") == []
    assert tier.write(keys[0], values[0])
    out = np.empty_like(values[0])
    assert tier.read(keys[0], out)
    np.testing.assert_array_equal(out, values[0])


@pytest.mark.parametrize("durability", ["strict", "relaxed"])
def test_restart_recovery_after_a_killed_writer(tmp_path: Path, durability: str) -> None:
    """A writer that dies without closing (os._exit): a new tier finds what it wrote (Strict: every
    returned write; Relaxed: what flush() covered), and what it removed stays removed."""
    d = tmp_path / "ssd"
    seed = int(np.random.default_rng().integers(1 << 31))
    proc = _run_py(f"""
        import os, numpy as np
        from mori._C.umbp import _SsdTier
        rng = np.random.default_rng({seed})
        t = _SsdTier({str(d)!r}, capacity_bytes=64 << 20, segment_size_bytes=1 << 20, durability={durability!r})
        for i in range(24):
            assert t.write(f"k{{i}}", rng.integers(0, 256, size=int(rng.integers(1, 300_000)), dtype=np.uint8))
        assert t.remove("k3") and t.remove("k7")
        assert t.write("k7", np.full(5, 7, np.uint8))  # written again after its remove
        t.flush()
        os._exit(0)
    """)
    assert proc.returncode == 0, proc.stderr
    rng = np.random.default_rng(seed)
    expected = {f"k{i}": rng.integers(0, 256, size=int(rng.integers(1, 300_000)), dtype=np.uint8) for i in range(24)}
    del expected["k3"]
    expected["k7"] = np.full(5, 7, np.uint8)
    tier = _SsdTier(str(d), capacity_bytes=64 * MiB, segment_size_bytes=1 * MiB, durability=durability)
    assert tier.stats()["keys"] == len(expected) and not tier.contains("k3")
    for k, v in expected.items():
        out = np.empty_like(v)
        assert tier.read(k, out), k
        np.testing.assert_array_equal(out, v)
    # New writes go to a new segment and survive the next restart too.
    assert tier.write("after", np.arange(100, dtype=np.uint8))
    del tier
    tier = _SsdTier(str(d), capacity_bytes=64 * MiB, segment_size_bytes=1 * MiB)
    assert tier.stats()["keys"] == len(expected) + 1 and tier.stats()["skipped_records"] == 0


def test_corruption_is_detected_counted_and_never_served(tmp_path: Path, backend: str) -> None:
    rng = np.random.default_rng()
    d = tmp_path / "ssd"
    tier = _SsdTier(str(d), capacity_bytes=64 * MiB, segment_size_bytes=64 * MiB, io_backend=backend)
    keys = [f"c{i}" for i in range(8)]
    values = _values(rng, [int(rng.integers(5000, 90_000)) for _ in keys])
    for k, v in zip(keys, values):
        assert tier.write(k, v)
    (seg,) = _segments(d)
    blob = bytearray(seg.read_bytes())

    def value_at(i: int) -> int:
        pos = blob.find(values[i].tobytes())
        assert pos > 0 and pos % RECORD_ALIGN == 0
        return pos

    # A flipped value byte under a live tier: the read fails its checksum, the key is dropped.
    pos = value_at(2) + int(rng.integers(0, values[2].nbytes))
    with open(seg, "r+b") as f:
        f.seek(pos)
        f.write(bytes([blob[pos] ^ 0x5A]))
    out = np.empty_like(values[2])
    assert not tier.read(keys[2], out)
    assert tier.stats()["corrupt_reads"] == 1 and not tier.contains(keys[2])
    assert not tier.read(keys[2], out) and tier.stats()["corrupt_reads"] == 1  # now a plain miss
    del tier

    blob = bytearray(seg.read_bytes())
    # A flipped header byte (the value size of c4): the scan skips the record.
    header4 = next(
        p for p in range(0, len(blob), RECORD_ALIGN) if blob[p : p + 4] == b"UBMR" and blob[p + 64 : p + 66] == b"c4"
    )
    blob[header4 + 16] ^= 0x01
    # A truncated last record (c7): torn in the middle of its value.
    cut = value_at(7) + values[7].nbytes // 2
    seg.write_bytes(bytes(blob[:cut]))

    tier = _SsdTier(str(d), capacity_bytes=64 * MiB, segment_size_bytes=64 * MiB, io_backend=backend)
    s = tier.stats()
    assert s["skipped_records"] == 2  # c4's header, c7's torn record
    assert not tier.contains(keys[4]) and not tier.contains(keys[7])
    # c2's record is whole but its value is not: indexed again, refused again at the read.
    assert tier.contains(keys[2]) and not tier.read(keys[2], np.empty_like(values[2]))
    assert tier.stats()["corrupt_reads"] == 1
    good = [i for i in range(8) if i not in (2, 4, 7)]
    outs = [np.empty_like(values[i]) for i in good]
    assert tier.read_batch([keys[i] for i in good], outs) == [True] * len(good)
    for out, i in zip(outs, good):
        np.testing.assert_array_equal(out, values[i])


def test_gc_reclaims_removed_space(tmp_path: Path) -> None:
    rng = np.random.default_rng()
    d = tmp_path / "ssd"
    tier = _SsdTier(str(d), capacity_bytes=64 * MiB, segment_size_bytes=1 * MiB, enable_background_gc=True)
    keys = [f"g{i}" for i in range(40)]
    values = _values(rng, [200 * KiB - int(rng.integers(0, 2000)) for _ in keys])
    assert all(tier.write_batch(keys, values))
    used_before = tier.stats()["used_bytes"]
    kept = set(range(0, 40, 5))
    for i in range(40):
        if i not in kept:
            assert tier.remove(keys[i])
    assert not tier.remove(keys[1])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        s = tier.stats()
        if s["gc_runs"] >= 3 and s["used_bytes"] < used_before / 2:
            break
        time.sleep(0.05)
    s = tier.stats()
    assert s["gc_runs"] >= 3 and s["used_bytes"] < used_before / 2, s
    assert s["gc_moved_bytes"] > 0 and s["keys"] == len(kept) and s["evicted_keys"] == 0
    for i in range(40):
        out = np.empty_like(values[i])
        assert tier.read(keys[i], out) == (i in kept)
        if i in kept:
            np.testing.assert_array_equal(out, values[i])
    del tier
    # After the moves, a restart still sees exactly the kept keys (tombstones carried along).
    tier = _SsdTier(str(d), capacity_bytes=64 * MiB, segment_size_bytes=1 * MiB, enable_background_gc=False)
    assert sorted(k for k in keys if tier.contains(k)) == sorted(keys[i] for i in kept)


def test_second_writer_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "ssd"
    tier = _SsdTier(str(d), capacity_bytes=16 * MiB)
    with pytest.raises(MoriError, match=f"'{d}' already has a writer \\(pid {os.getpid()}\\)"):
        _SsdTier(str(d), capacity_bytes=16 * MiB)
    proc = _run_py(f"""
        from mori._C.umbp import _SsdTier
        _SsdTier({str(d)!r}, capacity_bytes=16 << 20)
    """)
    assert proc.returncode != 0 and f"'{d}' already has a writer" in proc.stderr
    del tier
    _SsdTier(str(d), capacity_bytes=16 * MiB)  # free again once the first one is gone


def test_reader_follows_a_writer_in_another_process(tmp_path: Path) -> None:
    """MORI's SharedSSDLeader/Follower: another process writes, this one reads the same directory."""
    d = tmp_path / "ssd"
    seed = int(np.random.default_rng().integers(1 << 31))
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import sys, time, numpy as np
        from mori._C.umbp import _SsdTier
        rng = np.random.default_rng({seed})
        t = _SsdTier({str(d)!r}, capacity_bytes=64 << 20, segment_size_bytes=1 << 20)
        for line in sys.stdin:
            cmd, key = line.split()
            if cmd == "put":
                ok = t.write(key, rng.integers(0, 256, size=150_000, dtype=np.uint8))
            elif cmd == "wait_gc":
                deadline = time.monotonic() + 20
                while t.stats()["gc_runs"] < int(key) and time.monotonic() < deadline:
                    time.sleep(0.02)
                ok = t.stats()["gc_runs"] >= int(key)
            elif cmd == "clear":
                t.clear()
                ok = True
            else:
                ok = t.remove(key)
            print(ok, flush=True)
    """),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    rng = np.random.default_rng(seed)

    def ask(cmd: str, key: str) -> None:
        writer.stdin.write(f"{cmd} {key}\n")
        writer.stdin.flush()
        assert writer.stdout.readline().strip() == "True"

    try:
        ask("put", "a")
        expected_a = rng.integers(0, 256, size=150_000, dtype=np.uint8)
        reader = _SsdTier(str(d), capacity_bytes=64 * MiB, segment_size_bytes=1 * MiB, reader=True)
        out = np.empty(150_000, np.uint8)
        assert reader.read("a", out)
        np.testing.assert_array_equal(out, expected_a)
        for i in range(12):  # crosses segments
            ask("put", f"b{i}")
        expected_b = [rng.integers(0, 256, size=150_000, dtype=np.uint8) for _ in range(12)]
        assert not reader.contains("b0")  # not scanned yet
        assert reader.read("b11", out)  # a miss refreshes once
        np.testing.assert_array_equal(out, expected_b[11])
        outs = [np.empty(150_000, np.uint8) for _ in range(12)]
        assert all(reader.read_batch([f"b{i}" for i in range(12)], outs))
        for o, e in zip(outs, expected_b):
            np.testing.assert_array_equal(o, e)
        # The writer's GC moves b0 and b11 out of segments it then deletes: the reader follows.
        for i in range(1, 11):
            ask("remove", f"b{i}")
        ask("wait_gc", "2")
        reader.refresh()
        assert not reader.contains("b5")
        for i in (0, 11):
            assert reader.read(f"b{i}", out)
            np.testing.assert_array_equal(out, expected_b[i])
        ask("remove", "a")
        assert reader.contains("a")
        assert reader.refresh() == 0 and not reader.contains("a")
        # The writer empties the directory and writes b0 anew: after a refresh the reader sees the
        # new value, never the old file's bytes under the new file's name.
        ask("clear", "-")
        ask("put", "b0")
        new_b0 = rng.integers(0, 256, size=150_000, dtype=np.uint8)
        reader.refresh()
        assert reader.stats()["keys"] == 1
        assert reader.read("b0", out)
        np.testing.assert_array_equal(out, new_b0)
        with pytest.raises(MoriError, match="reader cannot write"):
            reader.write("c", out)
        with pytest.raises(MoriError, match="reader cannot remove"):
            reader.remove("b1")
    finally:
        writer.stdin.close()
        writer.wait(timeout=30)
    assert writer.returncode == 0


def test_write_error_leaves_nothing_visible(tmp_path: Path) -> None:
    """A file system that refuses the bytes (here RLIMIT_FSIZE: EFBIG, like ENOSPC): false, counted,
    no partial record in the file, and the tier keeps working."""
    d = tmp_path / "ssd"
    proc = _run_py(f"""
        import resource, signal, numpy as np
        from mori._C.umbp import _SsdTier
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))
        t = _SsdTier({str(d)!r}, capacity_bytes=64 << 20, segment_size_bytes=8 << 20)
        small = np.arange(200_000, dtype=np.uint32).view(np.uint8)[:300_000]
        assert t.write("small", small)
        assert not t.write("big", np.ones(900_000, np.uint8))
        s = t.stats()
        assert s["failed_writes"] == 1 and s["keys"] == 1 and not t.contains("big"), s
        assert t.write("small2", small[:1000])
        out = np.empty(300_000, np.uint8)
        assert t.read("small", out) and (out == small).all()
        print(t.stats()["used_bytes"])
    """)
    assert proc.returncode == 0, proc.stderr
    (seg,) = _segments(d)
    assert seg.stat().st_size == int(proc.stdout.strip())
    tier = _SsdTier(str(d), capacity_bytes=64 * MiB)
    assert tier.stats()["keys"] == 2 and tier.stats()["skipped_records"] == 0


def test_threads_write_and_read_at_once(tmp_path: Path, backend: str) -> None:
    rng = np.random.default_rng()
    tier = _SsdTier(
        str(tmp_path / "ssd"),
        capacity_bytes=256 * MiB,
        segment_size_bytes=2 * MiB,
        io_backend=backend,
        durability="relaxed",
    )
    per_thread = 40
    values = {
        f"t{t}-{i}": rng.integers(0, 256, size=int(rng.integers(1, 70_000)), dtype=np.uint8)
        for t in range(4)
        for i in range(per_thread)
    }
    errors: list[str] = []

    def worker(t: int) -> None:
        local = np.random.default_rng(t)
        for i in range(per_thread):
            k = f"t{t}-{i}"
            if not tier.write(k, values[k]):
                errors.append(f"write {k}")
            if i % 3 == 2:
                tier.remove(f"t{t}-{i - 1}")
            # Read back a random earlier key of any thread: a hit must be exact.
            other = f"t{int(local.integers(4))}-{int(local.integers(per_thread))}"
            out = np.empty_like(values[other])
            if tier.read(other, out) and not np.array_equal(out, values[other]):
                errors.append(f"wrong bytes for {other}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert not errors, errors[:5]
    removed = {f"t{t}-{i - 1}" for t in range(4) for i in range(per_thread) if i % 3 == 2}
    kept = [k for k in values if k not in removed]
    outs = [np.empty_like(values[k]) for k in kept]
    assert all(tier.read_batch(kept, outs))
    for k, o in zip(kept, outs):
        np.testing.assert_array_equal(o, values[k])
    assert tier.stats()["keys"] == len(kept) and tier.stats()["corrupt_reads"] == 0


@pytest.mark.parametrize("durability", ["strict", "relaxed"])
def test_random_operations_match_a_dict_across_restarts(tmp_path: Path, durability: str) -> None:
    """Writes, batch writes, removes, reads, clears and restarts in a random order, checked
    against a dict after every step (capacity large enough that nothing is reclaimed)."""
    seed = int(np.random.default_rng().integers(1 << 31))
    rng = np.random.default_rng(seed)
    d = str(tmp_path / "ssd")

    def open_tier() -> _SsdTier:
        return _SsdTier(d, capacity_bytes=256 * MiB, segment_size_bytes=1 * MiB, durability=durability)

    tier = open_tier()
    model: dict[str, np.ndarray] = {}
    names = [f"m{i}" for i in range(40)]
    for step in range(300):
        op = rng.choice(["write", "batch", "remove", "read", "restart", "clear"], p=[0.3, 0.1, 0.2, 0.3, 0.07, 0.03])
        key = str(rng.choice(names))
        if op == "write":
            v = rng.integers(0, 256, size=int(rng.integers(1, 20_000)), dtype=np.uint8)
            assert tier.write(key, v)
            model.setdefault(key, v)
        elif op == "batch":
            ks = [str(k) for k in rng.choice(names, size=4)]
            vs = [rng.integers(0, 256, size=int(rng.integers(1, 9_000)), dtype=np.uint8) for _ in ks]
            assert tier.write_batch(ks, vs) == [True] * 4
            for k, v in zip(ks, vs):
                model.setdefault(k, v)
        elif op == "remove":
            assert tier.remove(key) == (key in model), (seed, step)
            model.pop(key, None)
        elif op == "read":
            if key in model:
                out = np.empty_like(model[key])
                assert tier.read(key, out), (seed, step)
                np.testing.assert_array_equal(out, model[key])
            else:
                assert not tier.read(key, np.empty(1, np.uint8))
        elif op == "restart":
            if durability == "relaxed":
                tier.flush()
            del tier
            tier = open_tier()
        else:
            tier.clear()
            model.clear()
        assert tier.stats()["keys"] == len(model), (seed, step, op)
    assert sorted(k for k in names if tier.contains(k)) == sorted(model)
    assert tier.stats()["corrupt_reads"] == 0 and tier.stats()["skipped_records"] == 0


def test_random_operations_under_pressure_never_serve_stale_or_removed_values(tmp_path: Path) -> None:
    """Reclaim, GC and restarts at once: a hit is always the key's first value since its last
    remove, a removed key stays removed (also across restarts), and use stays under capacity."""
    seed = int(np.random.default_rng().integers(1 << 31))
    rng = np.random.default_rng(seed)
    d = str(tmp_path / "ssd")
    capacity = 4 * MiB

    def open_tier() -> _SsdTier:
        return _SsdTier(
            d, capacity_bytes=capacity, segment_size_bytes=256 * KiB, enable_background_gc=True, durability="relaxed"
        )

    tier = open_tier()
    model: dict[str, np.ndarray] = {}  # what a hit must return
    names = [f"q{i}" for i in range(150)]
    evicted = 0
    for step in range(400):
        op = rng.choice(["write", "remove", "read", "restart"], p=[0.45, 0.2, 0.33, 0.02])
        key = str(rng.choice(names))
        if op == "write":
            v = rng.integers(0, 256, size=int(rng.integers(1, 120_000)), dtype=np.uint8)
            had = tier.contains(key)
            assert tier.write(key, v)
            if not had:
                model[key] = v
        elif op == "remove":
            tier.remove(key)
            model.pop(key, None)
            assert not tier.contains(key)
        elif op == "read":
            size = model[key].nbytes if key in model else 1
            out = np.empty(size, np.uint8)
            if tier.read(key, out):
                assert key in model, (seed, step)
                np.testing.assert_array_equal(out, model[key])
        else:
            tier.flush()
            evicted += tier.stats()["evicted_keys"]
            del tier
            tier = open_tier()
        assert tier.stats()["used_bytes"] <= capacity
        present = {k for k in names if tier.contains(k)}
        assert present <= set(model), (seed, step, present - set(model))
    assert tier.stats()["corrupt_reads"] == 0 and evicted + tier.stats()["evicted_keys"] > 0


# --- single values read in pieces (ssd_tier.cc: kSplitReadMin, kSplitPiece, kSplitPiecesMax) ----------

SPLIT_READ_MIN = 256 * KiB  # whole 4 KiB blocks from which a single value is read in pieces
SPLIT_PIECE = 512 * KiB
SPLIT_PIECES_MAX = 8


def _pieces(size: int) -> list[tuple[int, int]]:
    """The byte ranges a single aligned read of `size` bytes is cut into, the partial last block
    (read through the page cache) last: the same arithmetic as ssd_tier.cc."""
    whole = size // RECORD_ALIGN * RECORD_ALIGN
    n = 0 if whole == 0 else 1 if whole < SPLIT_READ_MIN else min(max(-(-whole // SPLIT_PIECE), 2), SPLIT_PIECES_MAX)
    blocks = whole // RECORD_ALIGN
    out = [(blocks * k // n * RECORD_ALIGN, blocks * (k + 1) // n * RECORD_ALIGN) for k in range(n)]
    return out + ([(whole, size)] if whole < size else [])


def test_value_checksum_known_answers() -> None:
    """Up to 256 KiB the value checksum is XXH3-64 whatever vector width the CPU gives it (AVX2
    where it has it): the answers of xxHash's scalar code, so a segment written on one machine
    reads on any. Past 256 KiB it is XXH3-64 of the 256 KiB chunks' digests and the size
    (checksum.h), built here from the chunk hashes alone, at chunk edges and in between."""
    from mori._C.umbp import value_checksum

    data = ((np.arange(4 * MiB, dtype=np.uint64) * 131 + 7) % 251).astype(np.uint8)
    known = {
        1: 0x4C5CCA45D0F4811F,
        63: 0x670A36587C84B0EC,
        240: 0x0C9860844B0AD495,
        1025: 0x13D178F3E2B48E9E,
        65536: 0xED3E7FC390C4C41A,
    }
    for n, want in known.items():
        assert value_checksum(data.ctypes.data, n) == want, n
    chunk = 256 << 10
    for n in (chunk, chunk + 1, 2 * chunk - 1, 2 * chunk, 1048583, 4 * MiB):
        if n <= chunk:
            continue  # one chunk: the plain XXH3 (pinned above for smaller values)
        digests = [value_checksum(data.ctypes.data + off, min(chunk, n - off)) for off in range(0, n, chunk)]
        words = np.array(digests + [n], dtype="<u8")
        assert value_checksum(data.ctypes.data, n) == value_checksum(words.ctypes.data, words.nbytes), n
    assert value_checksum(data.ctypes.data, chunk) != value_checksum(data.ctypes.data, chunk + 1)


def test_single_values_read_in_pieces_are_exact_at_every_switch(tmp_path: Path, backend: str) -> None:
    """Exact bytes at one byte either side of every size where the cut changes: the split
    itself, each added piece, the cap on pieces; aligned memory (pieces at once) and not."""
    rng = np.random.default_rng()
    # Where whole blocks reach the split; where a 3rd and an 8th piece start; past the cap of 8.
    switches = [SPLIT_READ_MIN] + [k * SPLIT_PIECE + RECORD_ALIGN for k in (2, SPLIT_PIECES_MAX - 1, SPLIT_PIECES_MAX)]
    sizes = sorted({s + d for s in switches for d in (-1, 0, 1)})
    cuts = {s: len([p for p in _pieces(s) if p[1] % RECORD_ALIGN == 0]) for s in sizes}  # whole-block pieces
    assert [cuts[s + d] for s in switches for d in (-1, 0)] == [1, 2, 2, 3, 7, 8, 8, 8]
    tier = _SsdTier(str(tmp_path / "ssd"), capacity_bytes=512 * MiB, segment_size_bytes=64 * MiB, io_backend=backend)
    values = _values(rng, sizes)
    keys = [f"split-{s}" for s in sizes]
    assert all(tier.write_batch(keys, values))
    for k, v in zip(keys, values):
        for offset in (0, 1):  # pieces at once; unaligned memory reads through the page cache
            out = _aligned_empty(v.nbytes, offset)
            out[:] = 0xEE
            assert tier.read(k, out), (v.nbytes, offset)
            np.testing.assert_array_equal(out, v)
    assert tier.stats()["corrupt_reads"] == 0


def test_corruption_in_each_piece_of_a_split_read_is_a_miss(tmp_path: Path, backend: str) -> None:
    """A byte flipped in any one piece of a value read in pieces (and in its partial last block)
    fails the checksum taken piece by piece: a miss, counted, the key dropped; the others stay exact."""
    rng = np.random.default_rng()
    size = SPLIT_PIECES_MAX * SPLIT_PIECE + 100  # the most pieces, and a partial last block
    pieces = _pieces(size)
    assert len(pieces) == SPLIT_PIECES_MAX + 1
    d = tmp_path / "ssd"
    # No GC: dropping the corrupt keys empties segments that it would compact, finding (and
    # counting) the flips of keys this test has not read yet.
    tier = _SsdTier(
        str(d), capacity_bytes=512 * MiB, segment_size_bytes=256 * MiB, io_backend=backend, enable_background_gc=False
    )
    keys = [f"piece-{k}" for k in range(len(pieces))] + ["intact"]
    values = _values(rng, [size] * len(keys))
    assert all(tier.write_batch(keys, values))
    tier.flush()
    blobs = {seg: seg.read_bytes() for seg in _segments(d)}  # a segment holds a few of these values
    for k, (lo, hi) in enumerate(pieces):
        seg, pos = next((seg, b.find(values[k].tobytes())) for seg, b in blobs.items() if values[k].tobytes() in b)
        assert pos > 0 and pos % RECORD_ALIGN == 0
        at = pos + int(rng.integers(lo, hi))
        with open(seg, "r+b") as f:
            f.seek(at)
            f.write(bytes([blobs[seg][at] ^ 0x01]))
    out = _aligned_empty(size)
    for k in range(len(pieces)):
        assert not tier.read(keys[k], out), f"a flip in piece {k} of {pieces} was served"
        assert tier.stats()["corrupt_reads"] == k + 1 and not tier.contains(keys[k])
    assert tier.read("intact", out)
    np.testing.assert_array_equal(out, values[-1])


def test_threads_read_split_values_at_once(tmp_path: Path, backend: str) -> None:
    """Single values read in pieces by four threads at once: one call has the reader team, the
    others read their pieces one after another; every hit is exact."""
    rng = np.random.default_rng()
    tier = _SsdTier(str(tmp_path / "ssd"), capacity_bytes=256 * MiB, io_backend=backend, durability="relaxed")
    values = {
        f"v{i}": rng.integers(0, 256, size=int(rng.integers(SPLIT_READ_MIN, 3 * MiB)), dtype=np.uint8) for i in range(8)
    }
    assert all(tier.write_batch(list(values), list(values.values())))
    errors: list[str] = []

    def worker(t: int) -> None:
        for i in range(12):
            k = f"v{(t + i) % len(values)}"
            out = _aligned_empty(values[k].nbytes)
            if not tier.read(k, out) or not np.array_equal(out, values[k]):
                errors.append(f"thread {t}: {k}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert not errors, errors[:5]
    assert tier.stats()["corrupt_reads"] == 0
