# SPDX-License-Identifier: MIT
"""EP kernel types and combine quantization types, with MORI's names and values."""

from __future__ import annotations

import enum

from mori import _C

# Both enums are the C++ ones (ep/include/mori/ep/config.h), bound as IntEnums by ep/src/bind_ep.cc.
#
# EpDispatchCombineKernelType: which dispatch/combine protocol an op runs (values are MORI's).
#
# * ``IntraNode`` (0): every PE of the job on one host / NVLink domain; direct stores into
#   peers' mapped buffers.
# * ``InterNode`` (1): baseline multi-node protocol over the runtime's RMA calls (one put per
#   token and field); works over any transport.
# * ``InterNodeV1`` (2): node-level dedup: one copy per destination node, forwarded inside it.
# * ``InterNodeV1LL`` (3): low-latency multi-node: packed RMA puts straight to each PE.
# * ``AsyncLL`` (4): packed RMA split into send/recv halves (``dispatch_send``/``dispatch_recv``,
#   ``combine_send``/``combine_recv``) so communication overlaps compute.
# * ``IntraNodeLL`` (5): intra-node with fewer, larger blocks for small batches.
EpDispatchCombineKernelType = _C.ep.EpDispatchCombineKernelType
# EpDispatchCombineQuantType: how combine carries expert outputs on the wire (MORI's ``quant_type``).
EpDispatchCombineQuantType = _C.ep.EpDispatchCombineQuantType


def _member_name(self: enum.IntEnum) -> str:
    return self.name


for _cls in (EpDispatchCombineKernelType, EpDispatchCombineQuantType):
    _cls.__str__ = _member_name  # MORI prints the member's name
    _cls.__module__ = __name__  # pickled members name this module (mori._C.ep is not importable by name)


QUANT_TYPES = {
    "none": EpDispatchCombineQuantType.None_,
    "fp8_direct_cast": EpDispatchCombineQuantType.Fp8DirectCast,
    "fp8_blockwise": EpDispatchCombineQuantType.Fp8BlockwiseQuant,
    "fp4_blockwise": EpDispatchCombineQuantType.Fp4BlockwiseQuant,
}
BLOCKWISE = (EpDispatchCombineQuantType.Fp8BlockwiseQuant, EpDispatchCombineQuantType.Fp4BlockwiseQuant)
# Kernel types whose combine MORI builds for each blockwise quant type (it refuses others at combine).
BLOCKWISE_KERNELS = {
    EpDispatchCombineQuantType.Fp8BlockwiseQuant: ("IntraNode", "IntraNodeLL", "AsyncLL"),
    EpDispatchCombineQuantType.Fp4BlockwiseQuant: ("IntraNode", "IntraNodeLL"),
}


def normalize_quant_type(value) -> EpDispatchCombineQuantType:
    """Accepts ``"none"``, ``"fp8_direct_cast"``, ``"fp8_blockwise"``, ``"fp4_blockwise"`` (any case)
    or an ``EpDispatchCombineQuantType``."""
    if isinstance(value, EpDispatchCombineQuantType):
        return value
    if isinstance(value, str):
        key = value.strip().lower()
        if key in QUANT_TYPES:
            return QUANT_TYPES[key]
    raise ValueError(f"invalid quant_type {value!r}: expected one of {sorted(QUANT_TYPES)}")


def blockwise_scale_dim() -> int:
    """Scales per blockwise combine row: ``MORI_FP8_COMBINE_SCALE_DIM`` (MORI's default 56), as the
    native layer reads it (``ValueError`` unless > 0). Rows are cut into blocks of
    ``ceil(hidden / scale_dim)`` values."""
    from mori import _C

    return int(_C.ep.blockwise_scale_dim())
