# SPDX-License-Identifier: MIT
"""Argument fuzzing of the Python shmem API on one PE (hypothesis, bounded examples).

Every call either does exactly what it should (checked against numpy on the same inputs) or
raises the documented exception: InvalidArgument (a ValueError) for a bad argument, MemoryError
when the heap cannot hold the request. Which of the three happens is predicted independently
here, and guard arrays around every target (symmetric and local) must keep their random bytes.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import mori.shmem as sh  # noqa: E402

# Seconds for the whole file: few examples, no example database written into the tree.
FUZZ = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# Integers where bugs live: small ones, and ones near the edges of int64/size_t.
EDGES = [
    0,
    1,
    2,
    7,
    8,
    63,
    64,
    65,
    2**31 - 1,
    2**31,
    2**32,
    2**61 + 1,
    2**62,
    2**63 - 1,
    2**63,
    2**64 - 100,
    2**64 - 1,
    2**64,
    2**65,
]
edgy = st.one_of(st.integers(-3, 40), st.sampled_from(EDGES + [-e for e in EDGES]), st.integers(-(2**70), 2**70))
small = st.integers(-3, 40)
DTYPES = [np.int8, np.uint16, np.int32, np.int64, np.uint64, np.float32, np.float64]
dtypes = st.sampled_from(DTYPES)


@pytest.fixture(scope="module")
def pe():
    sh.init()
    yield
    sh.finalize()


def _random(rng: np.random.Generator, n: int, dtype) -> np.ndarray:
    return (
        rng.integers(1, 100, n).astype(dtype)
        if np.dtype(dtype).kind != "f"
        else (rng.standard_normal(n) * 100).astype(dtype)
    )


class Guards:
    """Symmetric guard arrays allocated around a target (first fit puts them beside it),
    filled with random bytes that no call may change."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.arrays = [sh.array(rng.integers(0, 256, 256, dtype=np.uint8)) for _ in range(2)]
        self.copies = [a.copy() for a in self.arrays]

    def check(self) -> None:
        for a, c in zip(self.arrays, self.copies):
            assert np.array_equal(a, c), "a guard array beside the target changed"

    def free(self) -> None:
        for a in self.arrays:
            sh.free(a)


