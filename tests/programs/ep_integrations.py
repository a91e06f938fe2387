# SPDX-License-Identifier: MIT
"""The call sequences of vLLM's and SGLang's MORI all-to-all managers, replayed on CPU tensors
with a real MoE layer in between, checked against a plain-torch MoE reference.

    mori run -n 4 python ep_integrations.py

* vLLM (MoriPrepareAndFinalize): standard mode ``dispatch(a1, w, scale, ids, block_num,
  warp_per_block)`` (their 6th positional lands in MORI's ``rdma_block_num``, as with MORI) and
  ``combine(out, None, ids, block_num, warp_per_block)[0]``, then ``output.copy_(result[:n])``;
  AsyncLL mode ``dispatch_send(a1, w, scale, ids)`` / ``dispatch_recv()`` /
  ``combine_send(out, None, ids)`` / ``combine_recv()``.
* SGLang (MoriEPDispatcher): normal mode ``dispatch(x, w, scale, ids, call_local_expert_count=rec)``
  / ``combine(h, None, ids)[0]``; low-latency mode (AsyncLL) ``dispatch_send(x, w, scale, ids)`` /
  ``dispatch_recv(call_local_expert_count=rec)`` (then ``op.local_expert_count``) /
  ``combine_send(h, None, ids)`` / ``combine_recv()``.

Inputs are quantized as the engines do before dispatch: fp8 e4m3 with one float32 scale per 128
values, or mxfp4 (e2m1 pairs with one e8m0 scale per 32 values); the combine is bf16, or
quant_type fp8_blockwise / fp4_blockwise as the engines pick for fp8 / mxfp4 models. The expert
layer dequantizes the received rows and applies each local expert the row names (a linear map),
weighted by the router weight; the reference computes the whole MoE on the source PE.
"""

from __future__ import annotations

import sys

import torch

import mori.shmem as sh
from mori.ops import EpDispatchCombineConfig, EpDispatchCombineKernelType as K, EpDispatchCombineOp

from ep_quant_combine import E2M1, to_e2m1

HIDDEN, EPR, TOPK, MAX_TOK = 256, 2, 4, 16
FP4, E8M0 = torch.float4_e2m1fn_x2, torch.float8_e8m0fnu

# (engine, mode, kernel type, dispatch format, combine quant_type, record local counts)
CASES = [
    ("vllm", "standard", K.IntraNode, "fp8", "none", False),
    ("vllm", "standard", K.IntraNode, "mxfp4", "fp8_blockwise", False),
    ("vllm", "asyncll", K.AsyncLL, "fp8", "none", False),
    ("vllm", "asyncll", K.AsyncLL, "mxfp4", "fp8_blockwise", False),
    ("sglang", "normal", K.IntraNode, "fp8", "fp8_blockwise", True),
    ("sglang", "normal", K.IntraNode, "mxfp4", "fp4_blockwise", True),
    ("sglang", "low_latency", K.AsyncLL, "fp8", "fp8_blockwise", True),
    ("sglang", "low_latency", K.AsyncLL, "mxfp4", "none", True),
]
TOL = {"none": 2e-2, "fp8_blockwise": 8e-2, "fp4_blockwise": 0.5}


def fail(what: str) -> None:
    raise AssertionError(f"PE {sh.shmem_mype()}: {what}")


