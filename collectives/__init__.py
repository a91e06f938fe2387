# SPDX-License-Identifier: MIT
"""mori.collectives (alias ``mori.ccl``): collectives over the shmem runtime.

Torch/numpy-facing: :func:`all_gather_into_tensor` (and torch 2.13's name
:func:`all_gather_single`), :func:`all_gather`, :func:`broadcast`, :func:`all_reduce`,
:func:`reduce_scatter_tensor` / :func:`reduce_scatter_single`, :func:`all_to_all_single`.
CPU memory moves through the shared host heap; CUDA allgathers use the copy engines.
MORI's names ``DataType`` and ``size_of`` are kept, and its class API :class:`AllGatherIntoTensor`
(what DeepSpeed's MORI hook calls) and :class:`AllgatherSdma`. See docs/collectives.md.
"""

from mori.collectives.api import (
    Work,
    all_gather,
    all_gather_into_tensor,
    all_gather_single,
    all_reduce,
    all_to_all_single,
    broadcast,
    check_group,
    reduce_scatter_single,
    reduce_scatter_tensor,
    release,
    stats,
)
from mori.collectives.allgather_handles import AllGatherIntoTensor, AllgatherSdma
from mori.collectives.dtypes import DataType, ReduceOp, data_type, reduce_op, size_of

__all__ = [
    "AllGatherIntoTensor",
    "AllgatherSdma",
    "DataType",
    "ReduceOp",
    "Work",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "all_reduce",
    "all_to_all_single",
    "broadcast",
    "check_group",
    "data_type",
    "reduce_op",
    "reduce_scatter_single",
    "reduce_scatter_tensor",
    "release",
    "size_of",
    "stats",
]
