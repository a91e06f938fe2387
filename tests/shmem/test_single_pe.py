# SPDX-License-Identifier: MIT
"""Single-PE behaviour of the API (in-process): allocator, sizes, argument errors."""

from __future__ import annotations

import numpy as np
import pytest

import mori.shmem as sh
from mori.core import parse_size


@pytest.fixture(scope="module")
def pe():
    sh.init()
    yield
    sh.finalize()


@pytest.mark.parametrize(
    "text,value", [("64", 64), ("4K", 4096), ("2MiB", 2 << 20), ("1.5G", 3 << 29), ("1gb", 1 << 30), ("7 KiB", 7 << 10)]
)
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("bad", ["", "M", "12XB", "-3K"])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError):
        parse_size(bad)


def test_alignment_and_reuse(pe):
    sizes = [1, 63, 64, 65, 4095, 1 << 20]
    for align in (64, 256, 4096, 1 << 16, 1 << 21):
        ptrs = [sh.shmem_malloc_align(align, s) for s in sizes]
        assert all(p % align == 0 for p in ptrs)
        assert len(set(ptrs)) == len(ptrs)
        for p in ptrs:
            sh.shmem_free(p)
    a = sh.shmem_malloc(1000)
    sh.shmem_free(a)
    assert sh.shmem_malloc(1000) == a  # first fit reuses the freed block
    sh.shmem_free(a)
    with pytest.raises(ValueError, match="power of two"):
        sh.shmem_malloc_align(48, 10)
    with pytest.raises(ValueError, match="largest supported"):
        sh.shmem_malloc_align(1 << 31, 10)
    assert sh.shmem_malloc(0) == 0


def test_free_errors(pe):
    with pytest.raises(ValueError, match="not a live symmetric allocation"):
        sh.shmem_free(12345)
    a = sh.shmem_malloc(64)
    sh.shmem_free(a)
    with pytest.raises(ValueError):
        sh.shmem_free(a)


def test_exhaustion_message(pe):
    with pytest.raises(MemoryError, match=r"requested .* free .* MORI_SHMEM_HEAP_SIZE"):
        sh.shmem_malloc(sh.heap_size() + 1)


def test_mori_api_surface(pe):
    assert sh.MORI_SHMEM_INIT_WITH_MPI_COMM == 0 and sh.MORI_SHMEM_INIT_WITH_UNIQUEID == 1
    assert sh.shmem_mype() == 0 and sh.shmem_npes() == 1
    uid = sh.shmem_get_unique_id()
    assert isinstance(uid, bytes) and len(uid) == 128
    with pytest.raises(ValueError, match="128 bytes"):
        sh.shmem_init_attr(sh.MORI_SHMEM_INIT_WITH_UNIQUEID, 0, 1, b"short")
    with pytest.raises(ValueError, match="flags"):
        sh.shmem_init_attr(7, 0, 1, uid)
    buf = np.zeros(16)
    assert sh.shmem_buffer_register(buf.ctypes.data, buf.nbytes) == 0
    assert sh.shmem_buffer_deregister(buf.ctypes.data, buf.nbytes) == 0
    p = sh.shmem_malloc(64)
    assert sh.shmem_ptr_p2p(p, 0, 0) == p
    assert sh.shmem_ptr_p2p(12345, 0, 0) == 0  # not symmetric
    with pytest.raises(ValueError, match="my_pe"):
        sh.shmem_ptr_p2p(p, 3, 0)
    sh.shmem_free(p)


def test_torch_tensor_on_heap(pe):
    torch = pytest.importorskip("torch")
    t = sh.tensor((4, 8), torch.bfloat16)
    assert t.dtype == torch.bfloat16 and t.shape == (4, 8) and not t.any()
    src = torch.randn(4, 8).to(torch.bfloat16)
    sh.put(t, src, pe=0)
    assert torch.equal(t, src)
    sh.free(t)
    # element-wise operations take CPU tensors too
    c = sh.tensor(4, torch.int64)
    sh.p(c, 41, pe=0, index=2)
    assert sh.atomic_fetch_add(c, 1, pe=0, index=2) == 41 and int(c[2]) == 42
    assert sh.g(c, pe=0, index=2) == 42
    assert sh.wait_until(c, ">=", 42, index=2) == 42 and sh.test(c, "==", 42, index=2)
    b = sh.tensor(2, torch.bfloat16)
    with pytest.raises(ValueError, match="bfloat16"):
        sh.atomic_add(b, 1, pe=0)
    sh.free(b)
    sh.free(c)


def test_atomic_dtype_errors(pe):
    f = sh.zeros(1, np.float32)
    with pytest.raises(ValueError, match="float32"):
        sh.atomic_add(f, 1.0, pe=0)
    i = sh.zeros(1, np.int16)
    with pytest.raises(ValueError):
        sh.atomic_inc(i, pe=0)
    with pytest.raises(ValueError, match="cmp"):
        sh.wait_until(sh.zeros(1, np.int64), "=>", 0)
    for a in (f, i):
        sh.free(a)
