# SPDX-License-Identifier: MIT
"""Element types and reduction operators of ``mori.ccl``.

``DataType`` is the core's element-type enum (``mori._C.core.DataType``, from
``mori/core/dtype.h``): MORI's names and numbering (``Int8`` = 0 ... ``Float64`` = 11), then
``Bool``, ``Complex64`` and ``Complex128``, which mori.ccl moves and reduces; the narrow floats
after them are EP's. ``ReduceOp`` is the core's ``SUM``/``MAX``/``MIN`` (codes 0..2), the ops
mori.ccl implements. Torch and numpy dtypes map onto ``DataType``.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from mori import _C
from mori.core.errors import InvalidArgument

DataType = _C.core.DataType

# The core's ReduceOp restricted to the ops mori.ccl implements (same names and codes).
ReduceOp = enum.IntEnum(
    "ReduceOp", {op.name: op.value for op in _C.core.ReduceOp if op.name in ("SUM", "MAX", "MIN")}, module=__name__
)
ReduceOp.__doc__ = "Reduction ops of mori.ccl: the core's SUM, MAX and MIN (mori._C.core.ReduceOp)."

# The element types mori.ccl takes: Int8 ... Complex128.
_CCL_TYPES = tuple(t for t in DataType if t <= DataType.Complex128)


def size_of(dtype: Any) -> int:
    """Bytes of one element of ``dtype`` (a DataType, torch dtype or numpy dtype)."""
    return _C.collectives.size_of(int(data_type(dtype)))


_NUMPY = {
    np.dtype(np.int8): DataType.Int8,
    np.dtype(np.uint8): DataType.Uint8,
    np.dtype(np.int16): DataType.Int16,
    np.dtype(np.uint16): DataType.Uint16,
    np.dtype(np.int32): DataType.Int32,
    np.dtype(np.uint32): DataType.Uint32,
    np.dtype(np.int64): DataType.Int64,
    np.dtype(np.uint64): DataType.Uint64,
    np.dtype(np.float16): DataType.Float16,
    np.dtype(np.float32): DataType.Float32,
    np.dtype(np.float64): DataType.Float64,
    np.dtype(np.bool_): DataType.Bool,
    np.dtype(np.complex64): DataType.Complex64,
    np.dtype(np.complex128): DataType.Complex128,
}

# torch's dtype names are the core's names (mori._C.core.dtype_name).
_TORCH_NAMES = {_C.core.dtype_name(int(t)): t for t in _CCL_TYPES}


def data_type(dtype: Any) -> DataType:
    """The DataType of a DataType, torch dtype or numpy dtype; InvalidArgument for others."""
    if isinstance(dtype, DataType):
        if dtype not in _CCL_TYPES:
            raise InvalidArgument(f"mori.ccl does not support {dtype!r}")
        return dtype
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        return data_type(DataType(dtype))
    mod = type(dtype).__module__
    if mod.startswith("torch"):
        name = str(dtype).removeprefix("torch.")
        if name in _TORCH_NAMES:
            return _TORCH_NAMES[name]
        raise InvalidArgument(
            f"mori.ccl does not support torch dtype {dtype} "
            f"(supported: {', '.join('torch.' + n for n in _TORCH_NAMES)})"
        )
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
