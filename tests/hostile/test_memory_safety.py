# SPDX-License-Identifier: MIT
"""Bad arguments must be a clear error naming the argument, never a write (issue 13, items 1-5,
and the use-before-init message of item 18). Each case is the issue's reproduction, run in a
fresh one-PE process: before the fixes they crashed, overwrote memory or succeeded, which here
reads as a non-zero exit or a failed check rather than a crashed test run."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness import check, job_env, mori_run

HERE = Path(__file__).parent

PRELUDE = """
import numpy as np
import mori.shmem as sh
from mori import _C
from mori.core.errors import InvalidArgument

def refused(fn, exc, *words):
    try:
        fn()
    except exc as e:
        for w in words:
            assert w in str(e), f"{w!r} not in the message: {e}"
        return str(e)
    raise AssertionError(f"no {exc.__name__} from {fn}")

rng = np.random.default_rng()
sh.init()
"""


def run_one_pe(body: str, timeout: float = 60) -> str:
    """Runs PRELUDE + body in a fresh process; it must print 'ok' and exit 0."""
    code = PRELUDE + textwrap.dedent(body) + "\nsh.finalize()\nprint('ok')\n"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=job_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("ok"), (
        f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


def test_heap_allocations_near_size_max_fail():
    """Item 1: shmem_malloc(2**64-100) returned a pointer and the next allocation overlapped it."""
    run_one_pe("""
        free0 = sh.heap_free()
        for size in (2**64 - 100, 2**64 - 1, 2**64 - 64, 2**63 + 1, sh.heap_size() + 1):
            refused(lambda: sh.shmem_malloc(size), MemoryError, "shmem_malloc")
            refused(lambda: sh.shmem_malloc_align(4096, size), MemoryError)
        refused(lambda: sh.shmem_malloc(2**64), MemoryError, "shmem_malloc")
        refused(lambda: _C.shmem.calloc(2**63, 4), MemoryError, "overflow")
        live = sh.shmem_malloc(4096)
        view = np.frombuffer((__import__('ctypes').c_char * 4096).from_address(live), np.uint8)
        data = rng.integers(0, 256, 4096, dtype=np.uint8)
        view[:] = data
        for size in (2**64 - 1, 2**64 - 64):
            refused(lambda: _C.shmem.realloc(live, size), MemoryError)
        assert np.array_equal(view, data), "a failed realloc changed the block"
        nxt = sh.shmem_malloc(4096)
        assert nxt >= live + 4096 or nxt + 4096 <= live, "the next block overlaps the live one"
        sh.shmem_free(nxt)
        sh.shmem_free(live)
        assert sh.heap_free() == free0, "heap bytes leaked"
    """)


def test_capi_allocations_near_size_max_return_null(tmp_path):
    """Item 1, C API: shmem_malloc(SIZE_MAX) was non-NULL and calloc's overflow ended the job."""
    from mori.shmem.capi import paths

    exe = tmp_path / "heap_limits"
    cmd = [
        str(paths().bin_dir / "oshcc"),
        "-std=c11",
        "-O1",
        "-Wall",
        "-Werror",
        "-o",
        str(exe),
        str(HERE / "heap_limits.c"),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    seed = str(random.getrandbits(48))
    out = check(mori_run(2, [str(exe), seed], timeout=90))
    assert "heap_limits: OK on 2 PEs" in out, f"seed {seed}:\n{out}"


def test_strided_rma_is_bounded_by_the_arrays():
    """Item 2: iget(np.zeros(4), x, 1, 1, 1<<16, 0) overwrote the Python heap, iput segfaulted,
    and a span of nelems=2**61+1 wrapped past the span check."""
    run_one_pe("""
        x = sh.array(rng.integers(-2**40, 2**40, 64))
        guard = sh.array(rng.integers(-2**40, 2**40, 64))
        keep = guard.copy()
        local = np.zeros(4, np.int64)
        refused(lambda: sh.iget(local, x, 1, 1, 1 << 16, 0), ValueError, "iget", "nelems")
        refused(lambda: sh.iput(x, local, 1, 1, 1 << 16, 0), ValueError, "iput", "nelems")
        refused(lambda: sh.iget(local, x, 1, 1, 2**61 + 1, 0), ValueError, "nelems")
        refused(lambda: sh.iput(x, local, 64, 1, 2, 0), ValueError, "dest")
        refused(lambda: sh.iput(x, local, 1, 4, 2, 0), ValueError, "source")
        refused(lambda: sh.iput(x, local, -1, 1, 2, 0), ValueError, "stride")
        refused(lambda: sh.iget(local, x, 1, 1, -1, 0), ValueError, "nelems")
        refused(lambda: sh.iget(np.zeros(4, np.float64), x, 1, 1, 4, 0), ValueError, "dtype")
        refused(lambda: sh.iget(local[::2], x, 1, 1, 2, 0), ValueError, "contiguous")
        # the native span check itself, without Python's: 2**61+1 elements of 8 bytes wrap to 8
        addr = x.__array_interface__["data"][0]
        for n, stride in ((2**61 + 1, 1), (3, 2**62), (3, -2**62), (2**63, 1)):
            refused(lambda: _C.shmem.iput(addr, local.ctypes.data, stride, 0, n, 8, 0), ValueError, "shmem_iput")
            refused(lambda: _C.shmem.iget(local.ctypes.data, addr, 0, stride, n, 8, 0), ValueError, "shmem_iget")
        assert np.array_equal(guard, keep)
        # a correct strided call still moves exactly its elements
        src = rng.integers(-2**40, 2**40, 8)
        before = x.copy()
        sh.iput(x, src, 3, 1, 8, 0)
        before[0:24:3] = src
        assert np.array_equal(x, before)
        back = np.zeros(16, np.int64)
        sh.iget(back, x, 2, 3, 8, 0)
        assert np.array_equal(back[::2], src) and not back[1::2].any()
        assert np.array_equal(guard, keep)
    """)


def test_element_operations_check_the_index():
    """Item 3: p/g/atomics/wait_until/signals wrote into neighbouring allocations or the control
    block; wait_until(index=10**12) segfaulted."""
    run_one_pe("""
        x = sh.array(rng.integers(1, 2**40, 8))
        guard = sh.array(rng.integers(1, 2**40, 8))
        keep, xs = guard.copy(), x.copy()
        ctrl = np.frombuffer((__import__('ctypes').c_char * 4096).from_address(_C.shmem.heap_base()), np.uint8).copy()
        base = _C.shmem.heap_base()
        into_ctrl = -((x.__array_interface__["data"][0] - base) // 8)  # index of the control block's first word
        for index in (8, 9, 10**12, -1, into_ctrl, 2**64):
            refused(lambda: sh.p(x, 5, 0, index=index), ValueError, "index")
            refused(lambda: sh.g(x, 0, index=index), ValueError, "index")
            for op in (sh.atomic_add, sh.atomic_set, sh.atomic_fetch_add, sh.atomic_swap, sh.atomic_xor):
                refused(lambda: op(x, 3, 0, index=index), ValueError, "index")
            refused(lambda: sh.atomic_inc(x, 0, index=index), ValueError, "index")
            refused(lambda: sh.atomic_compare_swap(x, 0, 1, 0, index=index), ValueError, "index")
            refused(lambda: sh.wait_until(x, "!=", 0, index=index), ValueError, "index")
            refused(lambda: sh.test(x, "!=", 0, index=index), ValueError, "index")
        assert np.array_equal(guard, keep) and np.array_equal(x, xs)
        now = np.frombuffer((__import__('ctypes').c_char * 4096).from_address(base), np.uint8)
        assert np.array_equal(now, ctrl), "the control block changed"
        # native waits and signal reads refuse addresses outside the heap instead of faulting
        local = np.zeros(2, np.int64)
        refused(lambda: _C.shmem.wait_until(local.ctypes.data, 0, 0, 8, 0), ValueError, "shmem_wait_until")
        refused(lambda: _C.shmem.wait_until(base + 10**12, 0, 0, 8, 0), ValueError, "shmem_wait_until")
        refused(lambda: _C.shmem.test(base + 10**12, 0, 0, 8, 0), ValueError, "shmem_test")
        refused(lambda: _C.shmem.test(base + 4096, 0, 0, 3, 0), ValueError, "width")
        refused(lambda: _C.shmem.signal_fetch(local.ctypes.data), ValueError, "shmem_signal_fetch")
        # signals: signal[0] must exist
        empty_sig = sh.zeros(0, np.uint64)
        refused(lambda: sh.signal_fetch(empty_sig), ValueError, "signal")
        refused(lambda: sh.put_signal(x, xs, empty_sig, 1, sh.SIGNAL_SET, 0), ValueError, "signal")
        refused(lambda: sh.put_signal(x, xs, sh.zeros(1, np.uint64), 1, 7, 0), ValueError, "sig_op")
        assert sh.ptr(x, 2**70) is None and sh.ptr(x, -1) is None and sh.ptr(x, 0) is not None
        # the valid index still hits exactly its element
        i = int(rng.integers(0, 8))
        v = int(rng.integers(1, 2**40))
        sh.p(x, v, 0, index=i)
        xs[i] = v
        assert np.array_equal(x, xs) and sh.g(x, 0, index=i) == v
        assert sh.wait_until(x, "==", v, index=i) == v  # before element 7 changes: i may be 7
        assert sh.atomic_fetch_add(x, 5, 0, index=7) == xs[7] and x[7] == xs[7] + 5
        two_d = sh.zeros((3, 4), np.int64)
        col = two_d[:, 1]  # a strided view: index 2 is two_d[2, 1]
        sh.p(col, 77, 0, index=2)
        assert two_d[2, 1] == 77 and two_d.sum() == 77
        refused(lambda: sh.p(col, 1, 0, index=3), ValueError, "index")
        assert np.array_equal(guard, keep)
    """)


def test_rma_between_dtypes_is_refused():
    """Item 4: put/get between tensors of different dtypes copied raw bytes silently."""
    run_one_pe("""
        import torch
        d = sh.zeros(8, np.int64)
        refused(lambda: sh.put(d, np.ones(8, np.float64), 0), ValueError, "dtype", "int64", "float64")
        refused(lambda: sh.put(d, np.ones(8, np.int32), 0), ValueError, "int32")
        refused(lambda: sh.get(np.zeros(8, np.float32), d, 0), ValueError, "dtype")
        t = sh.tensor(8, torch.float32)
        refused(lambda: sh.put(t, torch.ones(8, dtype=torch.int32), 0), ValueError, "dtype")
        refused(lambda: sh.get(torch.zeros(8, dtype=torch.float64), t, 0), ValueError, "dtype")
        refused(lambda: sh.put_signal(d, np.ones(8, np.float64), sh.zeros(1, np.uint64), 1, sh.SIGNAL_SET, 0),
                ValueError, "dtype")
        assert not d.any() and not t.any()
        # same dtype across numpy and torch, and lists converted to dest's dtype, still work
        vals = rng.integers(-2**40, 2**40, 8)
        sh.put(d, list(vals), 0)
        assert np.array_equal(d, vals)
        src = torch.from_numpy(rng.standard_normal(8).astype(np.float32))
        sh.put(t, src.numpy(), 0)
        assert torch.equal(t, src)
        back = torch.zeros(8, dtype=torch.float32)
        sh.get(back, t, 0)
        assert torch.equal(back, src)
    """)


def test_bad_shapes_are_errors_and_leak_nothing():
    """Item 5: zeros/empty with a negative or overflowing shape."""
    run_one_pe("""
        import torch
        free0 = sh.heap_free()
        for shape in (-1, (-3, 5), (4, -1)):
            refused(lambda: sh.zeros(shape), ValueError, "negative")
            refused(lambda: sh.empty(shape, np.int8), ValueError, "negative")
            refused(lambda: sh.tensor(shape), ValueError, "negative")
        for shape in ((2**32, 2**32), (2**62, 8), (2**40,) * 3, (2**20, 2**20)):
            refused(lambda: sh.zeros(shape, np.int64), MemoryError)
            refused(lambda: sh.tensor(shape, torch.int64), MemoryError)
        from mori.shmem import tensor_utils  # GPU tensors: checked the same way, before any device is needed
        for shape in ((2**62, 8), (2**61, 16)):  # torch.Size.numel() wraps these to 0 and 2
            refused(lambda: tensor_utils.mori_shmem_create_tensor(shape, torch.float32), MemoryError)
        refused(lambda: tensor_utils.mori_shmem_create_tensor((4, -2), torch.float32), ValueError, "negative")
        refused(lambda: sh.zeros((1,) * 65), ValueError, "dimensions")
        refused(lambda: sh.zeros(2.5), ValueError, "shape")
        refused(lambda: sh.zeros(4, object), ValueError, "object")
        refused(lambda: sh.full(4, "abc", np.int64), ValueError, "fill_value")
        refused(lambda: sh.full(4, 300, np.int8), ValueError, "fill_value")
        assert sh.heap_free() == free0, f"heap bytes leaked: {free0 - sh.heap_free()}"
        # empty shapes are fine, for tensors too (torch.frombuffer refuses count 0)
        for a in (sh.zeros(0), sh.zeros((3, 0)), sh.tensor(0), sh.tensor((0, 2), torch.bfloat16)):
            assert a.shape[-1] == 0 or a.shape[0] == 0
            sh.free(a)
        assert sh.heap_free() == free0
    """)


def test_use_before_init_names_the_call():
    """Item 18: shmem_malloc before init reported the error as coming from gpu_bound."""
    code = (
        "import mori.shmem as sh\n"
        "for name, f in (('shmem_malloc', lambda: sh.shmem_malloc(8)), ('shmem_malloc_align', "
        "lambda: sh.shmem_malloc_align(64, 8)), ('shmem_free', lambda: sh.shmem_free(64))):\n"
        "    try:\n        f()\n    except RuntimeError as e:\n"
        "        assert str(e).startswith(name + ':') and 'not initialized' in str(e), e\n"
        "    else:\n        raise SystemExit('no error')\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=job_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