def quantize(x: torch.Tensor, fmt: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The engine's pre-dispatch quantization of bf16 rows x [n, HIDDEN]."""
    n = x.shape[0]
    if fmt == "fp8":
        blk = x.float().view(n, HIDDEN // 128, 128)
        scale = (blk.abs().amax(2) / 448.0).clamp(min=1e-12)
        return (blk / scale[..., None]).view(n, HIDDEN).to(torch.float8_e4m3fn), scale
    blk = x.float().view(n, HIDDEN // 32, 32)
    amax = blk.abs().amax(2).clamp(min=2.0**-126)
    exp = torch.floor(torch.log2(amax)) - 2  # e2m1's largest power is 4 = 2^2
    codes = to_e2m1(blk / torch.exp2(exp)[..., None]).view(n, HIDDEN)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).view(FP4)
    return packed, (exp + 127).to(torch.uint8).view(E8M0)


def dequantize(q: torch.Tensor, scale: torch.Tensor, fmt: str) -> torch.Tensor:
    n = q.shape[0]
    if fmt == "fp8":
        return (q.float().view(n, HIDDEN // 128, 128) * scale.float()[..., None]).view(n, HIDDEN)
    b = q.view(torch.uint8)
    vals = torch.stack([E2M1[(b & 15).long()], E2M1[(b >> 4).long()]], -1).view(n, HIDDEN // 32, 32)
    return (vals * torch.exp2(scale.view(torch.uint8).float() - 127)[..., None]).view(n, HIDDEN)


def experts(world: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(4242)
    return torch.randn(world * EPR, HIDDEN, HIDDEN, generator=g) / HIDDEN**0.5


def moe_rows(xd: torch.Tensor, idx: torch.Tensor, w: torch.Tensor, W: torch.Tensor, only: range) -> torch.Tensor:
    """sum_j w_j * (x @ W_{e_j}) over the experts e_j in `only` (fp32)."""
    out = torch.zeros(xd.shape[0], HIDDEN)
    for j in range(TOPK):
        e = idx[:, j].long()
        live = (e >= only.start) & (e < only.stop)
        if live.any():
            y = torch.bmm(xd[live][:, None, :], W[e[live]])[:, 0, :]
            out[live] += w[live, j : j + 1] * y
    return out


def run_case(
    engine: str,
    mode: str,
    kernel: K,
    fmt: str,
    quant: str,
    record: bool,
    me: int,
    world: int,
    W: torch.Tensor,
    seed: int,
) -> None:
    fp4 = fmt == "mxfp4"
    cfg = EpDispatchCombineConfig(
        data_type=FP4 if fp4 else torch.float8_e4m3fn,
        rank=me,
        world_size=world,
        hidden_dim=HIDDEN,
        scale_dim=HIDDEN // (32 if fp4 else 128),
        scale_type_size=1 if fp4 else 4,
        max_token_type_size=2,
        max_num_inp_token_per_rank=MAX_TOK,
        num_experts_per_rank=EPR,
        num_experts_per_token=TOPK,
        kernel_type=kernel,
        quant_type=quant,
    )
    op = EpDispatchCombineOp(cfg)
    local = range(me * EPR, (me + 1) * EPR)
    for rnd in range(2):
        g = torch.Generator().manual_seed(seed * 10 + rnd + 1000 * me)
        n = int(torch.randint(1, MAX_TOK + 1, (1,), generator=g))
        x = (torch.randn(n, HIDDEN, generator=g) * 2).to(torch.bfloat16)
        ids = torch.rand(n, world * EPR, generator=g).argsort(1)[:, :TOPK].to(torch.int32)
        w = torch.softmax(torch.randn(n, TOPK, generator=g), 1)
        a1, scale = quantize(x, fmt)
        # --- the engine's dispatch
        if mode == "standard":
            out, ow, os_, oi, recv = op.dispatch(a1, w, scale, ids, 128, 16)
        elif mode == "normal":
            out, ow, os_, oi, recv = op.dispatch(a1, w, scale, ids, call_local_expert_count=record)
        else:
            out, ow, os_, oi, recv = op.dispatch_send(a1, w, scale, ids)
            if engine == "sglang":
                op.dispatch_recv(call_local_expert_count=record)
            else:
                op.dispatch_recv()
        total = int(recv[0])
        if record:
            le = oi[:total].long().flatten() - me * EPR
            want = torch.bincount(le[(le >= 0) & (le < EPR)], minlength=EPR).to(torch.int32)
            if not torch.equal(op.local_expert_count, want):
                fail(f"{engine}/{mode}: local_expert_count {op.local_expert_count.tolist()} != {want.tolist()}")
        # --- the expert layer on the received rows
        xd = dequantize(out[:total], os_[:total], fmt)
        fused = moe_rows(xd, oi[:total], ow[:total], W, local).to(torch.bfloat16)
        # --- the engine's combine
        if mode == "standard":
            output = torch.empty(n, HIDDEN, dtype=torch.bfloat16)
            result = op.combine(fused, None, ids, 128, 16)[0]
            output.copy_(result[:n])
        elif mode == "normal":
            output = op.combine(fused, None, ids)[0][:n]
        else:
            combined = op.combine_send(fused, None, ids)
            op.combine_recv()
            output = combined[0][:n]
        ref = moe_rows(dequantize(a1, scale, fmt), ids, w, W, range(0, world * EPR))
        err = (output.float() - ref).abs()
        scale_ref = ref.abs().max().item()
        if err.max().item() > TOL[quant] * scale_ref or err.mean().item() > TOL[quant] * 0.1 * scale_ref:
            fail(
                f"{engine}/{mode} {fmt} combine {quant} round {rnd}: max err {err.max().item():.4g}, mean "
                f"{err.mean().item():.4g} (reference max {scale_ref:.4g})"
            )
    del op


def main() -> int:
    sh.shmem_init()
    me, world = sh.shmem_mype(), sh.shmem_npes()
    W = experts(world)
    for i, case in enumerate(CASES):
        run_case(*case, me, world, W, i)
        if me == 0:
            print(
                f"{case[0]} {case[1]} ({case[2].name}, {case[3]} dispatch, combine {case[4]}): matches the torch MoE",
                flush=True,
            )
    sh.shmem_barrier_all()
    if me == 0:
        print(f"ep integrations ok on {world} PEs", flush=True)
    sh.shmem_finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
