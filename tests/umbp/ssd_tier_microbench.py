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

    python tests/umbp/ssd_tier_microbench.py --server [--iters N] [DIR]

--server: the same single-value SSD hits through a per-host server (``python -m mori.umbp.server``,
a process of its own, set up as ``mori bench umbp`` sets it up) from one rank alone, alternated
with the raw read and with the same get from a store in this process (SSD only, as --single): the
get through the server, the same get in one process, a 1-key batch_exists through the server (the
round trip alone), the server's CPU time per get (every thread's, from /proc/PID/task/*/schedstat, the read's
system time included) and per raw read (this process's), and the checksum over just-read bytes.

Not a test (pytest does not collect it): the figures depend on the device.
"""

from __future__ import annotations

import ctypes
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


def _cpu_ns(pid: int) -> int:
    """CPU time of every thread of `pid` so far (ns), from schedstat."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    return total


def server_single(root: Path, iters: int) -> None:
    import subprocess

    import mori.umbp as umbp
    from mori._C.umbp import value_checksum

    sock = root / "server.sock"
    server = subprocess.Popen(
        [sys.executable, "-m", "mori.umbp.server", "--address", f"unix://{sock}", "--dram-capacity", "4096"]
        + ["--ssd-dir", str(root / "server-ssd"), "--ssd-capacity", str(4 << 30), "--quiet"],
        env=dict(os.environ, UMBP_DRAM_PREFAULT="0"),
    )
    allocator = umbp.UMBPHostMemAllocator()
    handles = []
    client = local = None
    try:
        deadline = time.monotonic() + 60
        while not sock.exists():
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the per-host server did not start")
            time.sleep(0.02)
        cfg = umbp.UMBPConfig()
        sp = umbp.UMBPStandaloneProcessConfig()
        sp.address = f"unix://{sock}"
        cfg.standalone_process = sp
        client = umbp.UMBPClient(cfg)
        lcfg = umbp.UMBPConfig()
        lcfg.role = umbp.UMBPRole.Standalone
        lcfg.dram.capacity_bytes = 4096
        lcfg.ssd.enabled = True
        lcfg.ssd.storage_dir = str(root / "local-ssd")
        lcfg.ssd.capacity_bytes = 4 << 30
        lcfg.eviction.auto_promote_on_read = False
        local = umbp.UMBPClient(lcfg)
        largest = 4608 * KiB
        for _ in range(2):  # source and destination: memory the server maps (memfd)
            handles.append(allocator.alloc(largest, umbp.UMBPHostBufferBacking.AnonymousShm))
            assert client.register_memory(int(handles[-1].ptr), int(handles[-1].mapped_size))
        src_ptr, ptr = int(handles[0].ptr), int(handles[1].ptr)
        src = np.ctypeslib.as_array((ctypes.c_uint8 * largest).from_address(src_ptr))
        dst = np.ctypeslib.as_array((ctypes.c_uint8 * largest).from_address(ptr))
        rng = np.random.default_rng()
        print(f"single-value SSD hits through a per-host server (pid {server.pid}), one rank, medians of {iters} (us)")
        print(
            f"{'value':>9} {'raw read':>9} {'get':>8} {'x raw':>6} {'1 proc':>7} {'x raw':>6} {'exists':>7} "
            f"{'srv cpu/get':>12} {'cpu/raw':>8} {'checksum':>9}"
        )
        for size in (64 * KiB, 360 * KiB, 2 * MiB):
            n = 16
            values = [rng.integers(0, 256, size=size, dtype=np.uint8) for _ in range(n)]
            keys = [f"server-{size}-{i}-{rng.integers(1 << 60):x}" for i in range(n)]
            raw_file = root / f"server-raw-{size}.bin"
            with open(raw_file, "wb") as f:
                for k, v in zip(keys, values):
                    src[:size] = v
                    assert client.put_from_ptr(k, src_ptr, size)
                    assert local.put_from_ptr(k, src_ptr, size)
                    f.write(v.tobytes())
                f.flush()
                os.fsync(f.fileno())
            client.flush()
            local.flush()
            fd = os.open(raw_file, os.O_RDONLY | os.O_DIRECT)
            view = memoryview(dst[:size])
            t = {"raw": [], "get": [], "local": [], "exists": [], "checksum": []}
            srv_cpu = raw_cpu = 0
            clock = time.perf_counter_ns
            for it in range(iters):
                i = it % n
                c0 = time.thread_time_ns()
                a = clock()
                assert os.preadv(fd, [view], i * size) == size
                b = clock()
                raw_cpu += time.thread_time_ns() - c0
                value_checksum(ptr, size)  # over bytes the device just wrote, as the get verifies them
                t["raw"].append(b - a)
                t["checksum"].append(clock() - b)
                s0 = _cpu_ns(server.pid)
                a = clock()
                ok = client.batch_get_into_ptr([keys[(i + 1) % n]], [ptr], [size])
                b = clock()
                srv_cpu += _cpu_ns(server.pid) - s0
                t["get"].append(b - a)
                assert ok == [True]
                if it < n:
                    assert np.array_equal(dst[:size], values[(i + 1) % n])
                a = clock()
                ok = local.batch_get_into_ptr([keys[(i + 2) % n]], [ptr], [size])
                t["local"].append(clock() - a)
                assert ok == [True]
                a = clock()
                assert client.batch_exists([keys[i]]) == [True]
                t["exists"].append(clock() - a)
            os.close(fd)
            raw_file.unlink()
            m = {k: statistics.median(v) / 1e3 for k, v in t.items()}
            print(
                f"{size // KiB:>5} KiB {m['raw']:9.1f} {m['get']:8.1f} {m['raw'] / m['get']:6.2f} {m['local']:7.1f} "
                f"{m['raw'] / m['local']:6.2f} {m['exists']:7.1f} "
                f"{srv_cpu / iters / 1e3:12.1f} {raw_cpu / iters / 1e3:8.1f} {m['checksum']:9.1f}",
                flush=True,
            )
            client.clear()
            local.clear()
    finally:
        if client is not None:
            client.close()
        if local is not None:
            local.close()
        for h in handles:
            allocator.free(h)
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    args = sys.argv[1:]
    if args and args[0] == "--server":
        args = args[1:]
        iters = 200
        if args[:1] == ["--iters"]:
            iters, args = int(args[1]), args[2:]
        server_single(Path(args[0]) if args else Path(tempfile.mkdtemp(prefix="umbp_ssd_bench_")), iters)
        return
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
