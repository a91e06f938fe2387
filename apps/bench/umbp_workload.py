# SPDX-License-Identifier: MIT
"""The timed loops of ``mori bench umbp``, shared by the one-process run and the ranks of the
per-host-server run: UMBP put/get/exists, and the baselines moving the same bytes into the same
destination buffers (numpy memcpy, raw ``os.preadv`` from a file with its page cache dropped).

A call's samples are ``(start_ns, end_ns)`` pairs of ``time.monotonic_ns()`` (CLOCK_MONOTONIC,
one clock for every process of the host), so the ranks' samples of one synchronised iteration
can be merged into the wall time of the whole iteration.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

Sample = tuple[int, int]  # (start_ns, end_ns) of one batch call


def sglang_keys(count: int, tag: str) -> list[str]:
    """``count`` keys shaped like SGLang's MLA keys (64 hex digits of a page hash + ``__k``), unique
    per call: ``tag`` keeps rows and ranks apart."""
    return [f"{secrets.token_hex(24)}{tag}{i:08x}__k" for i in range(count)]


@dataclass
class HostBuffers:
    """A source and a destination region of ``nbytes`` each, from UMBPHostMemAllocator (anonymous
    memory in one process; memfd-backed shared memory for the per-host server, which maps it) or,
    when ``allocator`` is None, from numpy."""

    nbytes: int
    allocator: object = None
    backing: object = None
    handles: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.src = self._region()
        self.dst = self._region()
        # Random bytes (never zeros): a get that writes nothing cannot pass the check.
        rng = np.random.default_rng()
        chunk = 64 << 20
        for off in range(0, self.nbytes, chunk):
            n = min(chunk, self.nbytes - off)
            self.src[off : off + n] = np.frombuffer(rng.bytes(n), dtype=np.uint8)
        self.dst[:] = 0

    def _region(self) -> np.ndarray:
        if self.allocator is None:
            return np.empty(self.nbytes, dtype=np.uint8)
        handle = self.allocator.alloc(self.nbytes, self.backing)
        if not handle:
            raise MemoryError(f"UMBPHostMemAllocator could not allocate {self.nbytes} bytes")
        self.handles.append(handle)
        raw = (ctypes.c_uint8 * self.nbytes).from_address(int(handle.ptr))
        return np.frombuffer(raw, dtype=np.uint8)

    @property
    def src_ptr(self) -> int:
        return int(self.src.ctypes.data)

    @property
    def dst_ptr(self) -> int:
        return int(self.dst.ctypes.data)

    def regions(self) -> list[tuple[int, int]]:
        """(pointer, bytes) of each region, as ``register_memory`` wants them."""
        if self.handles:
            return [(int(h.ptr), int(h.mapped_size)) for h in self.handles]
        return [(self.src_ptr, self.nbytes), (self.dst_ptr, self.nbytes)]

    def free(self) -> None:
        self.src = self.dst = None
        for h in self.handles:
            self.allocator.free(h)
        self.handles.clear()


@dataclass
class Row:
    """One (value size, batch) cell: where its values live in the buffers."""

    size: int
    batch: int

    @property
    def nbytes(self) -> int:
        return self.size * self.batch

    def src_ptrs(self, buf: HostBuffers) -> list[int]:
        return [buf.src_ptr + i * self.size for i in range(self.batch)]

    def dst_ptrs(self, buf: HostBuffers) -> list[int]:
        return [buf.dst_ptr + i * self.size for i in range(self.batch)]

    def sizes(self) -> list[int]:
        return [self.size] * self.batch


def iterations(
    call: Callable[[], None],
    iters: int,
    budget_s: float,
    min_iters: int = 3,
    before: Optional[Callable[[int], None]] = None,
    sync: Optional[Callable[[], None]] = None,
) -> list[Sample]:
    """One untimed warm-up, then timed calls until ``iters`` or until ``budget_s`` is spent (at
    least ``min_iters``). ``before(i)`` runs untimed ahead of call ``i`` (-1 = the warm-up);
    ``sync()`` lines the ranks up ahead of each call (and must then be called as often by all)."""
    samples: list[Sample] = []
    spent = 0
    for i in range(-1, iters):
        if i >= min_iters and spent >= budget_s * 1e9:
            break
        if before is not None:
            before(i)
        if sync is not None:
            sync()
        t0 = time.monotonic_ns()
        call()
        t1 = time.monotonic_ns()
        if i >= 0:
            samples.append((t0, t1))
            spent += t1 - t0
    return samples


def fixed_iterations(
    call: Callable[[], None],
    iters: int,
    before: Optional[Callable[[int], None]] = None,
    sync: Optional[Callable[[], None]] = None,
) -> list[Sample]:
    """Exactly ``iters`` timed calls after one warm-up (the ranks of a server run must agree on
    the count, so no time budget)."""
    return iterations(call, iters, budget_s=float("inf"), min_iters=iters, before=before, sync=sync)


def check_all(results: Sequence, what: str) -> None:
    bad = [i for i, ok in enumerate(results) if not ok]
    if bad:
        raise RuntimeError(f"{what}: {len(bad)} of {len(results)} keys failed (first at index {bad[0]})")


def verify(buf: HostBuffers, row: Row, what: str) -> None:
    """The destination holds the source's bytes, every value of the batch, bit for bit."""
    if not np.array_equal(buf.dst[: row.nbytes], buf.src[: row.nbytes]):
        first = int(np.flatnonzero(buf.dst[: row.nbytes] != buf.src[: row.nbytes])[0])
        raise RuntimeError(
            f"{what}: wrong bytes in value {first // row.size} of the batch (size {row.size}, batch {row.batch})"
        )


