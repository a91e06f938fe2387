# SPDX-License-Identifier: MIT
"""The standard-MoE (DeepEP layout) round trip, checked MORI's way; shared by the CPU suite
(ep_suite.py) and the CUDA one (ep_gpu_op_suite.py)."""

from __future__ import annotations

import torch


def standard_round(op, xs: list, idxs: list, me: int, device: torch.device, tol: float = 2e-2) -> None:
    """dispatch_standard_moe + an identity expert + combine_standard_moe on every PE.

    ``xs``/``idxs``: every PE's tokens and routing (CPU tensors from one seed). Checks the
    packed layout exactly (per local expert: count, source positions, rows bit-exact, empty
    slots -1) and that combine returns each token times its number of valid experts."""
    cfg = op.config
    epr, world = cfg.num_experts_per_rank, cfg.world_size
    stride = op.max_num_tokens_to_send()
    x, idx = xs[me].to(device), idxs[me].to(device)
    packed_x, count, src_info, _ = op.dispatch_standard_moe(x, None, None, idx)
    slots = world * cfg.max_num_inp_token_per_rank
    assert packed_x.shape == (epr, slots, cfg.hidden_dim), f"PE {me}: packed_recv_x shape {tuple(packed_x.shape)}"
    assert count.dtype == torch.int32 and src_info.shape == (epr, slots), f"PE {me}: count/src_info layout"
    count, src_info, packed = count.cpu(), src_info.cpu(), packed_x.cpu()
    for e in range(epr):
        want = sorted(
            q * stride + t for q in range(world) for t, row in enumerate(idxs[q].tolist()) if me * epr + e in row
        )
        c = int(count[e])
        assert c == len(want), f"PE {me}: expert {e} got {c} rows, expected {len(want)}"
        got = src_info[e, :c].long()
        assert sorted(got.tolist()) == want, f"PE {me}: expert {e} source positions"
        assert bool((src_info[e, c:] == -1).all()), f"PE {me}: expert {e} empty slots are not -1"
        if c:
            ref = torch.stack([xs[int(p) // stride][int(p) % stride] for p in got])
            assert torch.equal(packed[e, :c].view(torch.uint8), ref.view(torch.uint8)), (
                f"PE {me}: expert {e} rows differ from their source tokens"
            )
    out, out_w = op.combine_standard_moe(packed_x, None, idx)
    assert out_w is None, f"PE {me}: combine_standard_moe returns (out, None)"
    n = x.shape[0]
    experts = world * epr
    mult = ((idxs[me] >= 0) & (idxs[me] < experts)).sum(1).float()
    ref = xs[me].float() * mult[:, None]
    got = out[:n].float().cpu()
    assert torch.allclose(got, ref, atol=tol, rtol=tol), (
        f"PE {me}: standard-MoE combine differs from token x valid experts (max err {(got - ref).abs().max()})"
    )
