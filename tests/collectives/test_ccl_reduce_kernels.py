# SPDX-License-Identifier: MIT
"""The local reduction kernel against numpy/torch references (no PEs needed)."""

from __future__ import annotations

import numpy as np
import pytest

from mori import _C
from mori.ccl import DataType, ReduceOp, size_of
from mori.core.errors import InvalidArgument

torch = pytest.importorskip("torch")


def _reduce(dtype: DataType, op: ReduceOp, arrays: list) -> np.ndarray:
    out = np.empty_like(arrays[0])
    _C.collectives.reduce_arrays(int(dtype), int(op), out.ctypes.data, [a.ctypes.data for a in arrays], out.size)
    return out


@pytest.mark.parametrize("op", list(ReduceOp))
def test_float16_rounds_once(op):
    rng = np.random.default_rng(7)
    xs = [(rng.standard_normal(4099) * 100).astype(np.float16) for _ in range(5)]
    got = _reduce(DataType.Float16, op, xs)
    wide = np.stack([x.astype(np.float32) for x in xs])
    want = {ReduceOp.SUM: wide.sum(0), ReduceOp.MAX: wide.max(0), ReduceOp.MIN: wide.min(0)}[op].astype(np.float16)
    # float32 accumulation + one rounding == numpy's float32 sum rounded to half (same order)
    if op == ReduceOp.SUM:
        acc = xs[0].astype(np.float32)
        for x in xs[1:]:
            acc = acc + x.astype(np.float32)
        want = acc.astype(np.float16)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


def test_float16_specials():
    vals = np.array([0.0, -0.0, 6e-8, 1e-5, 65504, np.inf, -np.inf, 1.0], np.float16)
    zero = np.zeros_like(vals)
    got = _reduce(DataType.Float16, ReduceOp.SUM, [vals, zero])
    assert np.array_equal(got.view(np.uint16)[2:], (vals + zero)[2:].view(np.uint16))
    big = np.array([65504, 60000], np.float16)
    assert np.isinf(_reduce(DataType.Float16, ReduceOp.SUM, [big, big])).all()


def test_bfloat16_matches_torch():
    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(3001, generator=g) * 50 for _ in range(4)]
    bf = [x.to(torch.bfloat16) for x in xs]
    arrays = [b.view(torch.int16).numpy().copy() for b in bf]
    got = torch.from_numpy(_reduce(DataType.BFloat16, ReduceOp.SUM, arrays)).view(torch.bfloat16)
    acc = bf[0].float()
    for b in bf[1:]:
        acc = acc + b.float()
    assert torch.equal(got, acc.to(torch.bfloat16))


@pytest.mark.parametrize(
    "np_dtype,dt",
    [
        (np.int8, DataType.Int8),
        (np.uint16, DataType.Uint16),
        (np.int32, DataType.Int32),
        (np.int64, DataType.Int64),
        (np.uint64, DataType.Uint64),
    ],
)
def test_integers_wrap(np_dtype, dt):
    info = np.iinfo(np_dtype)
    rng = np.random.default_rng(11)
    xs = [rng.integers(info.min, info.max, 999, dtype=np_dtype, endpoint=True) for _ in range(3)]
    with np.errstate(over="ignore"):
        assert np.array_equal(_reduce(dt, ReduceOp.SUM, xs), xs[0] + xs[1] + xs[2])
    assert np.array_equal(_reduce(dt, ReduceOp.MAX, xs), np.maximum(np.maximum(xs[0], xs[1]), xs[2]))
    assert np.array_equal(_reduce(dt, ReduceOp.MIN, xs), np.minimum(np.minimum(xs[0], xs[1]), xs[2]))


def test_bool_and_complex():
    a, b = np.array([0, 1, 0, 1], np.bool_), np.array([0, 0, 1, 1], np.bool_)
    assert _reduce(DataType.Bool, ReduceOp.SUM, [a, b]).tolist() == [False, True, True, True]
    assert _reduce(DataType.Bool, ReduceOp.MIN, [a, b]).tolist() == [False, False, False, True]
    c = np.array([1 + 2j, -3.5j], np.complex128)
    assert np.array_equal(_reduce(DataType.Complex128, ReduceOp.SUM, [c, c, c]), 3 * c)
    with pytest.raises(InvalidArgument, match="complex"):
        _reduce(DataType.Complex64, ReduceOp.MAX, [c.astype(np.complex64)])


def test_sizes_and_names():
    assert [size_of(d) for d in (DataType.Int8, DataType.BFloat16, DataType.Float32, DataType.Complex128)] == [
        1,
        2,
        4,
        16,
    ]
    assert size_of(torch.float64) == 8 and size_of(np.uint16) == 2
    with pytest.raises(InvalidArgument, match="float8"):
        size_of(torch.float8_e4m3fn)
