# SPDX-License-Identifier: MIT
"""Blockwise-quantized combine (quant_type fp8_blockwise / fp4_blockwise) and combine of fp4
rows (float4_e2m1fn_x2 dispatched with float8_e8m0fnu scales) on CPU tensors, every kernel type.

    mori run -n 4 python ep_quant_combine.py

Every PE builds every PE's inputs from one seed. The blockwise combines are checked exactly
against a torch model of the wire (per row: blocks of ceil(hidden / MORI_FP8_COMBINE_SCALE_DIM)
values, 56 by default, one float32 scale = amax / 448 (fp8) or amax / 6 (fp4) per block, values
sent as value / scale, multiplied back and summed in fp32 over the destination ranks), and within MORI's tolerance of the exact
sum; a kernel type MORI refuses builds, dispatches, and raises ValueError at combine, as in MORI.
fp4 rows are summed in fp32 and rounded back to e2m1 (nearest even, saturating at 6).
"""

from __future__ import annotations

import os
import sys

import torch

import mori.shmem as sh
from mori.ops import EpDispatchCombineConfig, EpDispatchCombineKernelType as K, EpDispatchCombineOp

FP4 = torch.float4_e2m1fn_x2
E8M0 = torch.float8_e8m0fnu
SCALE_DIM = int(os.environ.get("MORI_FP8_COMBINE_SCALE_DIM", "56"))  # MORI's default 56
ALLOWED = {"fp8_blockwise": {K.IntraNode, K.IntraNodeLL, K.AsyncLL}, "fp4_blockwise": {K.IntraNode, K.IntraNodeLL}}
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def fail(what: str) -> None:
    raise AssertionError(f"PE {sh.shmem_mype()}: {what}")


def to_e2m1(v: torch.Tensor) -> torch.Tensor:
    """fp32 -> e2m1 codes (uint8 0..15): nearest, ties to the even code, saturating at 6."""
    mags = E2M1[:8]
    a = v.abs().clamp(max=6.0)
    dist = (a[..., None] - mags).abs()
    best = dist.min(-1, keepdim=True).values
    cand = (dist == best) & ((torch.arange(8) % 2 == 0) | (dist.eq(best).sum(-1, keepdim=True) == 1))
    code = cand.int().argmax(-1).to(torch.uint8)
    return code | (torch.signbit(v).to(torch.uint8) << 3)