class UmbpOps:
    """UMBP's batch put/get/exists for one row, through any client (local or per-host server)."""

    def __init__(self, client, buf: HostBuffers, tag: str) -> None:
        self.client, self.buf, self.tag = client, buf, tag
        self.last_keys: list[str] = []
        self.last_hits: Optional[dict] = None  # where the last get()'s values came from

    def _hit_counters(self) -> Optional[dict]:
        """The store's dram_hits / ssd_hits / misses counters, when the client reports them."""
        stats = getattr(self.client, "stats", None)
        if stats is None:
            return None
        s = stats()
        get = s.get if isinstance(s, dict) else lambda k: getattr(s, k, None)
        out = {k: get(k) for k in ("dram_hits", "ssd_hits", "misses")}
        return out if all(v is not None for v in out.values()) else None

    def put(
        self,
        row: Row,
        iters: int,
        budget_s: float,
        sync=None,
        fixed: bool = False,
        after: Optional[Callable[[], None]] = None,
    ) -> list[Sample]:
        """Batch puts of fresh keys (a repeated key would only be deduplicated), ``after()`` inside
        the timed call (e.g. ``flush`` for "on the SSD tier when it returns")."""
        ptrs, sizes = row.src_ptrs(self.buf), row.sizes()
        pending: dict = {}

        def before(i: int) -> None:
            pending["keys"] = sglang_keys(row.batch, f"{self.tag}p{row.size:x}b{row.batch}i{i + 1}")

        def call() -> None:
            keys = pending["keys"]
            check_all(self.client.batch_put_from_ptr(keys, ptrs, sizes), "UMBP batch_put_from_ptr")
            if after is not None:
                after()
            self.last_keys = keys

        if fixed:
            return fixed_iterations(call, iters, before=before, sync=sync)
        return iterations(call, iters, budget_s, before=before, sync=sync)

    def get(
        self,
        row: Row,
        iters: int,
        budget_s: float,
        sync=None,
        fixed: bool = False,
        before: Optional[Callable[[int], None]] = None,
    ) -> list[Sample]:
        """Batch gets of the last put's keys into the destination buffer; the bytes are checked
        after the warm-up call (the destination is zeroed ahead of it)."""
        keys, ptrs, sizes = self.last_keys, row.dst_ptrs(self.buf), row.sizes()
        if len(keys) != row.batch:
            raise RuntimeError("UMBP get: no keys of this row were put")
        self.buf.dst[: row.nbytes] = 0
        state = {"checked": False}

        def call() -> None:
            got = self.client.batch_get_into_ptr(keys, ptrs, sizes)
            if not all(got):
                stats = self.client.stats() if hasattr(self.client, "stats") else {}
                check_all(got, f"UMBP batch_get_into_ptr (store counters: {stats})")
            if not state["checked"]:
                verify(self.buf, row, "UMBP batch_get_into_ptr")
                state["checked"] = True

        start = self._hit_counters()
        if fixed:
            samples = fixed_iterations(call, iters, before=before, sync=sync)
        else:
            samples = iterations(call, iters, budget_s, before=before, sync=sync)
        end = self._hit_counters()
        self.last_hits = {k: end[k] - start[k] for k in end} if start and end else None
        return samples

    def exists_consecutive(self, keys: list[str], iters: int) -> list[Sample]:
        want = len(keys)

        def call() -> None:
            n = self.client.batch_exists_consecutive(keys)
            if n != want:
                raise RuntimeError(f"UMBP batch_exists_consecutive: {n} of {want} keys found")

        return fixed_iterations(call, iters)


