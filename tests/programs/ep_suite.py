# SPDX-License-Identifier: MIT
"""MoE dispatch/combine correctness on every PE of a job (MORI's method).

    mori run -n 4 python ep_suite.py --preset quick

Every PE seeds the same generator and builds every PE's inputs, so each PE can check
its own outputs exactly: dispatch bit-exact (payload, weights, scales, indices; source
positions unique and complete; count equal to recv_num_token), combine equal to
input x (number of unique destination PEs) within the dtype's tolerance, weights
likewise. Exits non-zero with the failing check.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from dataclasses import dataclass, replace

import torch

import mori.shmem as sh
from mori.ops import EpDispatchCombineConfig, EpDispatchCombineKernelType as K, EpDispatchCombineOp

from cases import run_cases
from ep_standard import standard_round

FP8 = torch.float8_e4m3fn
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 1e-3, FP8: 1.25e-1}


@dataclass(frozen=True)
class Case:
    kernel: K = K.IntraNode
    dtype: torch.dtype = torch.bfloat16  # dispatch dtype
    combine_dtype: torch.dtype = None  # None: same as dispatch
    hidden: int = 64
    max_tokens: int = 16
    experts_per_rank: int = 4
    topk: int = 4
    scale_dim: int = 0
    scale_type_size: int = 4
    zero_copy: bool = False
    quant: str = "none"
    routing: str = "random"
    rounds: int = 2
    gpu_per_node: int = 8
    max_total_recv: int = 0
    block_num: int = -1
    standard: bool = False  # also a standard-MoE (DeepEP layout) round

    def name(self) -> str:
        parts = [self.kernel.name, str(self.dtype).replace("torch.", "")]
        if self.combine_dtype is not None:
            parts.append("comb=" + str(self.combine_dtype).replace("torch.", ""))
        parts += [f"h{self.hidden}", f"n{self.max_tokens}", f"e{self.experts_per_rank}", f"k{self.topk}", self.routing]
        if self.scale_dim:
            parts.append(f"s{self.scale_dim}x{self.scale_type_size}")
        if self.zero_copy:
            parts.append("zerocopy")
        if self.quant != "none":
            parts.append(self.quant)
        if self.gpu_per_node != 8:
            parts.append(f"gpn{self.gpu_per_node}")
        if self.max_total_recv:
            parts.append(f"cap{self.max_total_recv}")
        if self.standard:
            parts.append("standard")
        return "/".join(parts)


def fail(me: int, case: Case, what: str) -> None:
    raise AssertionError(f"PE {me} [{case.name()}]: {what}")


def make_routing(case: Case, world: int, gen: torch.Generator) -> list[torch.Tensor]:
    """Indices of every PE (same on all PEs)."""
    n_exp = world * case.experts_per_rank
    out = []
    for r in range(world):
        if case.routing in ("max_tokens", "all_to_one"):
            n = case.max_tokens
        elif case.routing == "half_tokens":  # fits a receive buffer capped at half size
            n = case.max_tokens // 2
        else:
            n = int(torch.randint(0, case.max_tokens + 1, (1,), generator=gen))
        if case.routing == "zero_tokens" and r == world - 1:
            n = 0
        idx = torch.rand(n, n_exp, generator=gen).argsort(dim=1)[:, : case.topk].to(torch.int32)
        if case.routing == "all_to_one":
            # Every token's experts are rank 0's; more picks than rank 0 has experts become -1.
            m = min(case.topk, case.experts_per_rank)
            idx = torch.full((n, case.topk), -1, dtype=torch.int32)
            idx[:, :m] = torch.rand(n, case.experts_per_rank, generator=gen).argsort(dim=1)[:, :m].to(torch.int32)
        elif case.routing == "sentinel":
            drop = torch.rand(n, case.topk, generator=gen) < 0.35
            idx[drop] = -1
            if n > 2:
                idx[1] = -1  # a token that goes nowhere
        elif case.routing == "dup_rank":
            # Several experts of one rank per token: dedup must send the token once.
            base = torch.randint(0, world, (n, 1), generator=gen) * case.experts_per_rank
            off = torch.rand(n, case.experts_per_rank, generator=gen).argsort(dim=1)[:, : case.topk]
            idx = (base + off % case.experts_per_rank).to(torch.int32)
        out.append(idx)
    return out


def make_tokens(case: Case, n: int, gen: torch.Generator) -> torch.Tensor:
    x = torch.randn(n, case.hidden, generator=gen) * 2
    return x.to(case.dtype)


def dest_ranks(idx: torch.Tensor, epr: int) -> list[list[int]]:
    res = []
    for row in idx.tolist():
        seen = []
        for e in row:
            if e >= 0 and e // epr not in seen:
                seen.append(e // epr)
        res.append(seen)
    return res


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def run_case(case: Case, me: int, world: int, seed: int, num_threads: int) -> None:
    kernel = case.kernel
    cfg = EpDispatchCombineConfig(
        data_type=case.dtype,
        rank=me,
        world_size=world,
        hidden_dim=case.hidden,
        scale_dim=case.scale_dim,
        scale_type_size=case.scale_type_size,
        max_token_type_size=4,
        max_num_inp_token_per_rank=case.max_tokens,
        num_experts_per_rank=case.experts_per_rank,
        num_experts_per_token=case.topk,
        use_external_inp_buf=not case.zero_copy,
        kernel_type=kernel,
        gpu_per_node=case.gpu_per_node,
        quant_type=case.quant,
        max_total_recv_tokens=case.max_total_recv,
    )
    op = EpDispatchCombineOp(cfg, num_threads=num_threads)
    if op.launch_config_mode == "AUTO" and me == 0:
        print(
            f"auto launch config {op.get_launch_config(True, dtype=case.dtype, num_tokens=case.max_tokens, hidden_dim=case.hidden)}"
        )
    epr = case.experts_per_rank
    max_send = world * case.max_tokens
    comb_dtype = case.combine_dtype or case.dtype
    for rnd in range(case.rounds):
        gen = torch.Generator().manual_seed(seed * 1000 + rnd)
        indices = make_routing(case, world, gen)
        inputs = [make_tokens(case, ix.shape[0], gen) for ix in indices]
        weights = [torch.rand(ix.shape[0], case.topk, generator=gen) for ix in indices]
        scales = [
            (
                torch.randn(ix.shape[0], case.scale_dim, generator=gen).to(
                    torch.float32 if case.scale_type_size == 4 else FP8
                )
            )
            for ix in indices
        ]
        dests = [dest_ranks(ix, epr) for ix in indices]

        sc = scales[me] if case.scale_dim else None
        out, out_w, out_s, out_i, recv = op.dispatch(inputs[me], weights[me], sc, indices[me], block_num=case.block_num)
        if kernel == K.AsyncLL:
            op.dispatch_recv()
        total = int(recv[0])
        expected = sorted(r * max_send + t for r in range(world) for t, d in enumerate(dests[r]) if me in d)
        if total != len(expected):
            fail(me, case, f"round {rnd}: recv_num_token {total}, expected {len(expected)}")
        if out.shape != (cfg.max_num_tokens_to_recv, case.hidden) or out.dtype != case.dtype:
            fail(me, case, f"dispatch output {tuple(out.shape)} {out.dtype}")
        pos = op.get_dispatch_src_token_pos()
        if pos.numel() != total or sorted(pos.tolist()) != expected:
            fail(me, case, f"round {rnd}: source positions are not the expected set (dupes or gaps)")
        if total:
            src_rank, src_tok = op.decode_send_flat_idx(pos.long())
            ref_x = torch.stack([inputs[r][t] for r, t in zip(src_rank.tolist(), src_tok.tolist())])
            ref_w = torch.stack([weights[r][t] for r, t in zip(src_rank.tolist(), src_tok.tolist())])
            ref_i = torch.stack([indices[r][t] for r, t in zip(src_rank.tolist(), src_tok.tolist())])
            if not torch.equal(as_bytes(out[:total]), as_bytes(ref_x)):
                fail(me, case, f"round {rnd}: dispatched payload differs from the source rows")
            if not torch.equal(out_w[:total], ref_w):
                fail(me, case, f"round {rnd}: dispatched weights differ")
            if not torch.equal(out_i[:total], ref_i):
                fail(me, case, f"round {rnd}: dispatched indices differ")
            if case.scale_dim:
                ref_s = torch.stack([scales[r][t] for r, t in zip(src_rank.tolist(), src_tok.tolist())])
                if out_s is None or not torch.equal(as_bytes(out_s[:total]), as_bytes(ref_s)):
                    fail(me, case, f"round {rnd}: dispatched scales differ")
        elif case.scale_dim and out_s is None:
            fail(me, case, "out_scales is None although scale_dim > 0")
        if not case.scale_dim and out_s is not None:
            fail(me, case, "out_scales should be None when scale_dim == 0")

        # Combine with an identity expert.
        expert_out = out[:total].to(comb_dtype)
        if case.zero_copy:
            buf = op.get_registered_combine_input_buffer(comb_dtype, case.hidden)
            buf[:total].copy_(expert_out)
            comb_in = buf
        else:
            comb_in = expert_out
        c_out, c_w = op.combine(comb_in, out_w[:total] if total else out_w, indices[me])
        if kernel == K.AsyncLL:
            op.combine_recv()
        n = indices[me].shape[0]
        if c_out.shape != (case.max_tokens, case.hidden) or c_out.dtype != comb_dtype:
            fail(me, case, f"combine output {tuple(c_out.shape)} {c_out.dtype}")
        if n:
            mult = torch.tensor([float(len(d)) for d in dests[me]])
            ref = inputs[me].to(comb_dtype).float() * mult[:, None]
            got = c_out[:n].float()
            tol = TOL[comb_dtype]
            if case.kernel == K.InterNodeV1 and comb_dtype == torch.bfloat16:
                tol = 2e-2  # partial sums are rounded to bf16 once more inside each node
            if case.quant == "fp8_direct_cast":
                tol = TOL[FP8]
            if not torch.allclose(got, ref, atol=tol, rtol=tol):
                err = (got - ref).abs().max().item()
                fail(me, case, f"round {rnd}: combined tokens differ from input x unique ranks (max err {err})")
            ref_w = weights[me] * mult[:, None]
            if c_w is None or not torch.allclose(c_w[:n], ref_w, rtol=1e-6, atol=1e-6):
                fail(me, case, f"round {rnd}: combined weights differ from weights x unique ranks")
        if case.standard:
            try:
                standard_round(op, inputs, indices, me, torch.device("cpu"))
            except AssertionError as exc:
                fail(me, case, f"round {rnd}: {exc}")
    del op


def presets(name: str, world: int) -> list[Case]:
    base = Case()
    if name == "quick":
        return [base, replace(base, kernel=K.InterNodeV1LL, dtype=torch.float32)]
    if name == "kernels":
        cases = []
        for kern in K:
            gpn = 8 if kern != K.InterNodeV1 else max(1, world // 2)
            cases.append(replace(base, kernel=kern, gpu_per_node=gpn, scale_dim=4))
            cases.append(
                replace(
                    base,
                    kernel=kern,
                    gpu_per_node=gpn,
                    dtype=FP8,
                    combine_dtype=torch.bfloat16,
                    routing="sentinel",
                    zero_copy=kern != K.InterNodeV1,
                )
            )
        return cases
    if name == "dtypes":
        cases = []
        for dt, sd, ss in itertools.product((torch.float32, torch.bfloat16, FP8), (0, 8), (1, 4)):
            if sd == 0 and ss == 1:
                continue
            cases.append(
                replace(
                    base,
                    dtype=dt,
                    scale_dim=sd,
                    scale_type_size=ss,
                    combine_dtype=torch.bfloat16 if dt == FP8 else None,
                )
            )
        cases.append(replace(base, dtype=torch.float16))
        cases.append(replace(base, quant="fp8_direct_cast"))
        cases.append(replace(base, kernel=K.AsyncLL, quant="fp8_direct_cast", dtype=torch.float32))
        cases.append(replace(base, dtype=FP8, zero_copy=True))  # fp8 combine output
        cases.append(replace(base, standard=True, routing="sentinel"))
        cases.append(replace(base, standard=True, kernel=K.AsyncLL, dtype=torch.float32))
        return cases
    if name == "routing":
        cases = []
        for routing in ("random", "all_to_one", "sentinel", "zero_tokens", "max_tokens", "dup_rank"):
            cases.append(replace(base, routing=routing, rounds=2))
            cases.append(replace(base, routing=routing, zero_copy=True, kernel=K.IntraNodeLL, rounds=1))
        cases.append(replace(base, routing="max_tokens", max_tokens=64, block_num=7, rounds=3))
        cases.append(replace(base, topk=1, experts_per_rank=1, rounds=3))
        cases.append(replace(base, max_total_recv=world * base.max_tokens // 2, routing="half_tokens"))
        return cases
    if name == "internode":
        gpn = max(1, world // 2)
        cases = []
        for kern in (K.InterNode, K.InterNodeV1, K.InterNodeV1LL, K.AsyncLL):
            cases.append(replace(base, kernel=kern, gpu_per_node=gpn, routing="random", scale_dim=4, rounds=2))
            cases.append(replace(base, kernel=kern, gpu_per_node=gpn, routing="max_tokens", zero_copy=True))
        cases.append(replace(base, kernel=K.InterNodeV1, gpu_per_node=gpn, quant="fp8_direct_cast"))
        cases.append(replace(base, kernel=K.InterNodeV1, gpu_per_node=1, routing="sentinel"))
        return cases
    if name == "big":
        # Combines of more than 8 MiB per PE (streaming stores, the AVX2 sum of bf16 rows): a
        # symmetric input (bf16, fp32: the dispatch output itself, own rows staged), a private one
        # (fp8 -> bf16: own rows read in place), skewed routing, and uneven copy blocks.
        big = replace(base, hidden=4096, max_tokens=512, rounds=2, routing="max_tokens")
        return [
            replace(big, dtype=torch.float32),
            replace(big, routing="random"),
            replace(big, dtype=FP8, combine_dtype=torch.bfloat16, scale_dim=4),
            replace(big, routing="all_to_one", rounds=1),
            replace(big, routing="zero_tokens", rounds=1),
            replace(big, kernel=K.IntraNodeLL, block_num=5, rounds=1),
        ]
    if name == "hosts":
        # Across hosts: IntraNode must refuse (no direct mapping of the other host); the
        # RMA kernel types with the Complete Example's shape (hidden 7168, top-8).
        return [
            replace(
                base,
                kernel=K.InterNodeV1,
                gpu_per_node=max(1, world // 2),
                hidden=7168,
                topk=8,
                experts_per_rank=8,
                max_tokens=32,
                routing="max_tokens",
            ),
            replace(
                base,
                kernel=K.InterNodeV1LL,
                hidden=7168,
                topk=8,
                experts_per_rank=8,
                max_tokens=32,
                dtype=FP8,
                combine_dtype=torch.bfloat16,
            ),
        ]
    raise SystemExit(f"unknown preset {name}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="quick")
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    sh.shmem_init()
    me, world = sh.shmem_mype(), sh.shmem_npes()
    t0 = time.time()
    if "hosts" in args.preset.split(","):
        cfg = EpDispatchCombineConfig(
            data_type=torch.bfloat16,
            rank=me,
            world_size=world,
            hidden_dim=8,
            scale_dim=0,
            scale_type_size=4,
            max_token_type_size=4,
            max_num_inp_token_per_rank=4,
            num_experts_per_rank=2,
            num_experts_per_token=2,
        )
        try:
            EpDispatchCombineOp(cfg)
            raise AssertionError(f"PE {me}: IntraNode across hosts did not refuse")
        except NotImplementedError as exc:
            assert "InterNodeV1" in str(exc), exc
        sh.shmem_barrier_all()
    cases = [c for name in args.preset.split(",") for c in presets(name, world)]

    def named(i: int, case: Case) -> tuple[str, object]:
        return f"{i}:{case.name()}", lambda: run_case(case, me, world, args.seed + i, args.threads)

    run_cases(me, [named(i, case) for i, case in enumerate(cases)])
    sh.shmem_barrier_all()
    if me == 0:
        print(f"ep_suite {args.preset}: {len(cases)} cases on {world} PEs passed in {time.time() - t0:.1f} s")
    sh.shmem_finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
