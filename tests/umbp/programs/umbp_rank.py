# SPDX-License-Identifier: MIT
"""A rank of a host sharing one MORI-UMBP per-host server (launched by tests/umbp/test_server.py).

    umbp_rank.py share  ADDRESS RANK NRANKS DIR   # put own keys, then read every rank's, bit-exact
    umbp_rank.py victim ADDRESS DIR               # put batches until killed (SIGKILL mid-batch)
    umbp_rank.py race   ADDRESS RANK DIR          # auto_start a server, put a key, read the other's

Values are a function of their key's (seed, batch, index), so any process can check them.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

import mori.umbp as umbp

KEYS_PER_RANK = 64
VALUE = 48 << 10
VICTIM_BATCH = 128
VICTIM_VALUE = 32 << 10
VICTIM_MAX_BATCHES = 60


def value(seed: int, batch: int, index: int, size: int) -> np.ndarray:
    """The bytes key (seed, batch, index) holds: random, distinct per key."""
    return np.random.default_rng([seed, batch, index]).integers(0, 256, size, dtype=np.uint8)


def client(address: str, auto_start: bool = False) -> umbp.UMBPClient:
    cfg = umbp.UMBPConfig()
    sp = umbp.UMBPStandaloneProcessConfig()
    sp.address = address
    sp.auto_start = auto_start
    sp.startup_timeout_ms = 20000
    cfg.standalone_process = sp
    cfg.dram.capacity_bytes = 256 << 20
    cfg.ssd.enabled = False
    return umbp.UMBPClient(cfg)


def shm_buffer(size: int) -> tuple[umbp.UMBPHostBufferHandle, np.ndarray]:
    h = umbp.UMBPHostMemAllocator().alloc(size, umbp.UMBPHostBufferBacking.AnonymousShm)
    arr = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint8 * size).from_address(h.ptr))
    return h, arr


def wait_for_files(paths: list[Path], timeout: float) -> None:
    end = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        if time.monotonic() > end:
            raise TimeoutError(f"ranks not ready: {[str(p) for p in paths if not p.exists()]}")
        time.sleep(0.01)


def share(address: str, rank: int, nranks: int, sync: Path) -> None:
    c = client(address)
    n = KEYS_PER_RANK
    _, src = shm_buffer(n * VALUE)
    _, dst = shm_buffer(n * VALUE)
    c.register_memory(int(src.ctypes.data), src.nbytes)
    c.register_memory(int(dst.ctypes.data), dst.nbytes)
    for i in range(n):
        src[i * VALUE : (i + 1) * VALUE] = value(rank, 0, i, VALUE)
    keys = [f"share_r{rank}_k{i}" for i in range(n)]
    ptrs = [int(src.ctypes.data) + i * VALUE for i in range(n)]
    assert all(c.batch_put_from_ptr(keys, ptrs, [VALUE] * n)), "batch put failed"
    (sync / f"ready{rank}").touch()
    wait_for_files([sync / f"ready{r}" for r in range(nranks)], 30)
    for r in range(nranks):
        keys = [f"share_r{r}_k{i}" for i in range(n)]
        assert c.batch_exists_consecutive(keys + ["share_missing"]) == n
        dst[:] = 0
        ok = c.batch_get_into_ptr(keys, [int(dst.ctypes.data) + i * VALUE for i in range(n)], [VALUE] * n)
        assert all(ok), f"rank {rank}: misses reading rank {r}: {ok.count(False)}"
        for i in range(n):
            if not np.array_equal(dst[i * VALUE : (i + 1) * VALUE], value(r, 0, i, VALUE)):
                raise AssertionError(f"rank {rank}: key share_r{r}_k{i} read back different bytes")
    # A private (unregistered) buffer goes through the server's process_vm path, also exactly.
    private = np.zeros(VALUE, np.uint8)
    assert c.get_into_ptr(f"share_r{(rank + 1) % nranks}_k3", int(private.ctypes.data), VALUE)
    assert np.array_equal(private, value((rank + 1) % nranks, 0, 3, VALUE))
    print(f"rank {rank} OK", flush=True)


def victim(address: str, sync: Path) -> None:
    c = client(address)
    _, buf = shm_buffer(VICTIM_BATCH * VICTIM_VALUE)
    c.register_memory(int(buf.ctypes.data), buf.nbytes)
    private = np.zeros(VICTIM_BATCH * VICTIM_VALUE, np.uint8)  # odd batches: unregistered memory
    for b in range(VICTIM_MAX_BATCHES):
        target = buf if b % 2 == 0 else private
        for i in range(VICTIM_BATCH):
            target[i * VICTIM_VALUE : (i + 1) * VICTIM_VALUE] = value(999, b, i, VICTIM_VALUE)
        keys = [f"victim_b{b}_k{i}" for i in range(VICTIM_BATCH)]
        ptrs = [int(target.ctypes.data) + i * VICTIM_VALUE for i in range(VICTIM_BATCH)]
        c.batch_put_from_ptr(keys, ptrs, [VICTIM_VALUE] * VICTIM_BATCH)
        if b == 2:
            (sync / "victim_running").touch()
    print("victim finished its batches before the kill; waiting for it", flush=True)
    time.sleep(120)


def race(address: str, rank: int, sync: Path) -> None:
    (sync / f"race_ready{rank}").touch()
    wait_for_files([sync / f"race_ready{r}" for r in range(2)], 30)
    c = client(address, auto_start=True)
    mine = value(rank, 7, 0, VALUE)
    assert c.put_from_ptr(f"race_r{rank}", int(mine.ctypes.data), VALUE)
    (sync / f"race_put{rank}").touch()
    wait_for_files([sync / f"race_put{r}" for r in range(2)], 30)
    other = np.zeros(VALUE, np.uint8)
    assert c.get_into_ptr(f"race_r{1 - rank}", int(other.ctypes.data), VALUE), "the other rank's key is missing"
    assert np.array_equal(other, value(1 - rank, 7, 0, VALUE))
    print(f"rank {rank} OK", flush=True)


def main(argv: list[str]) -> int:
    mode, address = argv[0], argv[1]
    if mode == "share":
        share(address, int(argv[2]), int(argv[3]), Path(argv[4]))
    elif mode == "victim":
        victim(address, Path(argv[2]))
    elif mode == "race":
        race(address, int(argv[2]), Path(argv[3]))
    else:
        raise SystemExit(f"unknown mode {mode}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