def memcpy_samples(
    buf: HostBuffers, row: Row, iters: int, budget_s: float, sync=None, fixed: bool = False
) -> list[Sample]:
    """numpy copies of the row's values, one per value (as a store copies them), from the source
    into the same destination buffer: the DRAM ceiling."""
    pairs = [
        (buf.dst[i * row.size : (i + 1) * row.size], buf.src[i * row.size : (i + 1) * row.size])
        for i in range(row.batch)
    ]

    def call() -> None:
        for dst, src in pairs:
            np.copyto(dst, src)

    if fixed:
        samples = fixed_iterations(call, iters, sync=sync)
    else:
        samples = iterations(call, iters, budget_s, sync=sync)
    verify(buf, row, "memcpy")
    return samples


def drop_page_cache(paths: Sequence[str]) -> None:
    """posix_fadvise(DONTNEED) over each whole file: its clean pages leave the page cache, so the
    next read comes from the device (what the SSD tier's reads meet after a cold start)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def files_under(directory: str) -> list[str]:
    out = []
    for root, _, names in os.walk(directory):
        out.extend(os.path.join(root, n) for n in names)
    return out


DIRECT_ALIGN = 4096


class RawFile:
    """The same bytes as a row's values in one plain file on the SSD tier's file system: the raw
    read ceiling. Reads go value by value (one ``os.preadv`` each, straight into the destination
    view). Like the SSD tier, they bypass the page cache with O_DIRECT where the file system, the
    value size and the buffer allow it (4 KiB alignment); otherwise they are buffered reads with
    the file's page cache dropped before every timed call. ``how`` says which."""

    def __init__(self, directory: str, buf: HostBuffers, row: Row, name: str = "raw") -> None:
        self.path = os.path.join(directory, f"{name}-{row.size}x{row.batch}.bin")
        self.buf, self.row = buf, row
        with open(self.path, "wb") as f:
            f.write(memoryview(buf.src[: row.nbytes]))
            f.flush()
            os.fsync(f.fileno())
        self.how = "buffered, page cache dropped"
        aligned = row.size % DIRECT_ALIGN == 0 and buf.dst_ptr % DIRECT_ALIGN == 0
        if aligned and hasattr(os, "O_DIRECT"):
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_DIRECT)
                try:
                    os.preadv(fd, [memoryview(buf.dst[:DIRECT_ALIGN])], 0)
                    self.how = "O_DIRECT"
                finally:
                    os.close(fd)
            except OSError:  # the file system refuses O_DIRECT (tmpfs, some overlays)
                pass

    def open(self) -> tuple[Callable[[int], None], Callable[[], None], Callable[[], None]]:
        """(before, call, close): ``before(i)`` drops the file's page cache, ``call()`` reads every
        value once into the destination views, ``close()`` closes the file."""
        flags = os.O_RDONLY | (os.O_DIRECT if self.how == "O_DIRECT" else 0)
        fd = os.open(self.path, flags)
        row = self.row
        views = [memoryview(self.buf.dst[i * row.size : (i + 1) * row.size]) for i in range(row.batch)]

        def before(i: int) -> None:
            drop_page_cache([self.path])

        def call() -> None:
            for i, view in enumerate(views):
                if os.preadv(fd, [view], i * row.size) != row.size:
                    raise RuntimeError(f"raw read: short read of {self.path}")

        return before, call, lambda: os.close(fd)

    def before_each_get(
        self, tier_dir: str, samples: list, sync: Optional[Callable[[], None]] = None
    ) -> tuple[Callable[[int], None], Callable[[], None]]:
        """(before, close) for an SSD-hit get row: ``before(i)`` reads the same bytes raw right
        before get ``i``, timed into ``samples`` (after ``sync()`` where given: every rank's at
        once), so a disk whose speed drifts moves both figures of the row alike; the warm-up's
        bytes are checked, then zeroed ahead of the get's own check; the tier's page cache is
        dropped last. ``close()`` closes the file."""
        raw_before, raw_call, raw_close = self.open()
        buf, row = self.buf, self.row

        def before(i: int) -> None:
            raw_before(i)
            if sync is not None:
                sync()
            t0 = time.monotonic_ns()
            raw_call()
            t1 = time.monotonic_ns()
            if i >= 0:
                samples.append((t0, t1))
            else:
                verify(buf, row, "raw read")
                buf.dst[: row.nbytes] = 0
            drop_page_cache(files_under(tier_dir))

        return before, raw_close

    def samples(self, iters: int, budget_s: float, sync=None, fixed: bool = False) -> list[Sample]:
        before, call, close = self.open()
        self.buf.dst[: self.row.nbytes] = 0
        try:
            if fixed:
                samples = fixed_iterations(call, iters, before=before, sync=sync)
            else:
                samples = iterations(call, iters, budget_s, before=before, sync=sync)
        finally:
            close()
        verify(self.buf, self.row, "raw read")
        return samples

    def remove(self) -> None:
        os.remove(self.path)


