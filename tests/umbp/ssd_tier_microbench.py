# SPDX-License-Identifier: MIT
"""Micro benchmark of the SSD tier's read_batch against plain os.preadv of the same bytes from the
same file system, page cache dropped before every pass (posix_fadvise DONTNEED on every file).

    python tests/umbp/ssd_tier_microbench.py [DIR]
    python tests/umbp/ssd_tier_microbench.py --single [--backend posix] [--iters N] [DIR]

--single: where a single-value SSD-hit get's time goes, one value at a time through UMBPClient
(SSD only, as `mori bench umbp` sets it up), the calls alternated in one process: the raw
O_DIRECT os.preadv of the same bytes, batch_get_into_ptr of one key (the bench's call),
get_into_ptr, a get of an absent key (the call's fixed cost: argument checks, DRAM and SSD index
lookups, Python; the second of two in a row), and the value checksum over the bytes a raw read just landed (what verifying
the value cost when it followed the read). Medians in microseconds.

Not a test (pytest does not collect it): the figures depend on the device.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from mori._C.umbp import _SsdTier

KiB = 1024
MiB = 1024 * KiB


def _drop_cache(paths: list[Path]) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _aligned(size: int) -> np.ndarray:
    raw = np.empty(size + 4096, np.uint8)
    start = (-raw.ctypes.data) % 4096
    return raw[start : start + size]


def bench(root: Path, count: int, size: int, backend: str, passes: int = 5) -> dict[str, float]:
    rng = np.random.default_rng()
    values = [rng.integers(0, 256, size=size, dtype=np.uint8) for _ in range(count)]
    keys = [f"bench-{i}" for i in range(count)]
    tier_dir = root / f"tier-{backend}-{count}x{size}"
    tier = _SsdTier(
        str(tier_dir),
        capacity_bytes=4 * count * size + 64 * MiB,
        io_backend=backend,
        durability="relaxed",
        enable_background_gc=False,
    )
    assert all(tier.write_batch(keys, values))
    tier.flush()
    outs = [_aligned(size) for _ in range(count)]
    raw_file = root / f"raw-{count}x{size}.bin"
    with open(raw_file, "wb") as f:
        for v in values:
            f.write(v.tobytes())
    segs = sorted(tier_dir.glob("seg-*.log"))
    tier_s, raw_s = [], []
    for _ in range(passes):
        _drop_cache(segs)
        t0 = time.perf_counter()
        ok = tier.read_batch(keys, outs)
        tier_s.append(time.perf_counter() - t0)
        assert all(ok)
        _drop_cache([raw_file])
        fd = os.open(raw_file, os.O_RDONLY)
        t0 = time.perf_counter()
        for i, out in enumerate(outs):
            assert os.preadv(fd, [out], i * size) == size
        raw_s.append(time.perf_counter() - t0)
        os.close(fd)
    for out, v in zip(outs, values):
        assert np.array_equal(out, v)
    total = count * size / 2**30
    return {
        "tier_GiBps": total / statistics.median(tier_s),
        "pread_GiBps": total / statistics.median(raw_s),
        "io_uring": tier.stats()["io_uring"],
        "direct_io": tier.stats()["direct_io"],
    }


def single(root: Path, backend: str, iters: int) -> None:
    import mori.umbp as umbp
    from mori._C.umbp import value_checksum

    cfg = umbp.UMBPConfig()
    cfg.role = umbp.UMBPRole.Standalone
    cfg.dram.capacity_bytes = 4096  # below one value: every value lives on the SSD alone
    cfg.ssd.enabled = True
    cfg.ssd.storage_dir = str(root / f"single-{backend}")
    cfg.ssd.capacity_bytes = 4 << 30
    cfg.ssd.io.backend = umbp.UMBPIoBackend.Posix if backend == "posix" else umbp.UMBPIoBackend.IoUring
    cfg.eviction.auto_promote_on_read = False
    client = umbp.UMBPClient(cfg)
    rng = np.random.default_rng()
    print(f"single-value SSD hits, backend {backend}, medians of {iters} calls (us); noisy on a shared disk")
    print(f"{'value':>9} {'raw read':>9} {'batch get':>10} {'get':>8} {'x raw':>6} {'absent':>7} {'checksum':>9}")
    try:
        for size in (64 * KiB, 360 * KiB, 2 * MiB, 4608 * KiB):
            n = 16
            values = [rng.integers(0, 256, size=size, dtype=np.uint8) for _ in range(n)]
            keys = [f"single-{size}-{i}" for i in range(n)]
            for k, v in zip(keys, values):
                assert client.put_from_ptr(k, v.ctypes.data, size)
            client.flush()
            raw_file = root / f"single-raw-{size}.bin"
            with open(raw_file, "wb") as f:
                for v in values:
                    f.write(v.tobytes())
                f.flush()
                os.fsync(f.fileno())
            fd = os.open(raw_file, os.O_RDONLY | os.O_DIRECT)
            dst = _aligned(size)
            view, ptr = memoryview(dst), dst.ctypes.data
            t = {"raw": [], "batch": [], "get": [], "absent": [], "checksum": []}
            clock = time.perf_counter_ns
            for it in range(iters):
                i = it % n
                a = clock()
                assert os.preadv(fd, [view], i * size) == size
                b = clock()
                value_checksum(ptr, size)  # over bytes the device just wrote, as the get verifies them
                c = clock()
                t["raw"].append(b - a)
                t["checksum"].append(c - b)
                a = clock()
                ok = client.batch_get_into_ptr([keys[i]], [ptr], [size])
                t["batch"].append(clock() - a)
                assert ok == [True]
                if it < n:
                    assert np.array_equal(dst, values[i])
                a = clock()
                assert client.get_into_ptr(keys[(i + 1) % n], ptr, size)
                t["get"].append(clock() - a)
                # Twice: the first call after a large read also pays for the caches that read
                # evicted (the interpreter's own data); the second is the call's own cost.
                assert not client.get_into_ptr("absent", ptr, size)
                a = clock()
                assert not client.get_into_ptr("absent", ptr, size)
                t["absent"].append(clock() - a)
            os.close(fd)
            raw_file.unlink()
            m = {k: statistics.median(v) / 1e3 for k, v in t.items()}
            print(
                f"{size // KiB:>5} KiB {m['raw']:9.1f} {m['batch']:10.1f} {m['get']:8.1f} {m['raw'] / m['batch']:6.2f} "
                f"{m['absent']:7.1f} {m['checksum']:9.1f}",
                flush=True,
            )
            client.clear()
    finally:
        client.close()


def main() -> None:
    args = sys.argv[1:]
    if args and args[0] == "--single":
        args = args[1:]
        backend, iters = "io_uring", 200
        while args and args[0].startswith("--"):
            if args[0] == "--backend":
                backend, args = args[1], args[2:]
            elif args[0] == "--iters":
                iters, args = int(args[1]), args[2:]
            else:
                raise SystemExit(f"unknown option {args[0]}")
        root = Path(args[0]) if args else Path(tempfile.mkdtemp(prefix="umbp_ssd_bench_"))
        single(root, backend, iters)
        return
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="umbp_ssd_bench_"))
    for count, size in ((128, 360 * KiB), (32, 4608 * KiB)):
        for backend in ("io_uring", "posix"):
            r = bench(root, count, size, backend)
            print(
                f"read_batch {count:4d} x {size // KiB:5d} KiB  {backend:8s}  tier {r['tier_GiBps']:6.2f} GiB/s  "
                f"os.preadv {r['pread_GiBps']:6.2f} GiB/s  ratio {r['tier_GiBps'] / r['pread_GiBps']:.2f}  "
                f"(io_uring={r['io_uring']}, O_DIRECT={r['direct_io']})"
            )


if __name__ == "__main__":
    main()
