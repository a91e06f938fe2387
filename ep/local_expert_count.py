# SPDX-License-Identifier: MIT
"""Tokens per local expert after a dispatch (what a grouped GEMM needs to size its groups).

``EpDispatchCombineOp.dispatch(..., call_local_expert_count=True)`` fills ``op.local_expert_count``;
:func:`launch_local_expert_count` is MORI's standalone form over raw addresses.
"""
from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import torch

from mori import _C
from mori.core.errors import InvalidArgument
from mori.ep.tensors import view_at


def count_local_experts(indices: torch.Tensor, recv_num_token: torch.Tensor, rank: int,
                        experts_per_rank: int) -> torch.Tensor:
    """int32[experts_per_rank]: how many entries of the first ``recv_num_token`` rows of ``indices``
    (global expert ids, [rows, topk]) name each expert of ``rank``. No host sync: rows past the
    count are masked, so it also runs inside a CUDA graph."""
    rows = indices.shape[0]
    valid = torch.arange(rows, device=indices.device)[:, None] < recv_num_token.to(indices.device)
    local = indices.long() - rank * experts_per_rank
    keep = valid & (local >= 0) & (local < experts_per_rank)
    return torch.zeros(experts_per_rank, dtype=torch.int32, device=indices.device).scatter_add_(
        0, local.clamp(0, experts_per_rank - 1).flatten(), keep.flatten().to(torch.int32))


def launch_local_expert_count(config: Any, indices_ptr: int, total_recv_token_num_ptr: int,
                              local_expert_count_ptr: int, block_num: int = -1, warp_per_block: int = -1,
                              stream: Any = 0) -> None:
    """MORI's standalone count: ``indices_ptr`` (int32 [total, topk] global expert ids),
    ``total_recv_token_num_ptr`` (int32 [1]: total) and ``local_expert_count_ptr`` (int32
    [num_experts_per_rank], overwritten) are addresses on this PE's GPU, or all three in host
    memory. The count is read first (a host sync on ``stream``), so only ``total`` rows are touched;
    ``block_num``/``warp_per_block`` are accepted for MORI's signature (torch ops do the work)."""
    caller = "mori.ops.launch_local_expert_count"
    epr, k, rank = int(config.num_experts_per_rank), int(config.num_experts_per_token), int(config.rank)
    ptrs = {"indices_ptr": indices_ptr, "total_recv_token_num_ptr": total_recv_token_num_ptr,
            "local_expert_count_ptr": local_expert_count_ptr}
    for name, p in ptrs.items():
        if not isinstance(p, (int, np.integer)) or isinstance(p, bool) or p <= 0:
            raise InvalidArgument(f"{caller}: {name} must be a non-null address (int), got {p!r}")
    on_gpu = bool(_C.shmem.built_with_cuda() and _C.shmem.gpu_bound())
    devices = {name: int(_C.shmem.pointer_device(int(p))) if on_gpu else -1 for name, p in ptrs.items()}
    if len(set(d >= 0 for d in devices.values())) != 1:
        raise InvalidArgument(f"{caller}: the three addresses must all be GPU memory or all host memory, got "
                              + ", ".join(f"{n} on {'cuda:%d' % d if d >= 0 else 'host'}" for n, d in devices.items()))
    if devices["indices_ptr"] < 0:
        total = int(view_at(int(total_recv_token_num_ptr), (1,), torch.int32)[0])
        _check_total(caller, total, config)
        idx = view_at(int(indices_ptr), (total, k), torch.int32)
        counts = count_local_experts(idx, torch.tensor([total], dtype=torch.int32), rank, epr)
        view_at(int(local_expert_count_ptr), (epr,), torch.int32).copy_(counts)
        return
    from mori.shmem.tensor_utils import wrap_device_pointer

    s = int(stream.cuda_stream) if hasattr(stream, "cuda_stream") else int(stream or 0)
    with torch.cuda.stream(torch.cuda.ExternalStream(s)) if s else contextlib.nullcontext():
        total_t = wrap_device_pointer(int(total_recv_token_num_ptr), 4, torch.int32, (1,))
        total = int(total_t.item())
        _check_total(caller, total, config)
        idx = wrap_device_pointer(int(indices_ptr), max(total * k * 4, 4), torch.int32, (max(total * k, 1),))
        counts = count_local_experts(idx[: total * k].view(total, k), total_t, rank, epr)
        wrap_device_pointer(int(local_expert_count_ptr), epr * 4, torch.int32, (epr,)).copy_(counts)


def _check_total(caller: str, total: int, config: Any) -> None:
    if not 0 <= total <= int(config.max_num_tokens_to_recv):
        raise InvalidArgument(f"{caller}: total_recv_token_num is {total}, outside 0..max_num_tokens_to_recv="
                              f"{config.max_num_tokens_to_recv}")
