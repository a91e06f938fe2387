# SPDX-License-Identifier: MIT
"""Element types and reduction operators of ``mori.ccl``.

``DataType`` keeps MORI's names and numbering (``Int8`` = 0 ... ``Float64`` = 11) and adds
``Bool``, ``Complex64`` and ``Complex128``. Torch and numpy dtypes map onto it.
"""
from __future__ import annotations

import enum
from typing import Any

import numpy as np

from mori import _C
from mori.core.errors import InvalidArgument


class DataType(enum.IntEnum):
    Int8 = 0
    Uint8 = 1
    Int16 = 2
    Uint16 = 3
    Int32 = 4
    Uint32 = 5
    Int64 = 6
    Uint64 = 7
    Float16 = 8
    BFloat16 = 9
    Float32 = 10
    Float64 = 11
    Bool = 12
    Complex64 = 13
    Complex128 = 14


# The C++ enum (collectives/include/mori/collectives/dtype.h), bound as an IntEnum.
ReduceOp = _C.collectives.ReduceOp
ReduceOp.__module__ = __name__  # pickled members name this module (mori._C.collectives is not importable)


def size_of(dtype: Any) -> int:
    """Bytes of one element of ``dtype`` (a DataType, torch dtype or numpy dtype)."""
    return _C.collectives.size_of(int(data_type(dtype)))


_NUMPY = {
    np.dtype(np.int8): DataType.Int8, np.dtype(np.uint8): DataType.Uint8,
    np.dtype(np.int16): DataType.Int16, np.dtype(np.uint16): DataType.Uint16,
    np.dtype(np.int32): DataType.Int32, np.dtype(np.uint32): DataType.Uint32,
    np.dtype(np.int64): DataType.Int64, np.dtype(np.uint64): DataType.Uint64,
    np.dtype(np.float16): DataType.Float16, np.dtype(np.float32): DataType.Float32,
    np.dtype(np.float64): DataType.Float64, np.dtype(np.bool_): DataType.Bool,
    np.dtype(np.complex64): DataType.Complex64, np.dtype(np.complex128): DataType.Complex128,
}

_TORCH_NAMES = {
    "int8": DataType.Int8, "uint8": DataType.Uint8, "int16": DataType.Int16, "uint16": DataType.Uint16,
    "int32": DataType.Int32, "uint32": DataType.Uint32, "int64": DataType.Int64, "uint64": DataType.Uint64,
    "float16": DataType.Float16, "bfloat16": DataType.BFloat16, "float32": DataType.Float32,
    "float64": DataType.Float64, "bool": DataType.Bool, "complex64": DataType.Complex64,
    "complex128": DataType.Complex128,
}


def data_type(dtype: Any) -> DataType:
    """The DataType of a DataType, torch dtype or numpy dtype; InvalidArgument for others."""
    if isinstance(dtype, DataType):
        return dtype
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        return DataType(dtype)
    mod = type(dtype).__module__
    if mod.startswith("torch"):
        name = str(dtype).removeprefix("torch.")
        if name in _TORCH_NAMES:
            return _TORCH_NAMES[name]
        raise InvalidArgument(f"mori.ccl does not support torch dtype {dtype} "
                              f"(supported: {', '.join('torch.' + n for n in _TORCH_NAMES)})")
    try:
        return _NUMPY[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise InvalidArgument(f"mori.ccl does not support dtype {dtype!r}") from None


def reduce_op(op: Any) -> ReduceOp:
    """ReduceOp from a ReduceOp, a name ('sum', 'max', 'min') or torch.distributed.ReduceOp."""
    if isinstance(op, ReduceOp):
        return op
    if isinstance(op, str):
        try:
            return ReduceOp[op.upper()]
        except KeyError:
            raise InvalidArgument(f"op must be 'sum', 'max' or 'min', got {op!r}") from None
    name = str(op).rsplit(".", 1)[-1].upper()  # torch.distributed.ReduceOp.SUM / RedOpType.SUM
    if name in ReduceOp.__members__:
        return ReduceOp[name]
    raise InvalidArgument(f"mori.ccl supports reduce ops sum, max and min; got {op!r}")