def _local(rng: np.random.Generator, n: int, dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(view, whole, copy of whole): a local array with 16 random guard elements on each side."""
    whole = _random(rng, n + 32, dtype)
    return whole[16 : 16 + n], whole, whole.copy()


def _local_guards_ok(whole: np.ndarray, keep: np.ndarray, n: int) -> bool:
    return np.array_equal(whole[:16], keep[:16]) and np.array_equal(whole[16 + n :], keep[16 + n :])


@FUZZ
@given(size=edgy, align_exp=st.integers(0, 40), odd=st.booleans())
def test_fuzz_malloc(pe, size, align_exp, odd):
    alignment = (1 << align_exp) + (3 if odd else 0)
    free0 = sh.heap_free()
    allowed = set()  # the exceptions this call may raise; none: it must succeed
    if alignment & (alignment - 1) or size < 0 or (alignment > 1 << 30 and size > 0):  # 1 << 30: kMaxAlignment
        allowed.add(ValueError)
    if size > 0 and size + alignment > free0:  # may not fit once the start is aligned
        allowed.add(MemoryError)
    try:
        addr = sh.shmem_malloc_align(alignment, size)
    except (ValueError, MemoryError) as exc:
        assert any(isinstance(exc, e) for e in allowed), f"unexpected {exc!r}"
        assert sh.heap_free() == free0
        return
    assert not allowed, f"expected one of {allowed}, got address {addr:#x}"
    if size == 0:
        assert addr == 0
        return
    assert addr % alignment == 0
    assert free0 - sh.heap_free() >= size
    buf = (ctypes.c_char * size).from_address(addr)
    ctypes.memset(buf, 0x5A, size)  # every byte is ours (a sanitizer build would notice otherwise)
    sh.shmem_free(addr)
    assert sh.heap_free() == free0


shapes = st.one_of(edgy, st.lists(st.one_of(st.integers(-2, 6), st.sampled_from([2**16, 2**32, 2**62])), max_size=4))


@FUZZ
@given(shape=shapes, dtype=dtypes, kind=st.sampled_from(["zeros", "empty", "full", "tensor"]))
def test_fuzz_allocate(pe, shape, dtype, kind):
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    itemsize = np.dtype(dtype).itemsize
    free0 = sh.heap_free()
    nbytes = int(np.prod(dims, dtype=object)) * itemsize if dims else itemsize
    if any(d < 0 for d in dims):
        expect = ValueError
    elif 0 in dims and int(np.prod([d for d in dims if d], dtype=object)) * itemsize >= 2**63:
        expect = ValueError  # numpy cannot index such a shape, empty or not
    elif max(nbytes, 1) > free0:
        expect = MemoryError
    else:
        expect = None
    fill = 42
    try:
        if kind == "tensor":
            import torch

            tdtype = torch.from_numpy(np.zeros(1, dtype)).dtype
            a = sh.tensor(dims, tdtype)
        elif kind == "full":
            a = sh.full(dims, fill, dtype)
        else:
            a = getattr(sh, kind)(dims, dtype)
    except (ValueError, MemoryError) as exc:
        assert expect is not None and isinstance(exc, expect), f"unexpected {exc!r}"
        assert sh.heap_free() == free0, "heap bytes leaked by a failed allocation"
        return
    assert expect is None, f"expected {expect.__name__}, got an array of shape {dims}"
    assert tuple(a.shape) == dims
    if kind == "tensor":
        assert a.element_size() == itemsize and not a.numpy().any()
    else:
        assert a.dtype == np.dtype(dtype)
        if kind == "zeros":
            assert not a.any()
        if kind == "full":
            assert (a == fill).all()
    sh.free(a)
    assert sh.heap_free() == free0


@FUZZ
@given(
    nd=st.integers(0, 40),
    ns=st.integers(0, 48),
    dd=dtypes,
    ds=dtypes,
    pe_=small,
    nbi=st.booleans(),
    direction=st.sampled_from(["put", "get"]),
    seed=st.integers(0, 2**32),
)
def test_fuzz_put_get(pe, nd, ns, dd, ds, pe_, nbi, direction, seed):
    rng = np.random.default_rng(seed)
    guards = Guards(rng)
    sym = sh.array(_random(rng, nd, dd))
    before = sym.copy()
    local, whole, keep = _local(rng, ns, ds)
    if pe_ != 0 or dd != ds:
        expect = ValueError
    elif (direction == "put" and ns > nd) or (direction == "get" and ns > nd):
        expect = ValueError
    else:
        expect = None
    try:
        if direction == "put":
            sh.put(sym, local, pe_, nbi=nbi)
        else:
            sh.get(local, sym, pe_, nbi=nbi)
        sh.quiet()
        assert expect is None, f"expected {expect.__name__}"
        if direction == "put":
            assert np.array_equal(sym[:ns], local) and np.array_equal(sym[ns:], before[ns:])
        else:
            assert np.array_equal(local, before[:ns]) and np.array_equal(sym, before)
    except ValueError as exc:
        assert expect is ValueError, f"unexpected {exc!r}"
        assert np.array_equal(sym, before) and np.array_equal(whole, keep)
    assert _local_guards_ok(whole, keep, ns)
    guards.check()
    sh.free(sym)
    guards.free()


@FUZZ
@given(
    nd=st.integers(1, 40),
    ns=st.integers(1, 40),
    dst_stride=edgy,
    src_stride=edgy,
    nelems=edgy,
    same_dtype=st.booleans(),
    direction=st.sampled_from(["iput", "iget"]),
    seed=st.integers(0, 2**32),
)
def test_fuzz_strided(pe, nd, ns, dst_stride, src_stride, nelems, same_dtype, direction, seed):
    rng = np.random.default_rng(seed)
    guards = Guards(rng)
    # iput: dest symmetric, source local; iget: dest local, source symmetric.
    dst_len, src_len = (nd, ns)
    sym_len, local_len = (dst_len, src_len) if direction == "iput" else (src_len, dst_len)
    sym = sh.array(_random(rng, sym_len, np.int64))
    sym_before = sym.copy()
    local, whole, keep = _local(rng, local_len, np.int64 if same_dtype else np.float64)

    def fits(stride: int, length: int) -> bool:
        return nelems <= length and (nelems <= 1 or 0 <= (nelems - 1) * stride < length)

    ok = same_dtype and nelems >= 0 and fits(dst_stride, dst_len) and fits(src_stride, src_len)
    dest, source = (sym, local) if direction == "iput" else (local, sym)
    want = dest.copy()
    if ok and nelems > 0:
        idx = np.arange(nelems)
        want[idx * dst_stride if nelems > 1 else 0] = source[idx * src_stride if nelems > 1 else 0]
    try:
        getattr(sh, direction)(dest, source, dst_stride, src_stride, nelems, 0)
        sh.quiet()
        assert ok, "an out-of-bounds strided call was accepted"
        assert np.array_equal(dest, want)
    except ValueError as exc:
        assert not ok, f"a valid strided call was refused: {exc}"
        assert np.array_equal(sym, sym_before) and np.array_equal(whole, keep)
    assert _local_guards_ok(whole, keep, local_len)
    if direction == "iget":
        assert np.array_equal(sym, sym_before), "iget changed its source"
    else:
        assert np.array_equal(whole, keep), "iput changed its source"
    guards.check()
    sh.free(sym)
    guards.free()


OPS = [
    "p",
    "g",
    "atomic_add",
    "atomic_fetch_add",
    "atomic_set",
    "atomic_swap",
    "atomic_compare_swap",
    "atomic_inc",
    "atomic_fetch",
    "atomic_xor",
    "wait_until",
    "test",
]


@FUZZ
@given(
    n=st.integers(0, 12),
    index=edgy,
    op=st.sampled_from(OPS),
    pe_=small,
    dtype=st.sampled_from([np.int32, np.int64, np.uint32, np.uint64]),
    two_d=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_fuzz_element_ops(pe, n, index, op, pe_, dtype, two_d, seed):
    rng = np.random.default_rng(seed)
    guards = Guards(rng)
    base = sh.array(_random(rng, 2 * n, dtype).reshape(2, n) if two_d else _random(rng, n, dtype))
    target = base[:, 0] if two_d and n else base  # a strided view, or the array itself
    size = target.size
    before = base.copy()
    uses_pe = op not in ("wait_until", "test")
    ok = 0 <= index < size and (pe_ == 0 or not uses_pe)
    value = int(rng.integers(1, 100))
    flat = target.reshape(-1) if not two_d else target
    expect_base = before.copy()
    try:
        if op == "p":
            sh.p(target, value, pe_, index=index)
            assert ok
            (expect_base[:, 0] if two_d and n else expect_base.reshape(-1))[index] = value
        elif op == "g":
            got = sh.g(target, pe_, index=index)
            assert ok and got == flat[index]
        elif op in ("wait_until", "test"):
            cmp_value = int(flat[index]) if 0 <= index < size else 0
            got = getattr(sh, op)(target, "==", cmp_value, index=index)
            assert ok and (got == cmp_value if op == "wait_until" else got is True)
        else:
            old = int(flat[index]) if 0 <= index < size else 0
            fn = getattr(sh, op)
            if op in ("atomic_inc", "atomic_fetch"):
                got = fn(target, pe_, index=index)
            elif op == "atomic_compare_swap":
                got = fn(target, old, value, pe_, index=index)
            else:
                got = fn(target, value, pe_, index=index)
            assert ok
            new = {
                "atomic_add": old + value,
                "atomic_fetch_add": old + value,
                "atomic_set": value,
                "atomic_swap": value,
                "atomic_compare_swap": value,
                "atomic_inc": old + 1,
                "atomic_fetch": old,
                "atomic_xor": old ^ value,
            }[op]
            (expect_base[:, 0] if two_d and n else expect_base.reshape(-1))[index] = new
            if op in ("atomic_fetch_add", "atomic_swap", "atomic_compare_swap", "atomic_fetch"):
                assert int(got) == old
        assert np.array_equal(base, expect_base)
    except ValueError as exc:
        assert not ok, f"a valid {op} was refused: {exc}"
        assert np.array_equal(base, before)
    guards.check()
    sh.free(base)
    guards.free()


@FUZZ
@given(
    sig_len=st.integers(0, 3),
    sig_dtype=st.sampled_from([np.uint64, np.int64, np.uint32]),
    value=edgy,
    sig_op=st.integers(-1, 3),
    pe_=small,
    n=st.integers(0, 16),
    seed=st.integers(0, 2**32),
)
def test_fuzz_put_signal(pe, sig_len, sig_dtype, value, sig_op, pe_, n, seed):
    rng = np.random.default_rng(seed)
    guards = Guards(rng)
    sig = sh.array(rng.integers(0, 2**20, sig_len).astype(sig_dtype))
    sig_before = sig.copy()
    dest = sh.zeros(16, np.int64)
    src = rng.integers(-(2**40), 2**40, n)
    ok = sig_dtype is np.uint64 and sig_len >= 1 and 0 <= value < 2**64 and sig_op in (0, 1) and pe_ == 0
    try:
        sh.put_signal(dest, src, sig, value, sig_op, pe_)
        sh.quiet()
        assert ok, "a bad put_signal was accepted"
        want = value if sig_op == sh.SIGNAL_SET else (int(sig_before[0]) + value) % 2**64
        assert int(sig[0]) == want and np.array_equal(dest[:n], src) and not dest[n:].any()
        assert sh.signal_fetch(sig) == want
        assert np.array_equal(sig[1:], sig_before[1:])
    except ValueError as exc:
        assert not ok, f"a valid put_signal was refused: {exc}"
        assert np.array_equal(sig, sig_before) and not dest.any()
    guards.check()
    for a in (dest, sig):
        sh.free(a)
    guards.free()