def _blocks(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """x [n, hidden] fp32 as [n, blocks, block] (zero padded), and the block size."""
    n, hidden = x.shape
    block = -(-hidden // SCALE_DIM)
    blocks = -(-hidden // block)
    padded = torch.zeros(n, blocks * block)
    padded[:, :hidden] = x
    return padded.view(n, blocks, block), block


def blockwise_roundtrip(x: torch.Tensor, fp4: bool) -> torch.Tensor:
    """What the receiver adds for rows x (bf16 [n, hidden]): the dequantized fp32 values."""
    n, hidden = x.shape
    blk, _ = _blocks(x.float())
    scale = blk.abs().amax(2, keepdim=True) / (6.0 if fp4 else 448.0)
    q = torch.where(scale > 0, blk / torch.where(scale > 0, scale, torch.ones_like(scale)), torch.zeros_like(blk))
    deq = E2M1[to_e2m1(q).long()] if fp4 else q.to(torch.float8_e4m3fn).float()
    return (deq * scale).view(n, -1)[:, :hidden]


def dests(row: list[int], epr: int) -> list[int]:
    seen: list[int] = []
    for e in row:
        if e >= 0 and e // epr not in seen:
            seen.append(e // epr)
    return seen


def make_inputs(world: int, epr: int, k: int, max_tok: int, hidden: int, seed: int, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    idx, x, w = [], [], []
    for r in range(world):
        n = max_tok if r == 0 else int(torch.randint(0, max_tok + 1, (1,), generator=g))
        ix = torch.rand(n, world * epr, generator=g).argsort(1)[:, :k].to(torch.int32)
        ix[torch.rand(n, k, generator=g) < 0.15] = -1
        idx.append(ix)
        x.append((torch.randn(n, hidden, generator=g) * torch.rand(n, 1, generator=g) * 8).to(dtype))
        w.append(torch.rand(n, k, generator=g))
    return idx, x, w


def quant_case(kernel: K, quant: str, me: int, world: int, hidden: int, seed: int) -> str:
    epr, k, max_tok = 4, 4, 24
    cfg = EpDispatchCombineConfig(
        data_type=torch.bfloat16,
        rank=me,
        world_size=world,
        hidden_dim=hidden,
        scale_dim=0,
        scale_type_size=4,
        max_token_type_size=2,
        max_num_inp_token_per_rank=max_tok,
        num_experts_per_rank=epr,
        num_experts_per_token=k,
        kernel_type=kernel,
        gpu_per_node=max(1, world // 2),
        quant_type=quant,
    )
    op = EpDispatchCombineOp(cfg)  # MORI builds every kernel type, and refuses at combine
    fp4 = quant == "fp4_blockwise"
    for rnd in range(2):
        idx, x, w = make_inputs(world, epr, k, max_tok, hidden, seed * 10 + rnd)
        out, ow, _, oi, recv = op.dispatch(x[me], w[me], None, idx[me])
        if kernel == K.AsyncLL:
            op.dispatch_recv()
        total = int(recv[0])
        pos = op.get_dispatch_src_token_pos().long()
        src_rank, _ = op.decode_send_flat_idx(pos)
        # The expert: row * (1 + this PE), so the destination ranks send back different rows.
        expert = (out[:total].float() * (1 + me)).to(torch.bfloat16)
        if kernel not in ALLOWED[quant]:
            try:
                op.combine(expert, ow[:total], idx[me])
            except ValueError as exc:
                if "only supports" not in str(exc) or quant not in str(exc):
                    fail(f"{kernel.name}/{quant}: refusal does not say so: {exc}")
                continue
            fail(f"{kernel.name}/{quant}: combine was not refused (MORI refuses it)")
        c, cw = op.combine(expert, ow[:total], idx[me])
        if kernel == K.AsyncLL:
            op.combine_recv()
        n = x[me].shape[0]
        if n:
            # The rows each destination rank r sends back, dequantized, for all tokens at once; the
            # kernel adds them in the order of the token's destination ranks (first appearance).
            sent = torch.stack([(x[me].float() * (1 + r)).to(torch.bfloat16) for r in range(world)])
            deq = torch.stack([blockwise_roundtrip(sent[r], fp4) for r in range(world)])
            order = torch.full((n, k), -1, dtype=torch.long)
            for t, row in enumerate(idx[me].tolist()):
                d = dests(row, epr)
                order[t, : len(d)] = torch.tensor(d, dtype=torch.long)
            rows = torch.arange(n)
            want = torch.zeros(n, hidden)
            exact = torch.zeros(n, hidden, dtype=torch.float64)
            for j in range(k):
                r, live = order[:, j].clamp(min=0), (order[:, j] >= 0)[:, None]
                want = torch.where(live, want + deq[r, rows], want)
                exact = torch.where(live, exact + sent[r, rows].double(), exact)
            mult = (order >= 0).sum(1).float()
            got = c[:n]
            if not torch.equal(got, want.to(torch.bfloat16)):
                bad = (got.float() != want.to(torch.bfloat16).float()).nonzero()[:3].tolist()
                fail(f"{kernel.name}/{quant} round {rnd}: combine differs from the blockwise model at {bad}")
            # MORI's tolerance against the unquantized sum (7e-2 fp8; fp4: half an e2m1 step per block,
            # at most amax / 6 for each row added).
            err = (got.double() - exact).abs()
            if fp4:
                bound = torch.zeros(n, hidden, dtype=torch.float64)
                for j in range(k):
                    r, live = order[:, j].clamp(min=0), (order[:, j] >= 0)[:, None]
                    blk, block = _blocks(sent[r, rows].float())
                    amax = blk.abs().amax(2).double().repeat_interleave(block, 1)[:, :hidden]
                    bound = torch.where(live, bound + amax / 6.0, bound)
                ok = bool((err <= bound + exact.abs() * 1e-2 + 1e-6).all())
            else:
                ok = bool((err <= 7e-2 * (1 + exact.abs())).all())
            if not ok:
                fail(f"{kernel.name}/{quant} round {rnd}: beyond MORI's tolerance (max err {err.max().item():.4g})")
            if cw is None or not torch.allclose(cw[:n], w[me] * mult[:, None], rtol=1e-6, atol=1e-6):
                fail(f"{kernel.name}/{quant} round {rnd}: combined weights")
        # Bytes on the wire: codes + float32 scales per row, plus the weights.
        block = -(-hidden // SCALE_DIM)
        row = ((hidden + 1) // 2 if fp4 else hidden) + 4 * (-(-hidden // block))
        remote = int((src_rank != me).sum())
        if op.last_remote_bytes()[1] != remote * (row + 4 * k):
            fail(
                f"{kernel.name}/{quant}: {op.last_remote_bytes()[1]} combine bytes on the wire, expected "
                f"{remote} rows x ({row} + {4 * k})"
            )
    if kernel in ALLOWED[quant]:
        # MORI's other refusals: a non-bf16 input, and zero-copy.
        idx, x, w = make_inputs(world, epr, k, max_tok, hidden, seed + 7)
        out, ow, _, _, recv = op.dispatch(x[me], w[me], None, idx[me])
        if kernel == K.AsyncLL:
            op.dispatch_recv()
        total = int(recv[0])
        for bad, needle in (
            (dict(input=out[:total].float()), "only supports bf16"),
            (dict(use_external_inp_buf=0), "use_external_inp_buf"),
        ):
            args = {"input": out[:total], "weights": ow[:total], "indices": idx[me], **bad}
            try:
                op.combine(**args)
            except ValueError as exc:
                if needle not in str(exc):
                    fail(f"{kernel.name}/{quant}: {exc} does not mention {needle!r}")
            else:
                fail(f"{kernel.name}/{quant}: combine with {list(bad)} was not refused")
        op.combine(out[:total], ow[:total], idx[me])  # still usable after the refusals
        if kernel == K.AsyncLL:
            op.combine_recv()
    del op
    return "combined" if kernel in ALLOWED[quant] else "refused at combine"


def fp4_rows_case(kernel: K, me: int, world: int, hidden: int, seed: int) -> None:
    """float4_e2m1fn_x2 rows with e8m0 scales: dispatch bit-exact, combine summed and re-encoded."""
    epr, k, max_tok = 4, 4, 16
    packed, scale_dim = hidden // 2, hidden // 32
    cfg = EpDispatchCombineConfig(
        data_type=FP4,
        rank=me,
        world_size=world,
        hidden_dim=packed,
        scale_dim=scale_dim,
        scale_type_size=1,
        max_token_type_size=1,
        max_num_inp_token_per_rank=max_tok,
        num_experts_per_rank=epr,
        num_experts_per_token=k,
        kernel_type=kernel,
        gpu_per_node=max(1, world // 2),
    )
    op = EpDispatchCombineOp(cfg)
    # InterNodeV1 sums inside each node first (a rounding per partial sum): codes whose partial
    # sums stay exact in e2m1 (0, +-0.5, +-1, at most 4 of them) keep that check exact too.
    codes = torch.tensor([0, 1, 2, 8, 9, 10], dtype=torch.uint8) if kernel == K.InterNodeV1 else None
    for rnd in range(2):
        g = torch.Generator().manual_seed(seed * 10 + rnd)
        idx, x, s = [], [], []
        for r in range(world):
            n = max_tok if r == 0 else int(torch.randint(0, max_tok + 1, (1,), generator=g))
            ix = torch.rand(n, world * epr, generator=g).argsort(1)[:, :k].to(torch.int32)
            ix[torch.rand(n, k, generator=g) < 0.15] = -1
            if codes is None:
                nib = torch.randint(0, 16, (n, hidden), generator=g, dtype=torch.uint8)
            else:
                nib = codes[torch.randint(0, len(codes), (n, hidden), generator=g)]
            idx.append(ix)
            x.append((nib[:, 0::2] | (nib[:, 1::2] << 4)).view(FP4))
            s.append(torch.randint(100, 140, (n, scale_dim), generator=g, dtype=torch.uint8).view(E8M0))
        out, ow, os_, _, recv = op.dispatch(x[me], None, s[me], idx[me])
        if kernel == K.AsyncLL:
            op.dispatch_recv()
        total = int(recv[0])
        pos = op.get_dispatch_src_token_pos().long()
        sr, st = op.decode_send_flat_idx(pos)
        ref_x = torch.stack([x[a][b] for a, b in zip(sr.tolist(), st.tolist())]) if total else x[me][:0]
        ref_s = torch.stack([s[a][b] for a, b in zip(sr.tolist(), st.tolist())]) if total else s[me][:0]
        if not (
            torch.equal(out[:total].view(torch.uint8), ref_x.view(torch.uint8))
            and torch.equal(os_[:total].view(torch.uint8), ref_s.view(torch.uint8))
        ):
            fail(f"{kernel.name}: fp4 dispatch is not bit-exact")
        c, _ = op.combine(out[:total], None, idx[me])
        if kernel == K.AsyncLL:
            op.combine_recv()
        n = x[me].shape[0]
        if c.dtype != FP4 or c.shape[1] != packed:
            fail(f"{kernel.name}: fp4 combine output is {c.dtype} {tuple(c.shape)}")
        if n:
            b = x[me].view(torch.uint8)
            vals = torch.stack([E2M1[(b & 15).long()], E2M1[(b >> 4).long()]], -1).reshape(n, hidden)
            mult = torch.tensor([float(len(dests(row, epr))) for row in idx[me].tolist()])
            codes_out = to_e2m1(vals * mult[:, None] + 0.0)  # the kernel's sum starts at +0
            want = codes_out[:, 0::2] | (codes_out[:, 1::2] << 4)
            if not torch.equal(c[:n].view(torch.uint8), want):
                bad = (c[:n].view(torch.uint8) != want).nonzero()[:3].tolist()
                fail(f"{kernel.name} round {rnd}: fp4 combine differs from encode(sum) at {bad}")
    del op


def main() -> int:
    sh.shmem_init()
    me, world = sh.shmem_mype(), sh.shmem_npes()
    seed = 0
    # --hosts: PEs on several hosts; the kernel types that map every peer's memory are left out.
    kernels = [k for k in K if k not in (K.IntraNode, K.IntraNodeLL)] if "--hosts" in sys.argv else list(K)
    for kernel in kernels:
        for quant in ("fp8_blockwise", "fp4_blockwise"):
            for hidden in (7168 // 8, 100):  # 56 blocks of 16; and a hidden that does not divide (blocks of 2)
                seed += 1
                how = quant_case(kernel, quant, me, world, hidden, seed)
                if me == 0:
                    print(f"{kernel.name} {quant} hidden={hidden}: {how}", flush=True)
        seed += 1
        fp4_rows_case(kernel, me, world, 256, seed)
        if me == 0:
            print(f"{kernel.name} fp4 rows: dispatched and combined", flush=True)
    sh.shmem_barrier_all()
    if me == 0:
        print(f"ep quant combine ok on {world} PEs", flush=True)
    sh.shmem_finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
