# SPDX-License-Identifier: MIT
"""Standard-MoE (DeepEP-style) layout: received rows regrouped per local expert, and back.

Rows are placed in (dispatch row, k) order, so the layout is deterministic.
"""

from __future__ import annotations

import torch


def pack_by_expert(x: torch.Tensor, topk_idx: torch.Tensor, total: int, src_pos: torch.Tensor, cfg):
    """``x``/``topk_idx``: dispatch outputs; ``src_pos``: the flat source position of each of the
    ``total`` valid rows. Returns (packed_x, count, src_info, layout_range)."""
    epr = cfg.num_experts_per_rank
    slots = cfg.world_size * cfg.max_num_inp_token_per_rank
    hidden = x.shape[1]
    if topk_idx.shape[0] < total or x.shape[0] < total:
        raise ValueError(
            f"convert_dispatch_output: need at least {total} rows, got x {tuple(x.shape)} and "
            f"topk_idx {tuple(topk_idx.shape)}"
        )
    local = topk_idx[:total].long() - cfg.rank * epr
    valid = (local >= 0) & (local < epr)
    rows, ks = valid.nonzero(as_tuple=True)  # row-major: (row, k) order
    experts = local[rows, ks]
    order = torch.argsort(experts, stable=True)
    rows, experts = rows[order], experts[order]
    count = torch.bincount(experts, minlength=epr)
    start = torch.cumsum(count, 0) - count
    pos = torch.arange(rows.numel(), device=x.device) - start[experts]
    packed_x = torch.zeros((epr, slots, hidden), dtype=x.dtype, device=x.device)
    packed_x[experts, pos] = x[rows]
    src_info = torch.full((epr, slots), -1, dtype=torch.int32, device=x.device)
    src_info[experts, pos] = src_pos[rows].to(torch.int32)
    layout_range = torch.empty(0, dtype=torch.int64, device=x.device)
    return packed_x, count.to(torch.int32), src_info, layout_range


def unpack_to_rows(packed_x: torch.Tensor, src_info: torch.Tensor, src_pos: torch.Tensor, out: torch.Tensor) -> None:
    """Sums every expert slot back into the dispatch row it came from (fp32), into ``out``
    (``[total, hidden]``). A slot's row is found by its flat source position."""
    total = src_pos.numel()
    if packed_x.dim() != 3 or src_info.shape != packed_x.shape[:2]:
        raise ValueError(
            f"convert_combine_input: packed_recv_x {tuple(packed_x.shape)} and packed_recv_src_info "
            f"{tuple(src_info.shape)} do not match"
        )
    experts, pos = (src_info >= 0).nonzero(as_tuple=True)
    flat = src_info[experts, pos].long()
    sorted_src, perm = torch.sort(src_pos.long())
    where = torch.searchsorted(sorted_src, flat)
    if flat.numel() and (where.max() >= total or not torch.equal(sorted_src[where.clamp(max=max(total - 1, 0))], flat)):
        raise ValueError("convert_combine_input: packed_recv_src_info names tokens the last dispatch did not deliver")
    row = perm[where]
    acc = torch.zeros((total, packed_x.shape[2]), dtype=torch.float32, device=packed_x.device)
    acc.index_add_(0, row, packed_x[experts, pos].float())
    out.copy_(acc.to(out.dtype))
