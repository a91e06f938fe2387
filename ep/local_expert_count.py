# SPDX-License-Identifier: MIT
"""Tokens per local expert after a dispatch (what a grouped GEMM needs to size its groups).

``EpDispatchCombineOp.dispatch(..., call_local_expert_count=True)`` fills ``op.local_expert_count``;
:func:`launch_local_expert_count` is MORI's standalone form over raw addresses.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np
import torch

from mori import _C
from mori.core.errors import InvalidArgument
from mori.ep.tensors import view_at


def count_local_experts(
    indices: torch.Tensor, recv_num_token: torch.Tensor, rank: int, experts_per_rank: int
) -> torch.Tensor:
    """int32[experts_per_rank]: how many entries of the first ``recv_num_token`` rows of ``indices``
    (global expert ids, [rows, topk]) name each expert of ``rank``. No host sync: rows past the
    count are masked, so it also runs inside a CUDA graph."""
    rows = indices.shape[0]
    valid = torch.arange(rows, device=indices.device)[:, None] < recv_num_token.to(indices.device)
    local = indices.long() - rank * experts_per_rank
    keep = valid & (local >= 0) & (local < experts_per_rank)
    return torch.zeros(experts_per_rank, dtype=torch.int32, device=indices.device).scatter_add_(
        0, local.clamp(0, experts_per_rank - 1).flatten(), keep.flatten().to(torch.int32)
    )


def launch_local_expert_count(
    config: Any,
    indices_ptr: int,
    total_recv_token_num_ptr: int,
    local_expert_count_ptr: int,
    block_num: int = -1,
    warp_per_block: int = -1,
    stream: Any = 0,
) -> None:
    """MORI's standalone count: ``indices_ptr`` (int32 [total, topk] global expert ids),
    ``total_recv_token_num_ptr`` (int32 [1]: total) and ``local_expert_count_ptr`` (int32
    [num_experts_per_rank], overwritten) are addresses on one GPU, or all three in host memory.
    Needs no shmem runtime (as MORI's). The count is read first (a host sync on ``stream``), so only
    ``total`` rows are touched; ``block_num``/``warp_per_block`` are -1 (the config's) or > 0, as a
    launch shape (torch ops do the work)."""
    caller = "mori.ops.launch_local_expert_count"
    epr, k, rank = int(config.num_experts_per_rank), int(config.num_experts_per_token), int(config.rank)
    for name, v, field in (
        ("block_num", block_num, "block_num"),
        ("warp_per_block", warp_per_block, "warp_num_per_block"),
    ):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not (v == -1 or v > 0):
            raise InvalidArgument(f"{caller}: {name} must be -1 (the config's) or > 0, got {v!r}")
        # -1 takes the config's, which must then be a launch shape too (MORI refuses 0 there).
        if v == -1 and int(getattr(config, field)) <= 0:
            raise InvalidArgument(
                f"{caller}: {name} is -1 and the config's {field} is "
                f"{getattr(config, field)!r}: one of them must be > 0"
            )
    ptrs = {
        "indices_ptr": indices_ptr,
        "total_recv_token_num_ptr": total_recv_token_num_ptr,
        "local_expert_count_ptr": local_expert_count_ptr,
    }
    for name, p in ptrs.items():
        if not isinstance(p, (int, np.integer)) or isinstance(p, bool) or p <= 0:
            raise InvalidArgument(f"{caller}: {name} must be a non-null address (int), got {p!r}")
    # CUDA's pointer attributes, not the shmem runtime: this works before (or without) shmem init.
    cuda = bool(_C.shmem.built_with_cuda())
    devices = {name: int(_C.shmem.pointer_device(int(p))) if cuda else -1 for name, p in ptrs.items()}
    if len(set(devices.values())) != 1:
        raise InvalidArgument(
            f"{caller}: the three addresses must be memory of one GPU or all host memory, got "
            + ", ".join(f"{n} on {'cuda:%d' % d if d >= 0 else 'host'}" for n, d in devices.items())
        )
    device = devices["indices_ptr"]
    if device < 0:
        total = int(view_at(int(total_recv_token_num_ptr), (1,), torch.int32)[0])
        _check_total(caller, total, config)
        idx = view_at(int(indices_ptr), (total, k), torch.int32)
        counts = count_local_experts(idx, torch.tensor([total], dtype=torch.int32), rank, epr)
        view_at(int(local_expert_count_ptr), (epr,), torch.int32).copy_(counts)
        return
    s = int(stream.cuda_stream) if hasattr(stream, "cuda_stream") else int(stream or 0)
    with torch.cuda.device(device), torch.cuda.stream(torch.cuda.ExternalStream(s)) if s else contextlib.nullcontext():
        total_t = _device_view(device, int(total_recv_token_num_ptr), (1,))
        total = int(total_t.item())
        _check_total(caller, total, config)
        idx = _device_view(device, int(indices_ptr), (max(total * k, 1),))
        counts = count_local_experts(idx[: total * k].view(total, k), total_t, rank, epr)
        _device_view(device, int(local_expert_count_ptr), (epr,)).copy_(counts)


def _device_view(device: int, addr: int, shape: tuple) -> torch.Tensor:
    """An int32 tensor over GPU memory at ``addr`` (no copy, no ownership, no shmem runtime)."""
    from mori.shmem.tensor_utils import MoriShmemBuffer

    nbytes = 4 * math.prod(shape)
    t = torch.as_tensor(MoriShmemBuffer(addr, nbytes), device=torch.device("cuda", device))
    if t.data_ptr() != addr:
        raise RuntimeError("launch_local_expert_count: torch copied a device buffer instead of viewing it")
    return t.view(torch.int32).view(shape)


def _check_total(caller: str, total: int, config: Any) -> None:
    # A property on mori.ops' config, a method on mori.cpp's (MORI's native one).
    bound = config.max_num_tokens_to_recv
    bound = int(bound() if callable(bound) else bound)
    if total < 0:
        raise InvalidArgument(f"{caller}: total_recv_token_num is {total}, a negative row count")
    # A config that sizes no receive buffer (MORI's native default) bounds nothing, as in MORI.
    if bound > 0 and total > bound:
        raise InvalidArgument(f"{caller}: total_recv_token_num is {total}, outside 0..max_num_tokens_to_recv={bound}")
