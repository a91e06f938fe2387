# SPDX-License-Identifier: MIT
"""Torch tensors <-> the native EP handle: dtype codes and views of symmetric buffers.

The C++ core never sees torch: tensors cross as (address, shape, dtype code), and the
outputs come back as torch views of the op's symmetric buffers (no copy).
"""

from __future__ import annotations

import ctypes
import math
from typing import Optional, Sequence

import torch

from mori import _C

DataType = _C.core.DataType

# The core's element types by torch's name (mori._C.core.dtype_name): combine sums the float
# ones; dispatch moves any type of 1, 2 or 4 bytes, the ones the core does not name as the
# unsigned integer of their size.
_BY_TORCH_NAME = {_C.core.dtype_name(int(t)): t for t in DataType}
_BY_SIZE = {1: DataType.Uint8, 2: DataType.Uint16, 4: DataType.Uint32}


_CODES: dict = {}  # torch dtype -> code, filled on first use (dispatch and combine ask every call)


def dtype_code(dtype: torch.dtype, what: str) -> int:
    """The native code (a ``mori._C.core.DataType``) of a token dtype: 1, 2 or 4 bytes wide."""
    code = _CODES.get(dtype)
    if code is None:
        size = torch.empty(0, dtype=dtype).element_size()
        if size not in _BY_SIZE:
            raise ValueError(f"{what}: dtype {dtype} ({size} bytes per element) is not supported")
        code = _CODES[dtype] = int(_BY_TORCH_NAME.get(str(dtype).removeprefix("torch."), _BY_SIZE[size]))
    return code


def address(t: Optional[torch.Tensor]) -> int:
    """data_ptr of a tensor, 0 for None or an empty tensor."""
    if t is None or t.numel() == 0:
        return 0
    return t.data_ptr()


def view_at(addr: int, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """A CPU tensor over memory owned elsewhere (a symmetric buffer): no copy, no ownership."""
    numel = math.prod(shape)
    if numel == 0 or addr == 0:
        return torch.empty(tuple(shape), dtype=dtype)
    nbytes = numel * torch.empty(0, dtype=dtype).element_size()
    raw = (ctypes.c_uint8 * nbytes).from_address(addr)
    return torch.frombuffer(raw, dtype=torch.uint8, count=nbytes).view(dtype).view(tuple(shape))