def _figures(call_s: np.ndarray, keys: int, nbytes: int, lat_us: np.ndarray) -> dict:
    """ops/s and GiB/s of the median call (robust to the bursts of load a shared machine has), the
    means next to them, and the p50/p99 of one call."""
    med, mean = float(np.median(call_s)), float(call_s.mean())
    return {
        "iters": len(call_s),
        "ops/s": keys / med,
        "GiB/s": nbytes / med / (1 << 30) if nbytes else None,
        "mean ops/s": keys / mean,
        "mean GiB/s": nbytes / mean / (1 << 30) if nbytes else None,
        "p50 us": float(np.percentile(lat_us, 50)),
        "p99 us": float(np.percentile(lat_us, 99)),
    }


def summarize(samples: Sequence[Sample], keys_per_call: int, bytes_per_call: int) -> dict:
    """The figures of one process's calls."""
    lat = np.array([(b - a) for a, b in samples], dtype=np.float64)
    return _figures(lat / 1e9, keys_per_call, bytes_per_call, lat / 1e3)


def summarize_ranks(per_rank: Sequence[Sequence[Sample]], keys_per_call: int, bytes_per_call: int) -> dict:
    """The same figures for ranks that ran their calls in lock step: an iteration's wall time runs
    from the first rank's start to the last rank's end and carries every rank's keys and bytes;
    p50/p99 are over every rank's calls."""
    n = min(len(s) for s in per_rank)
    walls = (
        np.array([max(s[i][1] for s in per_rank) - min(s[i][0] for s in per_rank) for i in range(n)], dtype=np.float64)
        / 1e9
    )
    lat = np.array([(b - a) for s in per_rank for a, b in s[:n]], dtype=np.float64) / 1e3
    ranks = len(per_rank)
    return _figures(walls, ranks * keys_per_call, ranks * bytes_per_call, lat)
