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

# Codes of mori::ep::DType (ep/include/mori/ep/dtype.h).
_REDUCIBLE = {
    torch.float32: 0,
    torch.bfloat16: 1,
    torch.float16: 2,
    torch.float8_e4m3fn: 3,
    torch.float8_e4m3fnuz: 4,
}
if hasattr(torch, "float4_e2m1fn_x2"):  # two e2m1 values per byte; combine sums them in fp32
    _REDUCIBLE[torch.float4_e2m1fn_x2] = 8
_OPAQUE_BY_SIZE = {1: 5, 2: 6, 4: 7}


def dtype_code(dtype: torch.dtype, what: str) -> int:
    """The native code of a token dtype; other 1/2/4-byte types travel as opaque bytes
    (dispatch only)."""
    if dtype in _REDUCIBLE:
        return _REDUCIBLE[dtype]
    size = torch.empty(0, dtype=dtype).element_size()
    if size in _OPAQUE_BY_SIZE:
        return _OPAQUE_BY_SIZE[size]
    raise ValueError(f"{what}: dtype {dtype} ({size} bytes per element) is not supported")


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
