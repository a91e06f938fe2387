# SPDX-License-Identifier: MIT
"""One element-type enum (mori/core/dtype.h) bound once (mori._C.core.DataType) and re-exported:
mori.ccl keeps MORI's DataType names and codes and its ReduceOp, EP's dtype codes are the
core's, and the reduction engine reached from Python reduces what it did before."""

from __future__ import annotations

import enum

import numpy as np
import pytest

from mori import _C

# MORI's mori.ccl.DataType (0..11) and ours after it: the public contract.
CCL_NAMES = [
    "Int8",
    "Uint8",
    "Int16",
    "Uint16",
    "Int32",
    "Uint32",
    "Int64",
    "Uint64",
    "Float16",
    "BFloat16",
    "Float32",
    "Float64",
    "Bool",
    "Complex64",
    "Complex128",
]


def test_ccl_reexports_the_core_enum() -> None:
    import mori.ccl as ccl

    assert ccl.DataType is _C.core.DataType
    assert issubclass(ccl.DataType, enum.IntEnum)
    for code, name in enumerate(CCL_NAMES):
        assert int(getattr(ccl.DataType, name)) == code
        assert ccl.DataType(code).name == name
    assert {op.name: int(op) for op in ccl.ReduceOp} == {"SUM": 0, "MAX": 1, "MIN": 2}
    assert all(int(getattr(_C.core.ReduceOp, op.name)) == int(op) for op in ccl.ReduceOp)


def test_sizes_and_names_come_from_the_core() -> None:
    import mori.ccl as ccl

    sizes = {
        "Int8": 1,
        "Uint8": 1,
        "Int16": 2,
        "Uint16": 2,
        "Int32": 4,
        "Uint32": 4,
        "Int64": 8,
        "Uint64": 8,
        "Float16": 2,
        "BFloat16": 2,
        "Float32": 4,
        "Float64": 8,
        "Bool": 1,
        "Complex64": 8,
        "Complex128": 16,
        "Float8E4M3FN": 1,
        "Float8E4M3FNUZ": 1,
        "Float4E2M1x2": 1,
    }
    assert {t.name: _C.core.dtype_size(int(t)) for t in _C.core.DataType} == sizes
    assert [ccl.size_of(getattr(ccl.DataType, n)) for n in CCL_NAMES] == [sizes[n] for n in CCL_NAMES]
    assert _C.core.dtype_name(int(_C.core.DataType.BFloat16)) == "bfloat16"
    assert _C.core.dtype_name(int(_C.core.DataType.Float8E4M3FN)) == "float8_e4m3fn"
    with pytest.raises(ValueError, match="dtype_size: unknown dtype code 18"):
        _C.core.dtype_size(18)


def test_ccl_refuses_the_narrow_floats() -> None:
    import mori.ccl as ccl
    from mori.core.errors import InvalidArgument

    for t in (_C.core.DataType.Float8E4M3FN, int(_C.core.DataType.Float4E2M1x2)):
        with pytest.raises(InvalidArgument, match="mori.ccl does not support"):
            ccl.size_of(t)
    with pytest.raises(ValueError, match="mori.ccl does not support float8_e4m3fn"):
        _C.collectives.size_of(int(_C.core.DataType.Float8E4M3FN))
    with pytest.raises(ValueError, match="unknown reduce op code 3"):
        _C.collectives.check_reduce(int(ccl.DataType.Int32), 3)


def test_ep_codes_are_the_core_ones() -> None:
    torch = pytest.importorskip("torch")
    from mori.ep.tensors import dtype_code

    D = _C.core.DataType
    assert dtype_code(torch.float32, "t") == D.Float32
    assert dtype_code(torch.bfloat16, "t") == D.BFloat16
    assert dtype_code(torch.float16, "t") == D.Float16
    assert dtype_code(torch.float8_e4m3fn, "t") == D.Float8E4M3FN
    assert dtype_code(torch.float8_e4m3fnuz, "t") == D.Float8E4M3FNUZ
    assert dtype_code(torch.int16, "t") == D.Int16
    assert dtype_code(torch.float8_e5m2, "t") == D.Uint8  # no core name: moved as bytes of its size
    with pytest.raises(ValueError, match="8 bytes per element"):
        dtype_code(torch.float64, "t")
    for t in (torch.float32, torch.bfloat16, torch.int16, torch.float8_e4m3fn):
        assert _C.ep.dtype_size(dtype_code(t, "t")) == torch.empty(0, dtype=t).element_size()


def test_engine_reduces_fresh_random_arrays() -> None:
    """The core engine through mori.ccl's binding: integers wrap, floats combine in source order."""
    import mori.ccl as ccl

    rng = np.random.default_rng()
    n, k = 1037, 3  # not a multiple of the engine's block
    ints = [rng.integers(-(1 << 31), 1 << 31, size=n, dtype=np.int32) for _ in range(k)]
    out = np.empty(n, dtype=np.int32)
    _C.collectives.reduce_arrays(
        int(ccl.DataType.Int32), int(ccl.ReduceOp.SUM), out.ctypes.data, [a.ctypes.data for a in ints], n
    )
    want = ((ints[0].astype(np.int64) + ints[1] + ints[2] + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)
    assert np.array_equal(out, want)
    floats = [rng.standard_normal(n).astype(np.float64) for _ in range(k)]
    outf = np.empty(n)
    _C.collectives.reduce_arrays(
        int(ccl.DataType.Float64), int(ccl.ReduceOp.MAX), outf.ctypes.data, [a.ctypes.data for a in floats], n
    )
    assert np.array_equal(outf, np.maximum(np.maximum(floats[0], floats[1]), floats[2]))
