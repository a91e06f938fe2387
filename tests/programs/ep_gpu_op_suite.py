# SPDX-License-Identifier: MIT
"""EpDispatchCombineOp on CUDA tensors, one process per GPU (the vLLM/SGLang way):

    mori run -n 2 python ep_gpu_op_suite.py [check ...]     # default: every check

Each PE binds GPU LOCAL_RANK through torch before shmem init. MORI's method: every PE
seeds the same generator and builds all PEs' inputs, so it can check its own outputs
exactly (dispatch bit-exact; combine = input x unique destination ranks). Prints
"PASS <check>" per check; exits non-zero on the first failure.
"""

from __future__ import annotations

import os
import sys

import torch

LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))
torch.cuda.set_device(LOCAL_RANK % torch.cuda.device_count())  # PEs may share GPUs (tests/harness.py)

import mori  # noqa: E402
import mori.shmem as sh  # noqa: E402
from mori.ops import EpDispatchCombineConfig, EpDispatchCombineKernelType, EpDispatchCombineOp  # noqa: E402

KT = EpDispatchCombineKernelType
DEV = torch.device("cuda", torch.cuda.current_device())


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(f"PE {sh.shmem_mype()}: {what}")


def make_op(dtype, hidden, scale_dim=0, kernel=KT.IntraNode, external=True, max_inp=128, topk=8, epr=16, quant="none"):
    cfg = EpDispatchCombineConfig(
        data_type=dtype,
        rank=sh.shmem_mype(),
        world_size=sh.shmem_npes(),
        hidden_dim=hidden,
        scale_dim=scale_dim,
        scale_type_size=4,
        max_token_type_size=4,
        max_num_inp_token_per_rank=max_inp,
        num_experts_per_rank=epr,
        num_experts_per_token=topk,
        use_external_inp_buf=external,
        kernel_type=kernel,
        quant_type=quant,
    )
    return EpDispatchCombineOp(cfg)


def inputs(op, dtype, seed, n_max=None, pattern="random"):
    """Every PE's (x, w, scales, idx) on the CPU, from one seed."""
    cfg = op.config
    world, k, experts = cfg.world_size, cfg.num_experts_per_token, cfg.world_size * cfg.num_experts_per_rank
    n_max = n_max or cfg.max_num_inp_token_per_rank
    g = torch.Generator().manual_seed(seed)
    data = []
    for r in range(world):
        n = n_max if r == 0 or pattern == "max" else int(torch.randint(0, n_max + 1, (1,), generator=g))
        idx = torch.rand(n, experts, generator=g).argsort(1)[:, :k].to(torch.int32)
        if pattern == "one_rank":
            idx = torch.rand(n, cfg.num_experts_per_rank, generator=g).argsort(1)[:, :k].to(torch.int32)
        idx[torch.rand(n, k, generator=g) < 0.1] = -1
        x = (torch.randn(n, cfg.hidden_dim, generator=g) * 2).to(dtype)
        w = torch.rand(n, k, generator=g)
        s = torch.randn(n, cfg.scale_dim, generator=g)
        data.append((x, w, s, idx))
    return data


