# SPDX-License-Identifier: MIT
"""Tokens per local expert on CPU tensors: dispatch(call_local_expert_count=True), the split
phases (dispatch_send/dispatch_recv with call_local_expert_count, every kernel type) and MORI's
standalone mori.ops.launch_local_expert_count over addresses, all against a count made here
from the inputs of every PE (all PEs seed alike). Launch: mori run -n N python this.py
"""

from __future__ import annotations

import sys

import torch

import mori.shmem as sh
from mori.core.errors import InvalidArgument
from mori.ops import EpDispatchCombineConfig, EpDispatchCombineKernelType as K, EpDispatchCombineOp
from mori.ops import launch_local_expert_count

# How a round asks for the count: (kernel types, label, call) where call(op, x, idx) dispatches.
SPLIT_MODES = {
    "dispatch": lambda op, x, idx: _recv_if_split(op, op.dispatch(x, None, None, idx, call_local_expert_count=True)),
    "dispatch_send": lambda op, x, idx: _recv_if_split(
        op, op.dispatch_send(x, None, None, idx, call_local_expert_count=True)
    ),
    "dispatch_recv": lambda op, x, idx: _recv_if_split(op, op.dispatch_send(x, None, None, idx), count=True),
}


def _recv_if_split(op, out, count=False):
    if op.config.kernel_type == K.AsyncLL:
        op.dispatch_recv(call_local_expert_count=count)
    return out


def main() -> int:
    with sh.init() as s:
        me, n = s.my_pe, s.n_pes
        epr, k, hidden, tokens = 8, 4, 64, 50
        cfg = EpDispatchCombineConfig(
            data_type=torch.float32,
            rank=me,
            world_size=n,
            hidden_dim=hidden,
            scale_dim=0,
            scale_type_size=4,
            max_token_type_size=4,
            max_num_inp_token_per_rank=tokens,
            num_experts_per_rank=epr,
            num_experts_per_token=k,
        )
        op = EpDispatchCombineOp(cfg)
        count = op.local_expert_count  # MORI allocates it with the op
        assert count is not None and count.dtype == torch.int32 and tuple(count.shape) == (epr,) and not count.any(), (
            f"PE {me}: local_expert_count at construction is {count}"
        )
        for rnd in range(3):
            idx_all, x_all = [], []
            for p in range(n):
                g = torch.Generator().manual_seed(1000 * rnd + p)
                idx = torch.stack([torch.randperm(epr * n, generator=g)[:k] for _ in range(tokens - p)])
                idx[torch.rand(idx.shape, generator=g) < 0.1] = -1  # skipped entries
                idx_all.append(idx.to(torch.int32))
                x_all.append(torch.randn(tokens - p, hidden, generator=g))
            # Reference: every entry of every PE's tokens that lands on one of my experts, once per
            # (token, destination PE) row, with all k ids of the row.
            want = torch.zeros(epr, dtype=torch.int32)
            for idx in idx_all:
                for row in idx.tolist():
                    if me in {e // epr for e in row if e >= 0}:
                        for e in row:
                            if e >= 0 and e // epr == me:
                                want[e - me * epr] += 1
            out = op.dispatch(x_all[me], None, None, idx_all[me], call_local_expert_count=True)
            assert torch.equal(op.local_expert_count, want), f"PE {me}: {op.local_expert_count} != {want}"
            got = torch.full((epr,), -7, dtype=torch.int32)
            launch_local_expert_count(cfg, out[3].data_ptr(), out[4].data_ptr(), got.data_ptr())
            assert torch.equal(got, want), f"PE {me}: launch_local_expert_count {got} != {want}"
            compact = out[3][: int(out[4][0])].clone()  # a buffer of exactly `total` rows is enough
            got.fill_(-7)
            launch_local_expert_count(cfg, compact.data_ptr(), out[4].data_ptr(), got.data_ptr())
            assert torch.equal(got, want), f"PE {me}: compact buffer"
            op.combine(out[0], None, idx_all[me])
            assert op.local_expert_count is count, "local_expert_count must be filled in place"
            split_rounds(cfg, me, n, want, x_all[me], idx_all[me], rnd)
        try:
            launch_local_expert_count(cfg, 0, out[4].data_ptr(), got.data_ptr())
        except InvalidArgument as exc:
            assert "indices_ptr" in str(exc)
        else:
            raise AssertionError("a null indices_ptr was accepted")
        sh.barrier_all()
        print(f"PE {me}/{n}: local expert count ok", flush=True)
    return 0


def split_rounds(
    base: EpDispatchCombineConfig, me: int, n: int, want: torch.Tensor, x: torch.Tensor, idx: torch.Tensor, rnd: int
) -> None:
    """Every kernel type, every way of asking (dispatch, dispatch_send, dispatch_recv): the count
    must equal the reference; a dispatch that does not ask leaves the tensor alone."""
    from dataclasses import replace

    for kernel in K:
        cfg = replace(base, kernel_type=kernel, gpu_per_node=max(1, n // 2))
        op = EpDispatchCombineOp(cfg)
        modes = ["dispatch", "dispatch_send"] + (["dispatch_recv"] if kernel == K.AsyncLL else [])
        for mode in modes:
            op.local_expert_count.fill_(-7)
            out = SPLIT_MODES[mode](op, x, idx)
            if not torch.equal(op.local_expert_count, want):
                raise AssertionError(
                    f"PE {me} round {rnd} {kernel.name} via {mode}: {op.local_expert_count.tolist()} != {want.tolist()}"
                )
            op.combine(out[0][: int(out[4][0])], None, idx)
            if kernel == K.AsyncLL:
                op.combine_recv()
        op.local_expert_count.fill_(-7)
        out = _recv_if_split(op, op.dispatch(x, None, None, idx))  # not asked: untouched
        assert (op.local_expert_count == -7).all(), f"PE {me} {kernel.name}: counted without being asked"
        op.combine(out[0][: int(out[4][0])], None, idx)
        if kernel == K.AsyncLL:
            op.combine_recv()
        del op


if __name__ == "__main__":
    sys.exit(main())
