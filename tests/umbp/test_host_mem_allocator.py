# SPDX-License-Identifier: MIT
"""UMBPHostMemAllocator: page alignment, huge pages with a truthful fallback, memfd-shared buffers
another process can map, idempotent free, argument errors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from mori.umbp import UMBPHostBufferBacking as Backing
from mori.umbp import UMBPHostMemAllocator

PAGE = os.sysconf("SC_PAGE_SIZE")
HUGE = 2 * 1024 * 1024


def view(handle) -> np.ndarray:
    return np.ctypeslib.as_array((np.ctypeslib.ctypes.c_ubyte * handle.requested_size).from_address(handle.ptr))


def fill_and_check(handle, seed: int) -> None:
    data = np.random.default_rng(seed).integers(0, 256, size=handle.requested_size, dtype=np.uint8)
    v = view(handle)
    v[:] = data
    assert np.array_equal(v, data)


def test_anonymous_alloc_is_page_aligned_and_free_resets() -> None:
    allocator = UMBPHostMemAllocator()
    h = allocator.alloc(12345, Backing.Anonymous, hugepage_size=HUGE, numa_node=-1, prefault=True)
    assert h and h.ptr != 0
    assert h.requested_size == 12345
    assert h.actual_backing == Backing.Anonymous
    assert h.actual_alignment == PAGE
    assert h.mapped_size == -(-12345 // PAGE) * PAGE
    assert h.ptr % h.actual_alignment == 0
    assert h.fd == -1
    assert "requested_size=12345" in repr(h)
    fill_and_check(h, 1)
    allocator.free(h)
    assert not h and h.ptr == 0 and h.requested_size == 0 and h.mapped_size == 0


def _thp_mode() -> str:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return f.read().split("[")[1].split("]")[0]
    except (OSError, IndexError):
        return "never"


def _anon_huge_kib(lo: int, hi: int) -> int:
    """AnonHugePages (KiB) of this process's mappings inside [lo, hi)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and all(c in "0123456789abcdef-" for c in head):
                a, b = (int(x, 16) for x in head.split("-"))
                inside = lo <= a and b <= hi
            elif inside and line.startswith("AnonHugePages:"):
                total += int(line.split()[1])
    return total


def test_large_anonymous_alloc_is_thp_aligned_and_advised() -> None:
    """From 2 MiB on, normal pages are mapped 2 MiB aligned and advised to be transparent huge
    pages (a large copy into 4 KiB pages misses the TLB once a page); where the kernel gives
    THP on advice (enabled = always or madvise), the prefaulted buffer is backed by them."""
    allocator = UMBPHostMemAllocator()
    n = 3 * HUGE + 12345
    h = allocator.alloc(n, Backing.Anonymous, prefault=True)
    try:
        assert h.actual_backing == Backing.Anonymous and h.actual_alignment == PAGE  # what was asked
        assert h.ptr % HUGE == 0 and h.mapped_size == -(-n // PAGE) * PAGE
        if _thp_mode() in ("always", "madvise"):
            assert _anon_huge_kib(h.ptr, h.ptr + h.mapped_size) >= 2 * HUGE // 1024
        fill_and_check(h, 7)
    finally:
        allocator.free(h)


@pytest.mark.parametrize("backing", [Backing.AnonymousHugetlb, Backing.AnonymousShmHugetlb])
def test_hugetlb_is_writable_and_reports_what_it_got(backing) -> None:
    allocator = UMBPHostMemAllocator()
    h = allocator.alloc(3 * 64 * 1024, backing, hugepage_size=HUGE, prefault=False)
    demoted = Backing.AnonymousShm if backing == Backing.AnonymousShmHugetlb else Backing.Anonymous
    assert h.actual_backing in (backing, demoted)
    if h.actual_backing == backing:
        assert h.actual_alignment == HUGE and h.mapped_size == HUGE
    else:
        assert h.actual_alignment == PAGE and h.mapped_size == 3 * 64 * 1024
    assert h.ptr % h.actual_alignment == 0
    fill_and_check(h, 2)
    allocator.free(h)
    assert not h


def test_free_is_idempotent() -> None:
    allocator = UMBPHostMemAllocator()
    h = allocator.alloc(4096)
    copy = h
    allocator.free(h)
    allocator.free(h)
    allocator.free(copy)  # the same object: already reset
    assert not h and h.requested_size == 0 and h.mapped_size == 0


def test_shm_buffer_is_shared_with_another_process() -> None:
    allocator = UMBPHostMemAllocator()
    h = allocator.alloc(100_000, Backing.AnonymousShm)
    assert h.actual_backing == Backing.AnonymousShm and h.fd >= 0
    fill_and_check(h, 3)
    expected = view(h).copy()
    # The child maps the memory file through /proc (what SCM_RIGHTS would hand over) and flips it.
    child = textwrap.dedent(
        f"""
        import mmap, os, sys
        fd = os.open("/proc/{os.getpid()}/fd/{h.fd}", os.O_RDWR)
        m = mmap.mmap(fd, {h.mapped_size})
        data = bytes(m[:{h.requested_size}])
        sys.stdout.write(str(sum(data)))
        m[:{h.requested_size}] = bytes(255 - b for b in data)
        m.close()
        """
    )
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60, check=True)
    assert int(out.stdout) == int(expected.sum())
    assert np.array_equal(view(h), 255 - expected)
    allocator.free(h)
    assert not h


def test_bad_arguments_are_refused() -> None:
    allocator = UMBPHostMemAllocator()
    with pytest.raises(ValueError, match="size must be > 0"):
        allocator.alloc(0)
    with pytest.raises(ValueError, match="hugepage_size"):
        allocator.alloc(4096, Backing.AnonymousHugetlb, hugepage_size=3 * 1024 * 1024)
    with pytest.raises(ValueError, match="numa_node"):
        allocator.alloc(4096, numa_node=-5)
    # A NUMA node that is not there is not fatal: placement is left to the kernel.
    h = allocator.alloc(8192, numa_node=0)
    fill_and_check(h, 4)
    allocator.free(h)