def dests(row, epr):
    return {e // epr for e in row if e >= 0}


def check_dispatch(op, data, outs, with_scales):
    cfg, me = op.config, sh.shmem_mype()
    out, ow, os_, oi, recv = outs
    expect(
        recv.device == DEV and recv.dtype == torch.int32 and recv.shape == (1,), "recv_num_token is int32[1] on the GPU"
    )
    expect(out.shape[0] == op.max_num_tokens_to_recv() and out.device == DEV, "dispatch output rows/device")
    total = int(recv.item())
    pos = op.get_dispatch_src_token_pos().long().cpu()
    stride = op.max_num_tokens_to_send()
    expected = sorted(
        q * stride + t
        for q in range(cfg.world_size)
        for t, row in enumerate(data[q][3].tolist())
        if me in dests(row, cfg.num_experts_per_rank)
    )
    expect(total == len(expected), f"recv_num_token {total} != {len(expected)}")
    expect(sorted(pos.tolist()) == expected, "source positions")
    if not total:
        return
    src_r, src_t = op.decode_send_flat_idx(pos)
    pick = lambda j: torch.stack([data[q][j][t] for q, t in zip(src_r.tolist(), src_t.tolist())])  # noqa: E731
    expect(torch.equal(out[:total].cpu().view(torch.uint8), pick(0).view(torch.uint8)), "payload bit-exact")
    expect(torch.equal(ow[:total].cpu(), pick(1)), "weights")
    expect(torch.equal(oi[:total].cpu(), pick(3)), "indices")
    if with_scales:
        expect(torch.equal(os_[:total].cpu(), pick(2)), "scales")


def check_combine(op, data, comb, comb_dtype):
    cfg, me = op.config, sh.shmem_mype()
    x, w, _, idx = data[me]
    c, cw = comb
    n = x.shape[0]
    mult = torch.tensor([float(len(dests(row, cfg.num_experts_per_rank))) for row in idx.tolist()])
    ref = x.to(comb_dtype).float() * mult[:, None]
    expect(torch.allclose(c[:n].cpu().float(), ref, atol=1e-2, rtol=1e-2), "combine = input x unique ranks")
    expect(torch.allclose(cw[:n].cpu(), w * mult[:, None], rtol=1e-6, atol=1e-6), "combine weights")


def to_dev(t):
    return t.to(DEV)


def one_round(op, data, dtype, comb_dtype, scale_dim, zero_copy=False, split=False, seed_tag=""):
    me = sh.shmem_mype()
    x, w, s, idx = (to_dev(t) for t in data[me])
    scales = s if scale_dim else None
    if split:
        outs = op.dispatch_send(x, w, scales, idx)
        op.dispatch_recv()
    else:
        outs = op.dispatch(x, w, scales, idx, block_num=16, warp_per_block=8)
    check_dispatch(op, data, outs, bool(scale_dim))
    total = int(outs[4].item())
    expert = outs[0][:total].to(comb_dtype)
    if zero_copy:
        reg = op.get_registered_combine_input_buffer(comb_dtype)
        expect(reg.device == DEV, "registered combine buffer is on the GPU")
        reg[:total].copy_(expert)
        expert = reg
    if split:
        comb = op.combine_send(expert, outs[1], idx)
        op.combine_recv()
    else:
        comb = op.combine(expert, outs[1], idx, block_num=16, warp_per_block=8)
    check_combine(op, data, comb, comb_dtype)


def check_dtypes():
    for kernel in (KT.IntraNode, KT.IntraNodeLL):
        for dtype, hidden, scale_dim in (
            (torch.bfloat16, 2048, 0),
            (torch.float8_e4m3fn, 7168, 56),
            (torch.float32, 256, 4),
            (torch.bfloat16, 136, 0),
        ):
            op = make_op(dtype, hidden, scale_dim, kernel)
            comb_dtype = torch.float32 if dtype == torch.float32 else torch.bfloat16
            for i, pattern in enumerate(("random", "max", "one_rank", "random")):
                one_round(op, inputs(op, dtype, 100 + i, pattern=pattern), dtype, comb_dtype, scale_dim)
            count = op.local_expert_count  # allocated with the op, on this PE's GPU
            expect(
                count.device == DEV and count.dtype == torch.int32 and not count.any(),
                "local_expert_count at construction",
            )
            count.fill_(-1)
            data = inputs(op, dtype, 7)
            x, w, s, idx = (to_dev(t) for t in data[sh.shmem_mype()])
            out = op.dispatch(x, w, s if scale_dim else None, idx, call_local_expert_count=True)
            total = int(out[4].item())
            local = out[3][:total].long().cpu() - sh.shmem_mype() * op.config.num_experts_per_rank
            local = local[(local >= 0) & (local < op.config.num_experts_per_rank)]
            ref = torch.bincount(local, minlength=op.config.num_experts_per_rank).to(torch.int32)
            expect(op.local_expert_count is count and torch.equal(count.cpu(), ref), "local_expert_count (in place)")
            standalone = torch.full_like(op.local_expert_count, -1)
            mori.ops.launch_local_expert_count(op.config, out[3].data_ptr(), out[4].data_ptr(), standalone.data_ptr())
            expect(torch.equal(standalone.cpu(), ref), "launch_local_expert_count on device addresses")
            op.combine(out[0].to(comb_dtype), out[1], idx)  # keep both PEs in step
            torch.cuda.synchronize()
            print(f"PASS dtypes {kernel.name} {dtype} hidden={hidden} scale_dim={scale_dim}", flush=True)


def check_zero_copy():
    op = make_op(torch.bfloat16, 2048, external=False)
    for i in range(3):
        one_round(op, inputs(op, torch.bfloat16, 300 + i), torch.bfloat16, torch.bfloat16, 0, zero_copy=True)
    # PEs may mix the registered buffer and an external input within one combine.
    me = sh.shmem_mype()
    for i in range(2):
        one_round(op, inputs(op, torch.bfloat16, 310 + i), torch.bfloat16, torch.bfloat16, 0, zero_copy=(me % 2 == i))
    print("PASS zero_copy", flush=True)


def check_async_ll():
    op = make_op(torch.float8_e4m3fn, 2048, scale_dim=16, kernel=KT.AsyncLL)
    for i in range(3):
        one_round(op, inputs(op, torch.float8_e4m3fn, 400 + i), torch.float8_e4m3fn, torch.bfloat16, 16, split=True)
    # SGLang's low-latency call: the count asked at dispatch_recv (and, ours, at dispatch_send).
    me = sh.shmem_mype()
    for i, at_send in enumerate((False, True)):
        data = inputs(op, torch.float8_e4m3fn, 410 + i)
        x, w, s, idx = (to_dev(t) for t in data[me])
        op.local_expert_count.fill_(-1)
        out = op.dispatch_send(x, w, s, idx, call_local_expert_count=at_send)
        op.dispatch_recv(call_local_expert_count=not at_send)
        total = int(out[4].item())
        local = out[3][:total].long().cpu() - me * op.config.num_experts_per_rank
        local = local[(local >= 0) & (local < op.config.num_experts_per_rank)]
        ref = torch.bincount(local, minlength=op.config.num_experts_per_rank).to(torch.int32)
        expect(torch.equal(op.local_expert_count.cpu(), ref), f"AsyncLL local_expert_count (asked at_send={at_send})")
        op.combine_send(out[0][:total].to(torch.bfloat16), out[1], idx)
        op.combine_recv()
    print("PASS async_ll", flush=True)


def check_fp8_cast():
    """quant_type fp8_direct_cast: rows from other PEs cross NVLink as e4m3 and are summed in
    fp32; IntraNode reads this PE's own rows from the input as they are, AsyncLL stages (and
    casts) them too."""
    me = sh.shmem_mype()
    for kernel, comb_dtype in (
        (KT.IntraNode, torch.bfloat16),
        (KT.AsyncLL, torch.float32),
        (KT.IntraNodeLL, torch.bfloat16),
    ):
        op = make_op(torch.bfloat16, 2048, kernel=kernel, quant="fp8_direct_cast")
        for i in range(2):
            data = inputs(op, torch.bfloat16, 800 + i)
            x, w, _, idx = (to_dev(t) for t in data[me])
            outs = op.dispatch(x, w, None, idx)
            if kernel == KT.AsyncLL:
                op.dispatch_recv()
            check_dispatch(op, data, outs, False)
            total = int(outs[4].item())
            c, cw = op.combine(outs[0][:total].to(comb_dtype), outs[1], idx)
            if kernel == KT.AsyncLL:
                op.combine_recv()
            xs, ws, idxs = data[me][0], data[me][1], data[me][3]
            epr = op.config.num_experts_per_rank
            ds = [dests(row, epr) for row in idxs.tolist()]
            own = torch.tensor([float(me in d) for d in ds])[:, None]
            remote = torch.tensor([float(len(d - {me})) for d in ds])[:, None]
            xf = xs.to(comb_dtype).float()
            xq = xf.to(torch.float8_e4m3fn).float()
            ref = (xq if kernel == KT.AsyncLL else xf) * own + xq * remote
            got = c[: xs.shape[0]].cpu().float()
            expect(
                torch.allclose(got, ref, atol=1e-2, rtol=1e-2),
                f"{kernel.name}: fp8 combine differs from the e4m3-rounded reference "
                f"(max err {(got - ref).abs().max()})",
            )
            if bool((remote > 0).any()):
                expect((got - xf * (own + remote)).abs().max() > 0.05, f"{kernel.name}: remote rows were not cast")
            expect(
                torch.allclose(cw[: xs.shape[0]].cpu(), ws * (own + remote), rtol=1e-6, atol=1e-6),
                f"{kernel.name}: weights",
            )
        torch.cuda.synchronize()
        print(f"PASS fp8_cast {kernel.name} {comb_dtype}", flush=True)


def check_blockwise():
    """quant_type fp8_blockwise and fp4_blockwise on CUDA (hidden 7168: blocks of
    ceil(7168 / MORI_FP8_COMBINE_SCALE_DIM) values, 128 by default, one fp32 scale each): rows that
    cross NVLink are quantized per block (e4m3, or packed e2m1) and summed in fp32; IntraNode reads
    this PE's own rows as they are, AsyncLL stages (and quantizes) them too. Checked against the
    torch model of the wire of tests/programs/ep_quant_combine.py (the CPU path's), and to differ
    from the unquantized sum; MORI's refusals (float32 input; fp4_blockwise on AsyncLL)."""
    from ep_quant_combine import blockwise_roundtrip

    me = sh.shmem_mype()
    allowed = {
        "fp8_blockwise": (KT.IntraNode, KT.IntraNodeLL, KT.AsyncLL),
        "fp4_blockwise": (KT.IntraNode, KT.IntraNodeLL),
    }
    for quant, kernels in allowed.items():
        fp4 = quant == "fp4_blockwise"
        for kernel in kernels:
            op = make_op(torch.bfloat16, 7168, kernel=kernel, quant=quant)
            for i in range(2):
                data = inputs(op, torch.bfloat16, 900 + i)
                x, w, _, idx = (to_dev(t) for t in data[me])
                outs = op.dispatch(x, w, None, idx)
                if kernel == KT.AsyncLL:
                    op.dispatch_recv()
                check_dispatch(op, data, outs, False)
                total = int(outs[4].item())
                if i == 0:  # MORI's refusal of a non-bf16 input, at combine
                    try:
                        op.combine(outs[0][:total].float(), outs[1], idx)
                        expect(False, f"{kernel.name}: {quant} accepted float32 input")
                    except ValueError as exc:
                        expect("only supports bf16" in str(exc), f"refusal text: {exc}")
                c, cw = op.combine(outs[0][:total], outs[1], idx)
                if kernel == KT.AsyncLL:
                    op.combine_recv()
                xs, ws, idxs = data[me][0], data[me][1], data[me][3]
                epr = op.config.num_experts_per_rank
                ds = [dests(row, epr) for row in idxs.tolist()]
                own = torch.tensor([float(me in d) for d in ds])[:, None]
                remote = torch.tensor([float(len(d - {me})) for d in ds])[:, None]
                xf = xs.float()
                xq = blockwise_roundtrip(xs, fp4=fp4) if xs.shape[0] else xf
                ref = (xq if kernel == KT.AsyncLL else xf) * own + xq * remote
                got = c[: xs.shape[0]].cpu().float()
                expect(
                    torch.allclose(got, ref, atol=2e-2, rtol=1e-2),
                    f"{kernel.name}: {quant} combine differs from the blockwise model "
                    f"(max err {(got - ref).abs().max()})",
                )
                if bool((remote > 0).any()):
                    expect(
                        (got - xf * (own + remote)).abs().max() > 1e-3,
                        f"{kernel.name}: {quant}: remote rows were not quantized",
                    )
                expect(
                    torch.allclose(cw[: xs.shape[0]].cpu(), ws * (own + remote), rtol=1e-6, atol=1e-6),
                    f"{kernel.name}: {quant}: weights",
                )
            torch.cuda.synchronize()
            print(f"PASS blockwise {quant} {kernel.name}", flush=True)
    # MORI refuses fp4_blockwise on AsyncLL: the op builds and dispatches, combine raises ValueError.
    op = make_op(torch.bfloat16, 7168, kernel=KT.AsyncLL, quant="fp4_blockwise")
    data = inputs(op, torch.bfloat16, 950)
    x, w, _, idx = (to_dev(t) for t in data[me])
    outs = op.dispatch(x, w, None, idx)
    op.dispatch_recv()
    total = int(outs[4].item())
    try:
        op.combine(outs[0][:total], outs[1], idx)
        expect(False, "fp4_blockwise on AsyncLL did not raise")
    except ValueError as exc:
        expect("fp4_blockwise" in str(exc), f"fp4 refusal text: {exc}")
    op2 = make_op(torch.bfloat16, 7168)  # keep every PE in step with a plain round
    one_round(op2, inputs(op2, torch.bfloat16, 951), torch.bfloat16, torch.bfloat16, 0)
    print("PASS blockwise refusals", flush=True)


def check_routing():
    """Routing handles on CUDA tensors (IntraNode): three layers dispatched with return_routing=True,
    their expert outputs kept, combined out of order by their handles; a plain combine of the last
    dispatch still works after them; a replay (dispatch(routing=h)) raises NotImplementedError."""
    me = sh.shmem_mype()
    op = make_op(torch.bfloat16, 2048)
    layers, handles, expert = [], [], []
    for tag in range(3):
        data = inputs(op, torch.bfloat16, 1000 + tag)
        x, w, _, idx = (to_dev(t) for t in data[me])
        out, ow, _, oi, recv, h = op.dispatch(x, w, None, idx, return_routing=True)
        expect(recv is h.total_recv_token_num and h.disp_dest_tok_id_map.is_cuda, "return_routing's handle")
        check_dispatch(op, data, (out, ow, None, oi, recv), False)
        total = int(recv.item())
        expert.append(((out[:total].float() * (1 + tag)).to(torch.bfloat16), ow[:total].clone()))
        layers.append(data)
        handles.append(h)
        # Peers' next dispatch writes this PE's receive buffers (no wait on the GPU, as in MORI):
        # every PE has taken its copies first.
        torch.cuda.synchronize()
        sh.shmem_barrier_all()
    for tag in (1, 0, 2):
        x, w, _, idx = (to_dev(t) for t in layers[tag][me])
        c, cw = op.combine(expert[tag][0], expert[tag][1], idx, routing=handles[tag])
        xs, ws, idxs = layers[tag][me][0], layers[tag][me][1], layers[tag][me][3]
        mult = torch.tensor([float(len(dests(row, op.config.num_experts_per_rank))) for row in idxs.tolist()])
        ref = (xs.float() * (1 + tag)).to(torch.bfloat16).float() * mult[:, None]
        expect(torch.allclose(c[: xs.shape[0]].cpu().float(), ref, atol=2e-2, rtol=1e-2), f"layer {tag} by its handle")
        expect(
            torch.allclose(cw[: xs.shape[0]].cpu(), ws * mult[:, None], rtol=1e-6, atol=1e-6), f"layer {tag} weights"
        )
    # The last dispatch (layer 2) is still the op's own layout.
    x, w, _, idx = (to_dev(t) for t in layers[2][me])
    c, _ = op.combine(expert[2][0], expert[2][1], idx)
    xs, idxs = layers[2][me][0], layers[2][me][3]
    mult = torch.tensor([float(len(dests(row, op.config.num_experts_per_rank))) for row in idxs.tolist()])
    ref = (xs.float() * 3).to(torch.bfloat16).float() * mult[:, None]
    expect(torch.allclose(c[: xs.shape[0]].cpu().float(), ref, atol=2e-2, rtol=1e-2), "plain combine after handles")
    # Replay layer 0's routing with new payloads: the same rows land in the same slots.
    torch.cuda.synchronize()
    sh.shmem_barrier_all()
    x0, w0, _, idx0 = layers[0][me]
    new = [(d[0].float() * -2).to(torch.bfloat16) for d in layers[0]]  # every PE's new payload
    h0 = handles[0]
    out, ow, _, oi, recv = op.dispatch(new[me].to(DEV), w0.to(DEV), None, idx0.to(DEV), routing=h0)
    expect(recv is h0.total_recv_token_num, "a replay returns the handle's total_recv_token_num")
    total = int(recv.item())
    pos = op.get_dispatch_src_token_pos().long().cpu()
    expect(torch.equal(pos, h0.disp_tok_id_to_src_tok_id_local[:total].long().cpu()), "replay: same slots")
    src_r, src_t = op.decode_send_flat_idx(pos)
    want = torch.stack([new[a][b] for a, b in zip(src_r.tolist(), src_t.tolist())]) if total else new[me][:0]
    expect(torch.equal(out[:total].cpu(), want), "replay: the new payloads at the handle's slots")
    c, _ = op.combine(out[:total], ow[:total], idx0.to(DEV), routing=h0)
    mult = torch.tensor([float(len(dests(row, op.config.num_experts_per_rank))) for row in idx0.tolist()])
    expect(
        torch.allclose(c[: x0.shape[0]].cpu().float(), new[me].float() * mult[:, None], atol=2e-2, rtol=1e-2),
        "combine of the replay",
    )
    torch.cuda.synchronize()
    print("PASS routing", flush=True)


def check_standard_moe():
    from ep_standard import standard_round

    me = sh.shmem_mype()
    for kernel in (KT.IntraNode, KT.AsyncLL):
        op = make_op(torch.bfloat16, 1024, kernel=kernel, epr=4, max_inp=64)
        for i in range(2):
            data = inputs(op, torch.bfloat16, 900 + i)
            standard_round(op, [d[0] for d in data], [d[3] for d in data], me, DEV)
        torch.cuda.synchronize()
        print(f"PASS standard_moe {kernel.name}", flush=True)


def check_graph():
    me = sh.shmem_mype()
    op = make_op(torch.bfloat16, 2048, max_inp=96)
    n = 96
    data = inputs(op, torch.bfloat16, 500, pattern="max")
    sx, sw, _, sidx = (to_dev(t) for t in data[me])

    def step():
        outs = op.dispatch(sx, sw, None, sidx, block_num=16, warp_per_block=8)
        comb = op.combine(outs[0], outs[1], sidx, block_num=16, warp_per_block=8)
        return outs, comb

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()  # warm-up (views cached, launch path exercised) outside the capture
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    sh.shmem_barrier_all()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs, comb = step()
    for i in range(4):
        data = inputs(op, torch.bfloat16, 600 + i, pattern="max")
        x, w, _, idx = data[me]
        expect(x.shape[0] == n, "graph inputs keep their shape")
        sx.copy_(x)
        sw.copy_(w)
        sidx.copy_(idx)
        graph.replay()
        torch.cuda.synchronize()
        check_dispatch(op, data, outs, False)
        check_combine(op, data, comb, torch.bfloat16)
        sh.shmem_barrier_all()  # nobody overwrites static inputs a peer's replay may still read
    print("PASS graph_replay", flush=True)


def check_fp4_rows():
    """float4_e2m1fn_x2 rows dispatched with float8_e8m0fnu scales, combined on CUDA for every GPU
    kernel type (IntraNode with an external and a registered input, IntraNodeLL, AsyncLL): summed
    in fp32 and rounded back to e2m1. Compared bit for bit with the CPU path (the same op, the same
    inputs on CPU tensors) and with the torch model of tests/programs/ep_quant_combine.py."""
    from ep_quant_combine import E2M1, to_e2m1

    fp4, e8m0 = torch.float4_e2m1fn_x2, torch.float8_e8m0fnu
    me, world = sh.shmem_mype(), sh.shmem_npes()
    values, k, epr, max_tok = 7168, 8, 16, 64
    packed, scale_dim = values // 2, values // 32
    cases = ((KT.IntraNode, True), (KT.IntraNode, False), (KT.IntraNodeLL, True), (KT.AsyncLL, True))
    for case, (kernel, external) in enumerate(cases):
        cfg = EpDispatchCombineConfig(
            data_type=fp4,
            rank=me,
            world_size=world,
            hidden_dim=packed,
            scale_dim=scale_dim,
            scale_type_size=1,
            max_token_type_size=1,
            max_num_inp_token_per_rank=max_tok,
            num_experts_per_rank=epr,
            num_experts_per_token=k,
            use_external_inp_buf=external,
            kernel_type=kernel,
        )
        op = EpDispatchCombineOp(cfg)
        split = kernel == KT.AsyncLL
        for rnd in range(2):
            g = torch.Generator().manual_seed(900 + 10 * case + rnd)
            data = []
            for r in range(world):
                n = max_tok if r == 0 else int(torch.randint(0, max_tok + 1, (1,), generator=g))
                idx = torch.rand(n, world * epr, generator=g).argsort(1)[:, :k].to(torch.int32)
                idx[torch.rand(n, k, generator=g) < 0.1] = -1
                nib = torch.randint(0, 16, (n, values), generator=g, dtype=torch.uint8)
                x = (nib[:, 0::2] | (nib[:, 1::2] << 4)).view(fp4)
                sc = torch.randint(100, 140, (n, scale_dim), generator=g, dtype=torch.uint8).view(e8m0)
                data.append((x, torch.rand(n, k, generator=g), sc, idx))
            x, w, sc, idx = data[me]
            results = []
            for dev in (DEV, torch.device("cpu")):  # the CUDA kernels, then the CPU path
                # 1-byte float types travel as their bytes
                xd, sd = (t.view(torch.uint8).to(dev).view(t.dtype) for t in (x, sc))
                wd, id_ = w.to(dev), idx.to(dev)
                outs = op.dispatch(xd, wd, sd, id_)
                if split:
                    op.dispatch_recv()
                total = int(outs[4][0])
                pos = op.get_dispatch_src_token_pos().long().cpu()
                src_r, src_t = op.decode_send_flat_idx(pos)
                want_x = (
                    torch.stack([data[q][0][t] for q, t in zip(src_r.tolist(), src_t.tolist())]) if total else x[:0]
                )
                expect(
                    torch.equal(outs[0][:total].cpu().view(torch.uint8), want_x.view(torch.uint8)),
                    f"{kernel.name} fp4 dispatch on {dev.type} is not bit-exact",
                )
                rows, mode = outs[0][:total], -1
                if not external and dev.type == "cuda":
                    reg = op.get_registered_combine_input_buffer(fp4)
                    reg.view(torch.uint8)[:total].copy_(rows.view(torch.uint8))
                    rows = reg
                elif not external:
                    mode = 1  # the CPU reference sums the same rows from an external input
                c, cw = op.combine(rows, outs[1][:total], id_, use_external_inp_buf=mode)
                if split:
                    op.combine_recv()
                results.append((c[: x.shape[0]].cpu().view(torch.uint8).clone(), cw[: x.shape[0]].cpu().clone()))
            (gpu_c, gpu_w), (cpu_c, cpu_w) = results
            expect(
                torch.equal(gpu_c, cpu_c),
                f"{kernel.name} round {rnd}: CUDA fp4 combine differs from the CPU "
                f"path at {(gpu_c != cpu_c).nonzero()[:3].tolist()}",
            )
            expect(torch.equal(gpu_w, cpu_w), f"{kernel.name} round {rnd}: CUDA fp4 combine weights differ from CPU")
            n = x.shape[0]
            if n:
                b = x.view(torch.uint8)
                vals = torch.stack([E2M1[(b & 15).long()], E2M1[(b >> 4).long()]], -1).reshape(n, values)
                mult = torch.tensor([float(len(dests(row, epr))) for row in idx.tolist()])
                codes = to_e2m1(vals * mult[:, None] + 0.0)  # the sums start at +0
                expect(
                    torch.equal(gpu_c, codes[:, 0::2] | (codes[:, 1::2] << 4)),
                    f"{kernel.name} round {rnd}: CUDA fp4 combine differs from encode(sum)",
                )
        del op
        print(f"PASS fp4_rows {kernel.name} external={external}", flush=True)


def check_errors():
    op = make_op(torch.bfloat16, 256, kernel=KT.InterNodeV1)
    x = torch.zeros(4, 256, dtype=torch.bfloat16, device=DEV)
    idx = torch.zeros(4, 8, dtype=torch.int32, device=DEV)
    try:
        op.dispatch(x, None, None, idx)
    except NotImplementedError as e:
        expect("InterNodeV1" in str(e), f"error names the kernel type: {e}")
    else:
        expect(False, "InterNodeV1 on CUDA tensors must raise")
    print("PASS errors", flush=True)


CHECKS = {
    "dtypes": check_dtypes,
    "zero_copy": check_zero_copy,
    "async_ll": check_async_ll,
    "graph": check_graph,
    "errors": check_errors,
    "fp8_cast": check_fp8_cast,
    "standard_moe": check_standard_moe,
    "blockwise": check_blockwise,
    "routing": check_routing,
    "fp4_rows": check_fp4_rows,
}


def main() -> int:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    torch._C._distributed_c10d._register_process_group("default", dist.group.WORLD)
    sh.shmem_torch_process_group_init("default")
    expect(mori.shmem.gpu.is_bound() and mori.shmem.gpu.device() == DEV.index, "PE bound to its GPU")
    for name in sys.argv[1:] or list(CHECKS):
        CHECKS[name]()
        sh.shmem_barrier_all()
    torch.cuda.synchronize()
    sh.shmem_finalize()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
