# SPDX-License-Identifier: MIT
"""Routing handles on CPU tensors (IntraNode): several layers dispatched with
return_routing=True, then combined out of order with routing=h; a handle replayed by
dispatch(routing=h) puts the rows where they were (IntraNode and InterNodeV1); handles rebuilt
from their tensors; errors.

    mori run -n 4 python ep_routing.py

Every PE builds every PE's inputs from one seed; combines are checked exactly (float32, sums
in the kernel's order of destination ranks).
"""

from __future__ import annotations

import dataclasses
import sys

import torch

import mori.shmem as sh
from mori.ops import EpDispatchCombineConfig, EpDispatchCombineKernelType as K, EpDispatchCombineOp
from mori.ops import EpDispatchRoutingHandle

EPR, TOPK, MAX_TOK, HIDDEN = 3, 4, 20, 48


def fail(what: str) -> None:
    raise AssertionError(f"PE {sh.shmem_mype()}: {what}")


def expect_error(exc_type, needle: str, fn, *args, **kwargs) -> None:
    try:
        fn(*args, **kwargs)
    except exc_type as exc:
        if needle not in str(exc):
            fail(f"{exc!r} does not mention {needle!r}")
        return
    fail(f"expected {exc_type.__name__} mentioning {needle!r}")


def dests(row: list[int]) -> list[int]:
    seen: list[int] = []
    for e in row:
        if e >= 0 and e // EPR not in seen:
            seen.append(e // EPR)
    return seen


def layer(world: int, seed: int):
    """Every PE's (x, w, idx) of one layer."""
    g = torch.Generator().manual_seed(seed)
    data = []
    for r in range(world):
        n = int(torch.randint(1, MAX_TOK + 1, (1,), generator=g))
        idx = torch.rand(n, world * EPR, generator=g).argsort(1)[:, :TOPK].to(torch.int32)
        idx[torch.rand(n, TOPK, generator=g) < 0.2] = -1
        data.append((torch.randn(n, HIDDEN, generator=g), torch.rand(n, TOPK, generator=g), idx))
    return data


def expert(rows: torch.Tensor, me: int, tag: int) -> torch.Tensor:
    """This PE's expert: a per-PE, per-layer factor (destinations send back different rows)."""
    return rows * (1 + me + 10 * tag)


def check_combine(c, cw, x, w, idx, tag: int, what: str, exact: bool = True) -> None:
    n = x.shape[0]
    want = torch.zeros(n, HIDDEN)
    want_w = torch.zeros(n, TOPK)
    for t, row in enumerate(idx.tolist()):
        for r in dests(row):  # the kernel's order
            want[t] += expert(x[t], r, tag)
            want_w[t] += w[t]
    if not (torch.equal(c[:n], want) if exact else torch.allclose(c[:n], want, rtol=1e-5, atol=1e-5)):
        fail(f"{what}: combined rows differ (max err {(c[:n] - want).abs().max().item():.3g})")
    if cw is None or not torch.allclose(cw[:n], want_w, rtol=1e-6, atol=1e-6):
        fail(f"{what}: combined weights differ")


def main() -> int:
    sh.shmem_init()
    me, world = sh.shmem_mype(), sh.shmem_npes()
    cfg = EpDispatchCombineConfig(
        data_type=torch.float32,
        rank=me,
        world_size=world,
        hidden_dim=HIDDEN,
        scale_dim=0,
        scale_type_size=4,
        max_token_type_size=4,
        max_num_inp_token_per_rank=MAX_TOK,
        num_experts_per_rank=EPR,
        num_experts_per_token=TOPK,
    )
    # InterNodeV1 (nodes of world / 2 PEs): handles made and combined out of order; its sums go
    # through each node's forwarder first, so they are compared within fp32 rounding.
    v1 = EpDispatchCombineOp(
        EpDispatchCombineConfig(**{**cfg.__dict__, "kernel_type": K.InterNodeV1, "gpu_per_node": max(1, world // 2)})
    )
    v1_layers = [layer(world, 200 + i) for i in range(3)]
    v1_handles, v1_rows = [], []
    for tag, data in enumerate(v1_layers):
        x, w, idx = data[me]
        out, ow, _, _, recv, h = v1.dispatch(x, w, None, idx, return_routing=True)
        total = int(recv[0])
        v1_rows.append((expert(out[:total], me, tag).clone(), ow[:total].clone()))
        v1_handles.append(h)
    for tag in (2, 0, 1):
        x, w, idx = v1_layers[tag][me]
        c, cw = v1.combine(v1_rows[tag][0], v1_rows[tag][1], idx, routing=v1_handles[tag])
        check_combine(c, cw, x, w, idx, tag, f"InterNodeV1 combine of layer {tag} by its handle", exact=False)
    # Replays, out of order, with every handle still alive: each row lands where the handle's
    # dispatch put it (through the same forwarders and their slots), bit for bit. Integer-valued
    # payloads make the forwarders' partial sums exact, so the combines are compared exactly.
    for tag in (1, 0):
        x, w, idx = v1_layers[tag][me]
        h = v1_handles[tag]
        payloads = [
            torch.randint(
                -8, 9, v1_layers[tag][r][0].shape, generator=torch.Generator().manual_seed(300 + 10 * tag + r)
            ).float()
            for r in range(world)
        ]
        w2 = torch.rand(w.shape, generator=torch.Generator().manual_seed(400 + tag + me))
        out, ow, _, _, recv = v1.dispatch(payloads[me], w2, None, idx, routing=h)
        if recv is not h.total_recv_token_num:
            fail("an InterNodeV1 replay returns the handle's total_recv_token_num")
        total = int(recv[0])
        pos = h.disp_tok_id_to_src_tok_id_local[:total]
        if not torch.equal(v1.get_dispatch_src_token_pos(), pos):
            fail(f"the InterNodeV1 replay of layer {tag} placed rows elsewhere than the handle's dispatch")
        src_r, src_t = v1.decode_send_flat_idx(pos.long())
        if not torch.equal(out[:total], torch.stack([payloads[a][b] for a, b in zip(src_r.tolist(), src_t.tolist())])):
            fail(f"InterNodeV1 replayed rows of layer {tag} differ from the new payloads at the handle's positions")
        c, cw = v1.combine(expert(out[:total], me, tag).clone(), ow[:total].clone(), idx, routing=h)
        check_combine(c, cw, payloads[me], w2, idx, tag, f"InterNodeV1 combine of the replay of layer {tag}")
    x, w, idx = v1_layers[2][me]  # untouched by the replays
    c, cw = v1.combine(v1_rows[2][0], v1_rows[2][1], idx, routing=v1_handles[2])
    check_combine(c, cw, x, w, idx, 2, "InterNodeV1 combine of layer 2 after the replays", exact=False)
    x, w, idx = v1_layers[0][me]
    nodes = world // max(1, world // 2)
    legacy = EpDispatchRoutingHandle.from_tensors(  # a handle without the forward slots
        (v1_handles[0].disp_dest_tok_id_map, v1_handles[0].inter_node_disp_dest_tok_id_map[: nodes * (1 + 2 * MAX_TOK)])
        + v1_handles[0].tensors()[2:],
        cur_rank_num_token=x.shape[0],
    )
    expect_error(ValueError, "inter_node_disp_dest_tok_id_map", v1.dispatch, x, w, None, idx, routing=legacy)
    # PE 0 replays a handle whose forwarding inbox is not the one that arrives: it delivers nothing
    # from that node and says so after the rounds; the others finish (no hang), those short of its
    # rows say so too.
    inbox = v1_handles[0].inter_node_disp_dest_tok_id_map.clone()
    if me == 0:
        other = 1  # PE 0 is on node 0
        if int(inbox[other]) > 0:
            inbox[nodes + other * MAX_TOK * 2 + 1] ^= 1  # the first entry's local-rank mask
        else:
            inbox[other] = 1
    tampered = dataclasses.replace(v1_handles[0], inter_node_disp_dest_tok_id_map=inbox)
    try:
        v1.dispatch(x, w, None, idx, routing=tampered)
        if me == 0:
            fail("a replay whose forwarding inbox differs from the handle's must raise")
    except (ValueError, RuntimeError) as exc:
        if me == 0 and "differ from the routing handle's" not in str(exc):
            fail(f"the forwarder's error does not say the inbox differs: {exc}")
        if me != 0 and "replaying the routing handle delivered" not in str(exc):
            fail(f"unexpected error on a receiver: {exc}")
    sh.shmem_barrier_all()
    del v1
    if "--hosts" in sys.argv:  # PEs on several hosts: IntraNode (below) needs every peer mapped
        sh.shmem_barrier_all()
        print(f"PE {me}/{world}: routing handles ok (InterNodeV1)", flush=True)
        sh.shmem_finalize()
        return 0
    op = EpDispatchCombineOp(cfg)
    layers = [layer(world, 100 + i) for i in range(3)]
    handles, expert_rows, expert_w, positions = [], [], [], []
    for tag, data in enumerate(layers):
        x, w, idx = data[me]
        out, ow, _, _, recv, h = op.dispatch(x, w, None, idx, return_routing=True)
        if not isinstance(h, EpDispatchRoutingHandle) or recv is not h.total_recv_token_num:
            fail("return_routing=True must return (..., handle.total_recv_token_num, handle)")
        total = int(recv[0])
        if h.cur_rank_num_token != x.shape[0]:
            fail(f"handle cur_rank_num_token {h.cur_rank_num_token} != {x.shape[0]}")
        pos = op.get_dispatch_src_token_pos()
        if not torch.equal(h.disp_tok_id_to_src_tok_id_local[:total], pos):
            fail("the handle's source positions differ from the dispatch's")
        positions.append(pos)
        # The expert runs now; its outputs are kept (the next dispatch overwrites the views).
        expert_rows.append(expert(out[:total], me, tag).clone())
        expert_w.append(ow[:total].clone())
        handles.append(h)
    # Combined out of order, several handles alive.
    for tag in (1, 2, 0):
        x, w, idx = layers[tag][me]
        c, cw = op.combine(expert_rows[tag], expert_w[tag], idx, routing=handles[tag])
        check_combine(c, cw, x, w, idx, tag, f"combine of layer {tag} by its handle")
    # Replay layer 0's routing with new payloads: the rows land where they did.
    x, w, idx = layers[0][me]
    g = torch.Generator().manual_seed(7 + me)
    x2, w2 = torch.randn(x.shape, generator=g), torch.rand(w.shape, generator=g)
    all_x2 = []
    for r in range(world):  # every PE's new payload (same seeds everywhere)
        gr = torch.Generator().manual_seed(7 + r)
        all_x2.append(torch.randn(layers[0][r][0].shape, generator=gr))
    out, ow, _, _, recv = op.dispatch(x2, w2, None, idx, routing=handles[0])
    if recv is not handles[0].total_recv_token_num:
        fail("a replay returns the handle's total_recv_token_num")
    total = int(recv[0])
    if not torch.equal(op.get_dispatch_src_token_pos(), positions[0]):
        fail("the replay placed rows elsewhere than the handle's dispatch")
    src_r, src_t = op.decode_send_flat_idx(positions[0].long())
    want_rows = torch.stack([all_x2[a][b] for a, b in zip(src_r.tolist(), src_t.tolist())])
    if not torch.equal(out[:total], want_rows):
        fail("replayed rows differ from the new payloads at the handle's positions")
    c, cw = op.combine(expert(out[:total], me, 0).clone(), ow[:total].clone(), idx, routing=handles[0])
    check_combine(c, cw, x2, w2, idx, 0, "combine of the replay")
    # A handle rebuilt from its tensors (MORI's from_tensors) combines as well; layer 2 still alive.
    x, w, idx = layers[2][me]
    rebuilt = EpDispatchRoutingHandle.from_tensors(handles[2].tensors(), cur_rank_num_token=x.shape[0])
    c, cw = op.combine(expert_rows[2], expert_w[2], idx, routing=rebuilt)
    check_combine(c, cw, x, w, idx, 2, "combine by a rebuilt handle")
    # Errors, each before anything is sent.
    x, w, idx = layers[1][me]
    expect_error(ValueError, "not both", op.dispatch, x, w, None, idx, routing=handles[1], return_routing=True)
    other = idx.clone()
    other[0, 0] = (int(other[0, 0]) + 1) % (world * EPR)
    expect_error(ValueError, "indices differ", op.dispatch, x, w, None, other, routing=handles[1])
    expect_error(
        ValueError, "cur_rank_num_token", op.combine, expert_rows[1], expert_w[1], idx[:-1], routing=handles[1]
    )
    expect_error(
        ValueError,
        "cur_rank_num_token <= 0",
        op.combine,
        expert_rows[1],
        expert_w[1],
        idx,
        routing=EpDispatchRoutingHandle.from_tensors(handles[1].tensors()),
    )
    bad = EpDispatchRoutingHandle.from_tensors(
        (handles[1].disp_dest_tok_id_map.int(),) + handles[1].tensors()[1:], cur_rank_num_token=x.shape[0]
    )
    expect_error(ValueError, "disp_dest_tok_id_map", op.combine, expert_rows[1], expert_w[1], idx, routing=bad)
    # The op without handles still combines its last dispatch.
    out, ow, _, _, recv = op.dispatch(x, w, None, idx)
    c, cw = op.combine(expert(out[: int(recv[0])], me, 1), ow[: int(recv[0])], idx)
    check_combine(c, cw, x, w, idx, 1, "plain combine after handles")
    # Kernel types without handles here: MORI's NotImplementedError.
    ll = EpDispatchCombineOp(EpDispatchCombineConfig(**{**cfg.__dict__, "kernel_type": K.InterNodeV1LL}))
    expect_error(NotImplementedError, "routing handle", ll.dispatch, x, w, None, idx, return_routing=True)
    out, ow, _, _, recv = ll.dispatch(x, w, None, idx)
    expect_error(
        NotImplementedError,
        "routing handle",
        ll.combine,
        out[: int(recv[0])],
        ow[: int(recv[0])],
        idx,
        routing=handles[1],
    )
    ll.combine(out[: int(recv[0])], ow[: int(recv[0])], idx)
    del ll, op
    sh.shmem_barrier_all()
    print(f"PE {me}/{world}: routing handles ok", flush=True)
    sh.shmem_finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
