# SPDX-License-Identifier: MIT
"""CUDA IntraNode kernels on 2+ NVLink GPUs (one process, one EP rank per GPU), checked with
MORI's method: every rank's inputs from one seed, dispatch bit-exact, combine = input x unique
destination ranks; then the same through CUDA graphs captured once and replayed."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from mori import _C  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                       reason="needs 2 CUDA GPUs"),
    pytest.mark.skipif(not getattr(_C.ep, "cuda_built", False), reason="MORI built without CUDA"),
]


def _inputs(world, n_max, hidden, experts, topk, dtype, scale_dim, seed):
    g = torch.Generator().manual_seed(seed)
    data = []
    for r in range(world):
        n = int(torch.randint(0, n_max + 1, (1,), generator=g)) if r else n_max
        idx = torch.rand(n, experts, generator=g).argsort(1)[:, :topk].to(torch.int32)
        idx[torch.rand(n, topk, generator=g) < 0.1] = -1
        x = (torch.randn(n, hidden, generator=g) * 2).to(dtype)
        w = torch.rand(n, topk, generator=g)
        s = torch.randn(n, scale_dim, generator=g)
        data.append((x, w, s, idx))
    return data


def _check(group, data, dtype, comb_dtype, scale_dim, epr):
    world, max_send = group.world, group.max_send
    for r in range(world):
        out, w, s, i, n = group.outputs(r, dtype, torch.float32)
        total = int(n.item())
        pos = group.src_token_pos(r)[:total].long().cpu()
        expected = sorted(q * max_send + t for q in range(world) for t, row in enumerate(data[q][3].tolist())
                          if r in {e // epr for e in row if e >= 0})
        assert total == len(expected) and sorted(pos.tolist()) == expected, f"rank {r}: source positions"
        src_r, src_t = pos // max_send, pos % max_send
        ref_x = torch.stack([data[q][0][t] for q, t in zip(src_r.tolist(), src_t.tolist())]) if total else None
        if total:
            assert torch.equal(out[:total].cpu().view(torch.uint8), ref_x.view(torch.uint8)), f"rank {r}: payload"
            ref_w = torch.stack([data[q][1][t] for q, t in zip(src_r.tolist(), src_t.tolist())])
            assert torch.equal(w[:total].cpu(), ref_w), f"rank {r}: weights"
            ref_i = torch.stack([data[q][3][t] for q, t in zip(src_r.tolist(), src_t.tolist())])
            assert torch.equal(i[:total].cpu(), ref_i), f"rank {r}: indices"
            if scale_dim:
                ref_s = torch.stack([data[q][2][t] for q, t in zip(src_r.tolist(), src_t.tolist())])
                assert torch.equal(s[:total].cpu(), ref_s), f"rank {r}: scales"
    for r in range(world):
        x, wt, _, idx = data[r]
        c, cw = group.combine_outputs(r, comb_dtype)
        mult = torch.tensor([float(len({e // epr for e in row if e >= 0})) for row in idx.tolist()])
        n = x.shape[0]
        ref = x.to(comb_dtype).float() * mult[:, None]
        assert torch.allclose(c[:n].cpu().float(), ref, atol=1e-2, rtol=1e-2), f"rank {r}: combine"
        assert torch.allclose(cw[:n].cpu(), wt * mult[:, None], rtol=1e-6, atol=1e-6), f"rank {r}: combine weights"


@pytest.mark.parametrize("dtype,hidden,scale_dim", [(torch.bfloat16, 7168, 0), (torch.float8_e4m3fn, 7168, 56),
                                                    (torch.float32, 256, 4), (torch.bfloat16, 136, 0)])
def test_dispatch_combine_and_graph_replay(dtype, hidden, scale_dim):
    from mori.ep.gpu_group import GpuEpGroup

    world = 2
    topk, epr, max_inp = 8, 128 // world, 256
    comb_dtype = torch.float32 if dtype == torch.float32 else torch.bfloat16
    group = GpuEpGroup(list(range(world)), hidden, topk, epr, max_inp, scale_dim=scale_dim, scale_type_size=4,
                       max_token_type_size=4)
    devs = group.devices

    def run_round(tensors):
        for r in range(world):
            x, w, s, idx = tensors[r]
            group.dispatch_send(r, x, w, s, idx)
        for r in range(world):
            group.dispatch_recv(r)
        for r in range(world):
            out, w_out, _, _, n = group.outputs(r, dtype)
            # Identity expert over every row (only the first recv_num_token are sent back).
            exp = expert_bufs[r]
            exp.copy_(out.to(comb_dtype))
            group.combine_send(r, exp, w_out)
        for r in range(world):
            group.combine_recv(r, comb_dtype, tensors[r][0].shape[0])

    expert_bufs = [torch.empty(group.max_recv, hidden, dtype=comb_dtype, device=d) for d in devs]
    for rnd in range(3):  # several rounds: parity counters and signals reset themselves
        data = _inputs(world, max_inp, hidden, world * epr, topk, dtype, scale_dim, 100 + rnd)
        dev_data = [[t.to(devs[r]) for t in data[r]] for r in range(world)]
        run_round(dev_data)
        for d in devs:
            torch.cuda.synchronize(d)
        _check(group, data, dtype, comb_dtype, scale_dim, epr)

    # CUDA graphs: capture each rank's dispatch + combine once (fixed shapes), replay with new data.
    data = _inputs(world, max_inp, hidden, world * epr, topk, dtype, scale_dim, 200)
    fixed = [[t.to(devs[r]) for t in data[r]] for r in range(world)]
    graphs, streams = [], []
    for r in range(world):
        with torch.cuda.device(devs[r]):
            st = torch.cuda.Stream(devs[r])
            streams.append(st)
            gr = torch.cuda.CUDAGraph()
            with torch.cuda.graph(gr, stream=st):
                x, w, s, idx = fixed[r]
                group.dispatch_send(r, x, w, s, idx, stream=st)
                group.dispatch_recv(r, stream=st)
                out, w_out, _, _, _ = group.outputs(r, dtype)
                expert_bufs[r].copy_(out.to(comb_dtype))
                group.combine_send(r, expert_bufs[r], w_out, stream=st)
                group.combine_recv(r, comb_dtype, x.shape[0], stream=st)
            graphs.append(gr)
    for rnd in range(3):
        data = _inputs(world, max_inp, hidden, world * epr, topk, dtype, scale_dim, 300 + rnd)
        for r in range(world):  # same token counts as captured: only values and routing change
            n = fixed[r][0].shape[0]
            x, w, s, idx = data[r]
            if x.shape[0] < n:
                pad = n - x.shape[0]
                x = torch.cat([x, x[:0].new_zeros(pad, hidden)])
                w = torch.cat([w, torch.zeros(pad, topk)])
                s = torch.cat([s, torch.zeros(pad, scale_dim)])
                idx = torch.cat([idx, torch.full((pad, topk), -1, dtype=torch.int32)])
            data[r] = (x[:n], w[:n], s[:n], idx[:n])
            for dst, src in zip(fixed[r], data[r]):
                dst.copy_(src.to(devs[r]))
        for d in devs:
            torch.cuda.synchronize(d)
        for r in range(world):
            graphs[r].replay()
        for d in devs:
            torch.cuda.synchronize(d)
        _check(group, data, dtype, comb_dtype, scale_dim, epr)
