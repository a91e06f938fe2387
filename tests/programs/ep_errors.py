# SPDX-License-Identifier: MIT
"""Bad EP input raises a clear error instead of corrupting (where MORI silently corrupts),
and the op keeps working afterwards.

    mori run -n 2 python ep_errors.py
"""

from __future__ import annotations

import sys

import torch

import mori.shmem as sh
from mori.ops import EpDispatchCombineConfig, EpDispatchCombineKernelType as K, EpDispatchCombineOp


def expect_error(exc_type, needle: str, fn, *args, **kwargs) -> None:
    try:
        fn(*args, **kwargs)
    except exc_type as exc:
        if needle not in str(exc):
            raise AssertionError(f"PE {sh.shmem_mype()}: error {exc!r} does not mention {needle!r}") from exc
        return
    raise AssertionError(f"PE {sh.shmem_mype()}: expected {exc_type.__name__} mentioning {needle!r}")


def round_trip(op: EpDispatchCombineOp, me: int, world: int, n: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed + me)
    cfg = op.config
    x = torch.randn(n, cfg.hidden_dim, generator=g).to(torch.bfloat16)
    w = torch.rand(n, cfg.num_experts_per_token, generator=g)
    idx = torch.rand(n, world * cfg.num_experts_per_rank, generator=g).argsort(1)[:, : cfg.num_experts_per_token]
    idx = idx.to(torch.int32)
    out, ow, _, oi, recv = op.dispatch(x, w, None, idx)
    total = int(recv[0])
    c, cw = op.combine(out[:total], ow[:total], idx)
    mult = torch.tensor([float(len({int(e) // cfg.num_experts_per_rank for e in row})) for row in idx.tolist()])
    assert torch.allclose(c[:n].float(), x.float() * mult[:, None], atol=1e-2, rtol=1e-2), f"PE {me}: round trip"


def dead_peer(me: int, world: int, base: dict) -> int:
    """The last PE leaves right after creating the op; the others' dispatch must fail naming it."""
    import os

    op = EpDispatchCombineOp(EpDispatchCombineConfig(**base))
    if me == world - 1:
        os._exit(0)
    x = torch.randn(4, 32).to(torch.bfloat16)
    idx = torch.full((4, 2), -1, dtype=torch.int32)
    idx[:, 0] = (world - 1) * 2
    expect_error(RuntimeError, f"PE {world - 1}", op.dispatch, x, torch.rand(4, 2), None, idx)
    print(f"PE {me}: dead peer reported", flush=True)
    os._exit(0)  # no finalize: a peer is gone


def main() -> int:
    sh.shmem_init()
    me, world = sh.shmem_mype(), sh.shmem_npes()
    base = dict(
        data_type=torch.bfloat16,
        rank=me,
        world_size=world,
        hidden_dim=32,
        scale_dim=0,
        scale_type_size=4,
        max_token_type_size=4,
        max_num_inp_token_per_rank=8,
        num_experts_per_rank=2,
        num_experts_per_token=2,
    )
    if "--dead-peer" in sys.argv:
        return dead_peer(me, world, base)

    # Config errors (local, before any collective step).
    expect_error(
        ValueError,
        "rank",
        EpDispatchCombineOp,
        EpDispatchCombineConfig(**{**base, "rank": (me + 1) % world})
        if world > 1
        else EpDispatchCombineConfig(**{**base, "rank": 5}),
    )
    expect_error(
        ValueError,
        "num_experts_per_token",
        EpDispatchCombineOp,
        EpDispatchCombineConfig(**{**base, "num_experts_per_token": 99}),
    )
    expect_error(
        ValueError, "quant_type", EpDispatchCombineOp, EpDispatchCombineConfig(**{**base, "quant_type": "int3"})
    )

    # Fields and products of fields that overflow int32 name them (issue 13 item 6: the
    # num_experts() bound used to wrap and read "1..-2147483648").
    expect_error(
        ValueError,
        "num_experts_per_rank = 1099511627776 does not fit int32",
        EpDispatchCombineOp,
        EpDispatchCombineConfig(**{**base, "num_experts_per_rank": 2**40}),
    )
    if world > 1:
        expect_error(
            ValueError,
            "world_size * num_experts_per_rank",
            EpDispatchCombineOp,
            EpDispatchCombineConfig(**{**base, "num_experts_per_rank": 2**31 // world + 1}),
        )
    expect_error(
        ValueError,
        "hidden_dim * max_token_type_size",
        EpDispatchCombineOp,
        EpDispatchCombineConfig(**{**base, "hidden_dim": 2**29, "max_token_type_size": 8}),
    )
    expect_error(
        ValueError,
        "scale_dim * scale_type_size",
        EpDispatchCombineOp,
        EpDispatchCombineConfig(**{**base, "scale_dim": 2**30, "scale_type_size": 4}),
    )
    wide = 2 * world * world + 1
    expect_error(
        ValueError,
        "max_num_inp_token_per_rank * num_experts_per_token",
        EpDispatchCombineOp,
        EpDispatchCombineConfig(
            **{
                **base,
                "max_num_inp_token_per_rank": (2**31 - 1) // (world * world),
                "num_experts_per_rank": wide,
                "num_experts_per_token": wide,
            }
        ),
    )
    # MORI's native classes from mori.cpp: the handle allocates (collectively) and checks its config.
    import mori.cpp

    native_cfg = mori.cpp.EpDispatchCombineConfig(
        rank=me,
        world_size=world,
        hidden_dim=32,
        scale_type_size=4,
        max_token_type_size=4,
        max_num_inp_token_per_rank=8,
        num_experts_per_rank=2,
        num_experts_per_token=2,
        warp_num_per_block=8,
        block_num=8,
    )
    handle = mori.cpp.EpDispatchCombineHandle(native_cfg)
    assert handle.config is native_cfg
    native_cfg.num_experts_per_token = 99
    expect_error(ValueError, "num_experts_per_token", mori.cpp.EpDispatchCombineHandle, native_cfg)
    del handle

    op = EpDispatchCombineOp(EpDispatchCombineConfig(**base))
    h, k, ne = 32, 2, world * 2
    x = torch.randn(4, h).to(torch.bfloat16)
    w = torch.rand(4, k)
    good = torch.tensor([[0, ne - 1]] * 4, dtype=torch.int32)

    # Dispatch argument errors: raised on this PE before anything is sent.
    expect_error(
        ValueError,
        "max_num_inp_token_per_rank",
        op.dispatch,
        torch.zeros(9, h, dtype=torch.bfloat16),
        torch.rand(9, k),
        None,
        torch.zeros(9, k, dtype=torch.int32),
    )
    bad = good.clone()
    bad[2, 1] = ne
    expect_error(ValueError, "indices[2, 1]", op.dispatch, x, w, None, bad)
    bad[2, 1] = -2
    expect_error(ValueError, "expected -1", op.dispatch, x, w, None, bad)
    expect_error(ValueError, "indices must be", op.dispatch, x, w, None, good[:3])
    expect_error(ValueError, "weights must be float32", op.dispatch, x, w.double(), None, good)
    expect_error(ValueError, "hidden", op.dispatch, torch.zeros(4, h + 1, dtype=torch.bfloat16), w, None, good)
    expect_error(ValueError, "not supported", op.dispatch, x.double(), w, None, good)
    # Combine before any dispatch.
    expect_error(RuntimeError, "no completed dispatch", op.combine, x, w, good)

    round_trip(op, me, world, 5, 1)

    # MORI issue #475: combine given the dispatch *output* indices (or any other routing).
    out, ow, _, oi, recv = op.dispatch(x, w, None, good)
    total = int(recv[0])
    if world > 1:  # with one PE the output routing is the input routing
        expect_error(ValueError, "#475", op.combine, out[:total], ow[:total], oi[:total])
    other = good.clone()
    other[0, 0] = 1
    expect_error(ValueError, "#475", op.combine, out[:total], ow[:total], other)
    if total:
        expect_error(ValueError, "rows", op.combine, out[: total - 1], ow[:total], good)
    op.combine(out[:total], ow[:total], good)  # the right call still works after the refusals

    round_trip(op, me, world, 8, 2)
    round_trip(op, me, world, 0, 3)

    # A receive buffer capped by max_total_recv_tokens: every PE sends all its tokens to PE 0.
    capped = EpDispatchCombineOp(EpDispatchCombineConfig(**{**base, "max_total_recv_tokens": 4 * world}))
    rows = capped.max_num_tokens_to_recv()
    assert rows == world * min(4, 8), rows
    flood = torch.zeros(8, k, dtype=torch.int32)
    flood[:, 1] = -1
    xs = torch.randn(8, h).to(torch.bfloat16)
    if world > 1:
        # PE 0 (whose buffer overflowed) and every PE whose rows were dropped raise; a PE whose
        # rows all fit completes normally.
        try:
            capped.dispatch(xs, torch.rand(8, k), None, flood)
            raised = False
        except ValueError as exc:
            assert "max_num_tokens_to_recv" in str(exc), exc
            raised = True
        assert raised or me != 0, "PE 0 received more rows than its capped buffer holds without an error"
        expect_error(RuntimeError, "no completed dispatch", capped.combine, xs, None, flood) if raised else None
        sh.shmem_barrier_all()
    # ... and the op is usable again afterwards.
    round_trip(capped, me, world, 1, 4)

    # AsyncLL halves in the wrong order.
    alt = EpDispatchCombineOp(EpDispatchCombineConfig(**{**base, "kernel_type": K.AsyncLL}))
    expect_error(RuntimeError, "no dispatch_send in flight", alt.dispatch_recv)
    expect_error(ValueError, "only supports AsyncLL", op.dispatch_recv)
    alt.dispatch_send(x, w, None, good)
    expect_error(RuntimeError, "dispatch_recv", alt.combine, x, w, good)
    alt.dispatch_recv()

    del alt, capped, op
    sh.shmem_barrier_all()
    if me == 0:
        print(f"ep errors ok on {world} PEs")
    sh.shmem_finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
