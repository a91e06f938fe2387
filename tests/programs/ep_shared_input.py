# SPDX-License-Identifier: MIT
"""Combine from an external input in the shared tensor arena (mori.shmem.shared_tensors): the
sources sum each holder's rows in place. Checked exactly against a torch model of the combine
(fp32 sums in the order of the token's destination PEs) on fresh random rows every round, for
IntraNode and IntraNodeLL (read in place) and AsyncLL / fp8_direct_cast (staged as before),
weights in the arena, in the dispatch output, private or absent, some PEs shared and others
private in one round, and every holder overwriting its input the moment combine returns.

    mori run -n 4 python ep_shared_input.py
"""

from __future__ import annotations

import torch

import mori.shmem as sh
from mori.ops import EpDispatchCombineConfig, EpDispatchCombineKernelType as K, EpDispatchCombineOp
from ep_quant_combine import dests  # a token's unique destination PEs, in the kernel's order

EPR, TOPK, MAX_TOK, HIDDEN = 3, 4, 40, 1024


def fail(what: str) -> None:
    raise AssertionError(f"PE {sh.shmem_mype()}: {what}")


def inputs(world: int, seed: int):
    """Every PE's (x, w, idx) of one round (every PE builds all of them from the seed)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(world):
        n = int(torch.randint(MAX_TOK // 2, MAX_TOK + 1, (1,), generator=g))
        x = torch.randn(n, HIDDEN, generator=g).to(torch.bfloat16)
        w = torch.rand(n, TOPK, generator=g)
        idx = torch.rand(n, EPR * world, generator=g).argsort(dim=1)[:, :TOPK].to(torch.int32)
        idx[torch.rand(n, TOPK, generator=g) < 0.1] = -1  # some dropped slots
        out.append((x, w, idx))
    return out


def expert(rows: torch.Tensor, holder: int) -> torch.Tensor:
    """The holder's expert: an affine map of the received rows, different on every PE."""
    return (rows.float() * (0.5 + 0.25 * holder) - 0.125 * holder).to(torch.bfloat16)


def expected(all_inputs, me: int, weight_scale):
    x, w, idx = all_inputs[me]
    out = torch.zeros(x.shape[0], HIDDEN, dtype=torch.float32)
    out_w = torch.zeros(x.shape[0], TOPK, dtype=torch.float32)
    for t, row in enumerate(idx.tolist()):
        for d in dests(row, EPR):
            out[t] += expert(x[t : t + 1], d)[0].float()
            out_w[t] += w[t] * weight_scale(d)
    return out.to(torch.bfloat16), out_w


def run(kernel, quant: str, seed: int, shared_on: set, weights: str) -> str:
    me, world = sh.shmem_mype(), sh.shmem_npes()
    op = OPS[(kernel, quant)]
    all_inputs = inputs(world, seed)
    x, w, idx = all_inputs[me]
    out = op.dispatch(x, w, None, idx)
    if kernel == K.AsyncLL:
        op.dispatch_recv()
    total = int(out[4][0])
    private = expert(out[0][:total], me)
    scale = (lambda d: 1.0) if weights in ("none", "dispatch") else (lambda d: float(d + 1))
    if me in shared_on:
        with sh.shared_tensors():
            inp = private.clone()
            arena_w = out[1][:total] * float(me + 1)
        if not sh.is_shared_tensor(inp) or not sh.is_shared_tensor(arena_w):
            fail("tensors allocated in shared_tensors() are not in the arena")
    else:
        inp = private
        arena_w = out[1][:total] * float(me + 1)
    comb_w = {
        "none": None,
        "dispatch": out[1][:total],
        "arena": arena_w,
        "private": (out[1][:total] * float(me + 1)).clone(),
    }[weights]
    got, got_w = op.combine(inp, comb_w, idx)
    if kernel == K.AsyncLL:
        op.combine_recv()
    in_place = op.last_combine_in_place_peers()
    want_in_place = len(shared_on - {me}) if kernel != K.AsyncLL and quant == "none" else 0
    if in_place != want_in_place:
        fail(
            f"{kernel.name}/{quant} shared={sorted(shared_on)}: {in_place} peers read in place, expected {want_in_place}"
        )
    # Returned: nobody reads my input any more. Overwrite it at once (not the dispatch's weights
    # output: that is the op's buffer, which peers' next dispatch writes).
    inp.fill_(float("nan"))
    if weights in ("arena", "private"):
        comb_w.fill_(float("nan"))
    want, want_w = expected(all_inputs, me, scale)
    n = x.shape[0]
    if quant == "none":
        if not torch.equal(got[:n].view(torch.int16), want.view(torch.int16)):
            bad = (got[:n].float() - want.float()).abs().max().item()
            fail(f"{kernel.name} shared={sorted(shared_on)} weights={weights}: rows differ (max {bad})")
    elif not torch.allclose(got[:n].float(), want.float(), rtol=0.07, atol=0.07):  # fp8 on the wire
        fail(f"{kernel.name} {quant}: rows beyond fp8 tolerance")
    if weights != "none" and not torch.equal(got_w[:n], want_w):
        fail(f"{kernel.name} shared={sorted(shared_on)} weights={weights}: weights differ")
    return f"{kernel.name}/{quant}/{weights}"


def main() -> None:
    sh.shmem_init()
    me, world = sh.shmem_mype(), sh.shmem_npes()
    global OPS
    OPS = {}
    for kernel, quant in (
        (K.IntraNode, "none"),
        (K.IntraNodeLL, "none"),
        (K.AsyncLL, "none"),
        (K.IntraNode, "fp8_direct_cast"),
    ):
        OPS[(kernel, quant)] = EpDispatchCombineOp(
            EpDispatchCombineConfig(
                data_type=torch.bfloat16,
                rank=me,
                world_size=world,
                hidden_dim=HIDDEN,
                scale_dim=0,
                scale_type_size=4,
                max_token_type_size=2,
                max_num_inp_token_per_rank=MAX_TOK,
                num_experts_per_rank=EPR,
                num_experts_per_token=TOPK,
                kernel_type=kernel,
                quant_type=quant,
            )
        )
    sh.set_shared_tensor_min_bytes(0)  # the rows here are small; every tensor of the scope is shared
    everyone, evens = set(range(world)), set(range(0, world, 2))
    seed, done = 100, []
    for kernel, quant in OPS:
        for weights in ("none", "dispatch", "arena", "private"):
            for shared_on in (everyone, evens, set()):
                for _ in range(2):
                    seed += 1
                    done.append(run(kernel, quant, seed, shared_on, weights))
    # Many rounds back to back, each holder overwriting its input as soon as combine returns.
    for r in range(30):
        seed += 1
        run(K.IntraNode, "none", seed, everyone, ("none", "dispatch", "arena")[r % 3])
    sh.shmem_barrier_all()
    stats = sh.shared_tensor_stats()
    print(f"PE {me}: {len(done) + 30} combines exact; arena {stats['reserved'] >> 30} GiB reserved")
    if me == 0:
        print(f"ep shared input ok on {world} PEs")
    del OPS
    sh.shmem_finalize()


if __name__ == "__main__":
    main()
