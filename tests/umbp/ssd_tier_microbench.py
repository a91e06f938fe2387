# SPDX-License-Identifier: MIT
"""Micro benchmark of the SSD tier's read_batch against plain os.preadv of the same bytes from the
same file system, page cache dropped before every pass (posix_fadvise DONTNEED on every file).

    python tests/umbp/ssd_tier_microbench.py [DIR]

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


def main() -> None:
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
