# SPDX-License-Identifier: MIT
"""``mori bench ep``: MoE dispatch/combine against the plain-torch all_to_all path.

Setup as MORI's and DeepEP's benchmarks: ``--tokens`` per rank (4096 for bandwidth, 128 for
latency), hidden 7168, top-8 of 256 experts spread over the ranks, FP8 (e4m3fn) dispatch and
BF16 combine, uniform random routing. The baseline runs in the same job with the same routing:
what engines fall back to without a dispatch kernel — exchange per-rank counts, permute rows by
destination, ``all_to_all_single`` the rows, top-k ids and weights (gloo on CPU, NCCL on GPU),
and for combine the reverse ``all_to_all_single`` plus an ``index_add_`` per source token.

Time per phase: on CPUs the median over iterations of the slowest rank's time, every iteration
starting from a barrier (a shared host's hiccups move a mean, not a median); on GPUs (``--gpu``)
the slowest rank's time per call in CUDA graphs of back-to-back calls (dispatch alone; combine =
dispatch+combine pairs minus dispatch), the NCCL path per iteration from a barrier (it
synchronizes with the host anyway). Figures per phase
(per rank, averaged over ranks):
* DeepEP bandwidth: received rows x hidden x element size / time, the rank's own rows included
  (dispatch counts rows received, combine the rows sent back: DeepEP's definition);
* link efficiency: bytes that crossed from other ranks into this one / time / the peer-copy
  ceiling measured in the same run (CPU: concurrent memcpy between PEs' mapped heaps, one before
  every iteration of a phase, so that the op and its ceiling share the load of a busy host; GPU: one-way
  copy-engine put into a peer's GPU heap; ``link_eff_2way`` divides by the copy engines' rate per
  direction when every PE puts at once, as in dispatch and combine). With ``--quant`` the
  combine is measured once per quant type (``none`` = bf16, ``fp8_direct_cast``, ``fp8_blockwise``,
  ``fp4_blockwise``), each on its own op; its rows cross as the quant type's wire bytes
  (``wire_B_row``: codes plus scales), and the link figure counts those bytes.
* ``--zero-copy``: the expert output is written into the registered combine input
  (``use_external_inp_buf=False``) and peers read it in place (not timed: the expert's write).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable, Optional

from mori.apps.bench.launch import GPU_JOB_ENV, relaunch, use_local_gpu
from mori.apps.bench.timing import Reduce, each_call_seconds, median_of_slowest, torch_rank_max, torch_rank_mean
from mori.apps.bench.timing import slowest as slowest_of


def _routing(tokens: int, world: int, experts: int, topk: int, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    idx = torch.rand(tokens, experts, generator=g).argsort(dim=1)[:, :topk].to(torch.int32)
    return idx


class _A2ABaseline:
    """The all_to_all_single path (one rank's view), with the same routing as the op."""

    def __init__(self, dist, group, me: int, world: int, idx, epr: int, hidden: int):
        import torch

        self.dist, self.group, self.world = dist, group, world
        n, k = idx.shape
        dest = idx.long() // epr
        # One row per (token, unique destination rank), ordered by destination.
        onehot = torch.zeros(n, world, dtype=torch.bool)
        onehot.scatter_(1, dest, True)
        tok, rank = onehot.nonzero(as_tuple=True)
        order = torch.argsort(rank, stable=True)
        self.send_tok = tok[order]
        self.send_counts = torch.bincount(rank, minlength=world)
        self.n, self.k, self.hidden = n, k, hidden

    def dispatch(self, x_bytes, weights, idx):
        import torch

        dist = self.dist
        recv_counts = torch.empty_like(self.send_counts)
        dist.all_to_all_single(recv_counts, self.send_counts, group=self.group)
        sc, rc = self.send_counts.tolist(), recv_counts.tolist()
        total = sum(rc)
        rows = x_bytes.index_select(0, self.send_tok)
        out = torch.empty(total, x_bytes.shape[1], dtype=torch.uint8)
        dist.all_to_all_single(out, rows, rc, sc, group=self.group)
        meta = torch.cat(
            [idx.index_select(0, self.send_tok), weights.index_select(0, self.send_tok).view(torch.int32)], 1
        )
        out_meta = torch.empty(total, meta.shape[1], dtype=torch.int32)
        dist.all_to_all_single(out_meta, meta, rc, sc, group=self.group)
        self.recv_counts = rc
        return out, out_meta

    def combine(self, expert_out_bytes, out_dtype):
        import torch

        rc, sc = self.recv_counts, self.send_counts.tolist()
        back = torch.empty(len(self.send_tok), expert_out_bytes.shape[1], dtype=torch.uint8)
        self.dist.all_to_all_single(back, expert_out_bytes, sc, rc, group=self.group)
        vals = back.view(out_dtype).float()
        acc = torch.zeros(self.n, vals.shape[1], dtype=torch.float32)
        acc.index_add_(0, self.send_tok, vals)
        return acc.to(out_dtype)


def _wire_row_bytes(quant: str, hidden: int) -> int:
    """Bytes of one bf16 combine row on the wire for a quant type (blockwise: codes, then one
    float32 scale per block of ceil(hidden / MORI_FP8_COMBINE_SCALE_DIM) values)."""
    from mori.ep.kernel_type import blockwise_scale_dim

    if quant == "fp8_direct_cast":
        return hidden
    if quant in ("fp8_blockwise", "fp4_blockwise"):
        block = -(-hidden // blockwise_scale_dim())
        blocks = -(-hidden // block)
        return (hidden if quant == "fp8_blockwise" else (hidden + 1) // 2) + 4 * blocks
    return 2 * hidden


def _measure(fn: Callable[[], None], barrier: Callable[[], None], iters: int, warmup: int, rank_max: Reduce) -> float:
    """Median over iterations of the slowest rank's duration (seconds)."""
    return median_of_slowest(each_call_seconds(fn, iters, warmup, barrier), rank_max)


def _worker(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    import mori.shmem as sh
    from mori.apps.bench.report import Report
    from mori.ops import EpDispatchCombineConfig, EpDispatchCombineKernelType, EpDispatchCombineOp

    dist.init_process_group("gloo")
    sh.shmem_init()
    me, world = sh.shmem_mype(), sh.shmem_npes()
    group = dist.group.WORLD
    if args.experts % world:
        raise SystemExit(f"--experts {args.experts} is not a multiple of the {world} ranks")
    epr = args.experts // world
    hidden, topk = args.hidden, args.topk
    kernel = EpDispatchCombineKernelType[args.kernel]
    fp8, bf16 = torch.float8_e4m3fn, torch.bfloat16

    reduce_max = torch_rank_max(dist, group)
    reduce_mean = torch_rank_mean(dist, world, group)

    # The peer-copy ceiling: every PE copies from its right neighbour's mapped heap at once.
    ceil_bytes = 64 << 20
    src_sym = sh.shmem_malloc(ceil_bytes)
    peer = sh.shmem_ptr_p2p(src_sym, me, (me + 1) % world)
    local = torch.empty(ceil_bytes, dtype=torch.uint8)
    import ctypes

    ctypes.memset(src_sym, 1, ceil_bytes)
    sh.shmem_barrier_all()
    copy_t = (
        _measure(lambda: ctypes.memmove(local.data_ptr(), peer, ceil_bytes), sh.shmem_barrier_all, 5, 2, reduce_max)
        if peer
        else float("nan")
    )
    ceiling = ceil_bytes / copy_t / 1e9

    def copy_once() -> float:
        """One peer copy of the ceiling (every PE at once, from a barrier): seconds."""
        sh.shmem_barrier_all()
        t0 = time.perf_counter()
        if peer:
            ctypes.memmove(local.data_ptr(), peer, ceil_bytes)
        return time.perf_counter() - t0 if peer else float("nan")

    def timed(
        prep: Optional[Callable[[], None]], fn: Callable[[], None], iters: int, warmup: int
    ) -> tuple[float, float]:
        """(median over iterations of the slowest rank's time of fn, the peer-copy ceiling in GB/s
        from the median copy between them): each iteration a ceiling copy, prep (untimed), then fn,
        each from a barrier, so that the op and its ceiling see the same load on a shared host."""
        op_t, cp_t = [], []
        for it in range(warmup + iters):
            c = copy_once()
            if prep is not None:
                sh.shmem_barrier_all()
                prep()
            sh.shmem_barrier_all()
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
            if it >= warmup:
                op_t.append(dt)
                cp_t.append(c)
        return median_of_slowest(op_t, reduce_max), ceil_bytes / median_of_slowest(cp_t, reduce_max) / 1e9

    report = Report(
        "ep",
        [
            "tokens",
            "phase",
            "impl",
            "time_us",
            "deepep_GBps",
            "link_GBps",
            "ceiling_GBps",
            "link_eff",
            "wire_B_row",
            "vs_baseline",
        ],
        meta={
            "world": world,
            "hidden": hidden,
            "topk": topk,
            "experts": args.experts,
            "kernel": kernel.name,
            "dispatch_dtype": "float8_e4m3fn",
            "combine_dtype": "bfloat16",
            "peer_copy_ceiling_GBps": ceiling,
            "device": "cpu",
            "zero_copy_combine": args.zero_copy,
            "combine_quants": args.quant,
        },
    )
    for tokens in args.tokens:
        all_idx = [_routing(tokens, world, args.experts, topk, args.seed + r) for r in range(world)]
        idx = all_idx[me]
        g = torch.Generator().manual_seed(1000 + me)
        x = (torch.randn(tokens, hidden, generator=g)).to(fp8)
        w = torch.rand(tokens, topk, generator=g)
        cfg = EpDispatchCombineConfig(
            data_type=fp8,
            rank=me,
            world_size=world,
            hidden_dim=hidden,
            scale_dim=0,
            scale_type_size=4,
            max_token_type_size=2,
            max_num_inp_token_per_rank=tokens,
            num_experts_per_rank=epr,
            num_experts_per_token=topk,
            kernel_type=kernel,
            gpu_per_node=args.gpu_per_node,
        )
        op = EpDispatchCombineOp(cfg)
        state = {}

        def disp():
            state["d"] = op.dispatch(x, w, None, idx)
            if kernel == EpDispatchCombineKernelType.AsyncLL:
                op.dispatch_recv()

        disp()
        total = int(state["d"][4][0])
        expert_out = state["d"][0][:total].to(bf16)  # the expert's output (identity), in bf16

        if args.zero_copy:  # the expert writes straight into the registered combine input
            reg = op.get_registered_combine_input_buffer(bf16)
            reg[:total].copy_(expert_out)
            expert_out = reg

        def comb():
            op.combine(expert_out, None, idx, use_external_inp_buf=0 if args.zero_copy else -1)
            if kernel == EpDispatchCombineKernelType.AsyncLL:
                op.combine_recv()

        comb()
        # What crossed between PEs into this rank (this rank's receive side).
        src = op.get_dispatch_src_token_pos()
        own = int((torch.div(src, world * tokens, rounding_mode="floor") == me).sum())
        dests = [{int(e) // epr for e in row} for row in idx.tolist()]
        comb_rows = sum(len(d) for d in dests)
        comb_remote = sum(len(d - {me}) for d in dests)
        t_d, ceil_d = timed(None, disp, args.iters, args.warmup)
        # Combine needs a matching dispatch before it: combine alone, after each dispatch.
        t_c, ceil_c = timed(disp, comb, args.iters, args.warmup)
        # The same expert output allocated in the PE's shared tensor arena: sources sum it in place.
        t_cs = ceil_cs = None
        if not args.zero_copy and not args.no_shared:
            with sh.shared_tensors():
                shared_out = state["d"][0][:total].to(bf16)

            def comb_shared():
                op.combine(shared_out, None, idx)
                if kernel == EpDispatchCombineKernelType.AsyncLL:
                    op.combine_recv()

            t_cs, ceil_cs = timed(disp, comb_shared, args.iters, args.warmup)
        # The quantized combines, each on an op of its quant type (same routing and rows).
        quant_rows = []
        for quant in [q for q in args.quant if q != "none"]:
            qop = EpDispatchCombineOp(
                EpDispatchCombineConfig(
                    data_type=fp8,
                    rank=me,
                    world_size=world,
                    hidden_dim=hidden,
                    scale_dim=0,
                    scale_type_size=4,
                    max_token_type_size=2,
                    max_num_inp_token_per_rank=tokens,
                    num_experts_per_rank=epr,
                    num_experts_per_token=topk,
                    kernel_type=kernel,
                    gpu_per_node=args.gpu_per_node,
                    quant_type=quant,
                )
            )
            qout = qop.dispatch(x, w, None, idx)
            if kernel == EpDispatchCombineKernelType.AsyncLL:
                qop.dispatch_recv()
            q_in = qout[0][:total].to(bf16)

            def qdisp(qop=qop):
                qop.dispatch(x, w, None, idx)
                if kernel == EpDispatchCombineKernelType.AsyncLL:
                    qop.dispatch_recv()

            def qcomb(qop=qop, q_in=q_in):
                qop.combine(q_in, None, idx)
                if kernel == EpDispatchCombineKernelType.AsyncLL:
                    qop.combine_recv()

            # Quantizing costs far more than copying on CPUs: fewer iterations.
            t_q, ceil_q = timed(qdisp, qcomb, max(2, args.iters // 3), 1)
            quant_rows.append((quant, t_q, ceil_q, qop.last_remote_bytes()[1], _wire_row_bytes(quant, hidden)))
            del qop

        base = _A2ABaseline(dist, group, me, world, idx, epr, hidden)
        xb = x.view(torch.uint8)
        bstate = {}

        def bdisp():
            bstate["d"] = base.dispatch(xb, w, idx)

        bdisp()
        b_expert = bstate["d"][0].view(fp8).to(bf16).view(torch.uint8)
        t_bd = _measure(bdisp, dist.barrier, args.iters, args.warmup, reduce_max)
        t_bc = _measure(lambda: base.combine(b_expert, bf16), dist.barrier, args.iters, args.warmup, reduce_max)
        if int(sum(base.recv_counts)) != total:
            raise SystemExit(f"rank {me}: the baseline received {sum(base.recv_counts)} rows, the op {total}")

        row_d, row_c = hidden * 1, hidden * 2
        comb_impl = "mori (zero-copy)" if args.zero_copy else "mori"
        figures = {
            ("dispatch", "mori"): (t_d, total * row_d, (total - own) * row_d),
            ("dispatch", "all_to_all"): (t_bd, total * row_d, (total - own) * row_d),
            ("combine", comb_impl): (t_c, comb_rows * row_c, comb_remote * row_c),
            ("combine", "all_to_all"): (t_bc, comb_rows * row_c, comb_remote * row_c),
        }
        ceilings = {"mori": ceil_d, comb_impl: ceil_c}
        combines = [comb_impl]
        if t_cs is not None:
            figures[("combine", "mori (shared input)")] = (t_cs, comb_rows * row_c, comb_remote * row_c)
            ceilings["mori (shared input)"] = ceil_cs
            combines.append("mori (shared input)")
        for phase, ours in [("dispatch", "mori")] + [("combine", c) for c in combines]:
            t_ours = figures[(phase, ours)][0]
            for impl in (ours, "all_to_all") if ours != "mori (shared input)" else (ours,):
                t, algo_bytes, link_bytes = figures[(phase, impl)]
                bw = reduce_mean(algo_bytes / t / 1e9)
                link = reduce_mean(link_bytes / t / 1e9)
                ceil_phase = ceilings[ours]
                report.add(
                    tokens=tokens,
                    phase=phase,
                    impl=impl if impl != "all_to_all" else f"all_to_all ({dist.get_backend(group)})",
                    time_us=t * 1e6,
                    deepep_GBps=bw,
                    link_GBps=link,
                    ceiling_GBps=ceil_phase,
                    link_eff=link / ceil_phase,
                    wire_B_row=row_d if phase == "dispatch" else row_c,
                    vs_baseline=t / t_ours
                    if impl == "all_to_all"
                    else (t_bc / t if impl == "mori (shared input)" else 1.0),
                )
        for quant, t, ceil_q, wire_bytes, wire_row in quant_rows:
            # link bytes: what the op put on the wire to other PEs (codes, scales), into this rank on average
            link = reduce_mean(wire_bytes / t / 1e9)
            report.add(
                tokens=tokens,
                phase="combine",
                impl=f"mori ({quant})",
                time_us=t * 1e6,
                deepep_GBps=reduce_mean(comb_rows * row_c / t / 1e9),
                link_GBps=link,
                ceiling_GBps=ceil_q,
                link_eff=link / ceil_q,
                wire_B_row=wire_row,
                vs_baseline=t_bc / t,
            )
        op = None  # freed now (the timed closures above hold the name)
    if me == 0:
        report.show(
            f"MoE dispatch/combine, {world} ranks, hidden {hidden}, top-{topk} of {args.experts}, "
            f"FP8 dispatch / BF16 combine ({kernel.name}); peer-copy ceiling {ceiling:.2f} GB/s at start, "
            f"ceiling_GBps measured between each phase's iterations; "
            f"vs_baseline = baseline time / mori time (quantized rows: their own)"
        )
        print(f"wrote {report.save(args.json)}")
    sh.shmem_barrier_all()
    sh.shmem_free(src_sym)
    sh.shmem_finalize()
    dist.destroy_process_group()
    return 0


def _ce_ceiling(sh, torch, dist, rank: int, world: int, nbytes: int = 256 << 20) -> tuple[float, float]:
    """Copy-engine peer bandwidth (GB/s) into a neighbour's GPU heap (``putmem_on_stream``,
    cudaMemcpyAsync): one way (each PE in turn puts ``nbytes`` to its right neighbour while the
    others wait; the mean) and two-way (every PE puts at once, as dispatch and combine do; the
    mean per PE)."""
    from mori.shmem import gpu
    from mori.shmem.tensor_utils import mori_shmem_create_tensor, mori_shmem_free_tensor

    dst = mori_shmem_create_tensor((nbytes,), torch.uint8)
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda")
    peer = (rank + 1) % world

    def timed_puts(reps: int = 5) -> float:
        for _ in range(2):
            gpu.putmem_on_stream(dst, src, nbytes, peer)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(reps):
            gpu.putmem_on_stream(dst, src, nbytes, peer)
        e1.record()
        e1.synchronize()
        return reps * nbytes / (e0.elapsed_time(e1) * 1e-3) / 1e9

    one_way = 0.0
    for turn in range(world):
        sh.shmem_barrier_all()
        if turn == rank:
            one_way = timed_puts()
    torch.cuda.synchronize()
    sh.shmem_barrier_all()
    both = timed_puts()
    torch.cuda.synchronize()
    sh.shmem_barrier_all()
    mori_shmem_free_tensor(dst)
    t = torch.tensor([one_way, both], dtype=torch.float64)
    dist.all_reduce(t)
    return t[0].item() / world, t[1].item() / world


def _nccl_path(dist, torch, nccl, x, w, idx, epr: int, world: int):
    """The plain-torch fallback over NCCL for one rank: (dispatch, combine) closures."""
    tokens, hidden = x.shape
    dest = idx.long() // epr
    onehot = torch.zeros(tokens, world, dtype=torch.bool, device=x.device)
    onehot.scatter_(1, dest, True)
    state = {}

    def disp():
        tok, rk = onehot.nonzero(as_tuple=True)
        order = torch.argsort(rk, stable=True)
        send_tok = tok[order]
        send_counts = torch.bincount(rk, minlength=world)
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts, group=nccl)
        sc, rc = send_counts.tolist(), recv_counts.tolist()
        rows = x.view(torch.uint8).index_select(0, send_tok)
        out = torch.empty(sum(rc), hidden, dtype=torch.uint8, device=x.device)
        dist.all_to_all_single(out, rows, rc, sc, group=nccl)
        meta = torch.cat([idx.index_select(0, send_tok), w.index_select(0, send_tok).view(torch.int32)], 1)
        out_meta = torch.empty(sum(rc), meta.shape[1], dtype=torch.int32, device=x.device)
        dist.all_to_all_single(out_meta, meta, rc, sc, group=nccl)
        state.update(out=out, send_tok=send_tok, sc=sc, rc=rc)

    def comb():
        back = torch.empty(len(state["send_tok"]), hidden, dtype=torch.bfloat16, device=x.device)
        dist.all_to_all_single(back, state["expert"], state["sc"], state["rc"], group=nccl)
        acc = torch.zeros(tokens, hidden, dtype=torch.float32, device=x.device)
        acc.index_add_(0, state["send_tok"], back.float())
        return acc.to(torch.bfloat16)

    disp()
    state["expert"] = state["out"].view(torch.float8_e4m3fn).to(torch.bfloat16)
    return disp, comb


def _gpu_worker(args: argparse.Namespace) -> int:
    """One PE of `mori bench ep --gpu`: EpDispatchCombineOp on CUDA tensors (this process's GPU,
    buffers on the shmem GPU heap) and the NCCL path, same routing, same process."""
    import statistics

    import torch
    import torch.distributed as dist

    # PEs beyond the node's GPUs share them (e.g. 2 PEs on one GPU): the kernels and bytes on
    # the wire are measured as usual, but NCCL refuses two ranks on one GPU, so the rows are then
    # compared with the first --quant's row of ours instead of the NCCL path.
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    shared = local_world > torch.cuda.device_count()
    use_local_gpu()
    import mori.shmem as sh
    from mori.apps.bench.report import Report
    from mori.ops import EpDispatchCombineConfig, EpDispatchCombineOp

    dist.init_process_group("gloo")
    torch._C._distributed_c10d._register_process_group("default", dist.group.WORLD)
    sh.shmem_torch_process_group_init("default")
    rank, world = sh.shmem_mype(), sh.shmem_npes()
    dev = torch.device("cuda", torch.cuda.current_device())
    nccl = None if shared else dist.new_group(backend="nccl", device_id=dev)
    epr, hidden, topk = args.experts // world, args.hidden, args.topk
    fp8, bf16 = torch.float8_e4m3fn, torch.bfloat16
    bn, wpb = args.block_num, args.warp_per_block
    ceiling, ceiling_2way = _ce_ceiling(sh, torch, dist, rank, world)

    rank_max = torch_rank_max(dist)
    mean = torch_rank_mean(dist, world)

    def slowest(v: float) -> float:
        return slowest_of(rank_max, v)

    def graph_time(body: Callable[[], None], reps: int) -> float:
        """Seconds per call of ``body``: ``reps`` calls captured back to back in one graph, the
        graph replayed 5 times, the median replay / reps (the slowest rank's)."""
        gr = torch.cuda.CUDAGraph()
        with torch.cuda.graph(gr):
            for _ in range(reps):
                body()
        samples = []
        for _ in range(6):
            torch.cuda.synchronize()
            sh.shmem_barrier_all()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            gr.replay()
            e1.record()
            e1.synchronize()
            samples.append(e0.elapsed_time(e1) * 1e-3 / reps)
        del gr
        return slowest(statistics.median(samples[1:]))

    report = Report(
        "ep-gpu",
        [
            "tokens",
            "phase",
            "impl",
            "time_us",
            "deepep_GBps",
            "link_GBps",
            "link_eff",
            "link_eff_2way",
            "wire_B_row",
            "vs_baseline",
        ],
        meta={
            "world": world,
            "hidden": hidden,
            "topk": topk,
            "experts": args.experts,
            "kernel": "IntraNode (EpDispatchCombineOp, CUDA, "
            + (
                f"{local_world} processes sharing {torch.cuda.device_count()} GPU(s))"
                if shared
                else "one process per GPU)"
            ),
            "shared_gpu": shared,
            "dispatch_dtype": "float8_e4m3fn",
            "combine_dtype": "bfloat16",
            "combine_quant": args.quant,
            "zero_copy_combine": args.zero_copy,
            "peer_copy_ceiling_GBps": ceiling,
            "peer_copy_ceiling_two_way_GBps": ceiling_2way,
            "device": torch.cuda.get_device_name(dev),
            "block_num": bn,
            "warp_per_block": wpb,
            "timing": "graphs of back-to-back calls; combine = (dispatch+combine) - dispatch",
        },
    )
    for tokens in args.tokens:
        base = {}  # the NCCL path, measured once per token count
        for quant in args.quant:
            cfg = EpDispatchCombineConfig(
                data_type=fp8,
                rank=rank,
                world_size=world,
                hidden_dim=hidden,
                scale_dim=0,
                scale_type_size=4,
                max_token_type_size=2,
                max_num_inp_token_per_rank=tokens,
                num_experts_per_rank=epr,
                num_experts_per_token=topk,
                quant_type=quant,
            )
            op = EpDispatchCombineOp(cfg)
            idx = _routing(tokens, world, args.experts, topk, args.seed + rank).to(dev)
            g = torch.Generator().manual_seed(1000 + rank)
            x = torch.randn(tokens, hidden, generator=g).to(fp8).to(dev)
            w = torch.rand(tokens, topk, generator=g).to(dev)
            out = op.dispatch(x, None, None, idx, block_num=bn, warp_per_block=wpb)
            exp = out[0].to(bf16)  # the expert's output (identity), in bf16
            if args.zero_copy:  # the expert writes straight into the registered combine input
                reg = op.get_registered_combine_input_buffer(bf16)
                reg.copy_(exp)
                exp = reg
            op.combine(exp, None, idx, block_num=bn, warp_per_block=wpb)
            torch.cuda.synchronize()
            sh.shmem_barrier_all()

            def disp():
                op.dispatch(x, None, None, idx, block_num=bn, warp_per_block=wpb)

            def pair():
                disp()
                op.combine(exp, None, idx, block_num=bn, warp_per_block=wpb)

            reps = max(4, min(50, (1 << 31) // max(1, tokens * hidden * 64)))
            t_d = graph_time(disp, reps)
            t_c = graph_time(pair, reps) - t_d
            total = int(out[4].item())
            own = int((op.get_dispatch_src_token_pos().long() // op.max_num_tokens_to_send() == rank).sum())
            dests = [{int(e) // epr for e in row} for row in idx.cpu().tolist()]
            comb_rows, comb_remote = sum(len(d) for d in dests), sum(len(d - {rank}) for d in dests)

            b_disp, b_comb = _nccl_path(dist, torch, nccl, x, w, idx, epr, world) if nccl else (None, None)
            if shared and not base:  # the first --quant's row is the baseline
                base = {"dispatch": t_d, "combine": t_c}
            for phase, fn in (("dispatch", b_disp), ("combine", b_comb)) if not base else ():
                times = []
                for it in range(args.warmup + args.iters):
                    torch.cuda.synchronize()
                    dist.barrier()
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    fn()
                    e1.record()
                    e1.synchronize()
                    if it >= args.warmup:
                        times.append(e0.elapsed_time(e1) * 1e-3)
                base[phase] = slowest(statistics.median(times))
            wire_row = _wire_row_bytes(quant, hidden)  # bytes per combine row crossing NVLink
            first = quant == args.quant[0]
            ours = "mori" if quant == "none" else f"mori ({quant})"
            for phase, t_ours in (("dispatch", t_d), ("combine", t_c)):
                row = hidden * (1 if phase == "dispatch" else 2)
                algo = total * row if phase == "dispatch" else comb_rows * row
                link = (total - own) * row if phase == "dispatch" else comb_remote * wire_row
                impls = ((ours, t_ours),) + ((("all_to_all (nccl)", base[phase]),) if first and not shared else ())
                for impl, t in impls:
                    lk = mean(link / t / 1e9)
                    report.add(
                        tokens=tokens,
                        phase=phase,
                        impl=impl,
                        time_us=t * 1e6,
                        deepep_GBps=mean(algo / t / 1e9),
                        link_GBps=lk,
                        link_eff=lk / ceiling,
                        link_eff_2way=lk / ceiling_2way,
                        wire_B_row=row if phase == "dispatch" else wire_row,
                        vs_baseline=t / t_ours if first and not shared else base[phase] / t,
                    )
            op = None  # freed now (the timed closures above hold the name)
            torch.cuda.synchronize()
            sh.shmem_barrier_all()
    if rank == 0:
        who = (
            (f"{world} PEs sharing {torch.cuda.device_count()} GPU(s)" if shared else f"{world} GPUs")
            + f" ({torch.cuda.get_device_name(dev)})"
            + ("" if shared else ", one process each")
        )
        report.show(
            f"MoE dispatch/combine on {who}, "
            f"hidden {hidden}, top-{topk} of {args.experts}, FP8 dispatch / BF16 combine"
            f"{', combine quant ' + '/'.join(args.quant)}{', zero-copy combine' if args.zero_copy else ''}, "
            f"block_num {bn} x {wpb} warps; "
            f"copy-engine peer ceiling {ceiling:.0f} GB/s one way, {ceiling_2way:.0f} GB/s per direction two-way; "
            + (
                "vs_baseline = the first --quant's time / this row's time (NCCL cannot share a GPU)"
                if shared
                else "vs_baseline = NCCL path time / mori time (quantized rows: their own)"
            )
        )
        print(f"wrote {report.save(args.json)}")
    sh.shmem_finalize()
    dist.destroy_process_group()
    return 0


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(prog="mori bench ep", description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--nproc", type=int, default=4, help="ranks (PEs) on this host (default 4)")
    parser.add_argument("--tokens", type=int, nargs="+", default=[4096, 128], help="tokens per rank")
    parser.add_argument("--hidden", type=int, default=7168)
    parser.add_argument("--topk", type=int, default=8)
    parser.add_argument("--experts", type=int, default=256)
    parser.add_argument("--kernel", default="IntraNode", help="EpDispatchCombineKernelType name")
    parser.add_argument("--gpu-per-node", type=int, default=8)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seed", type=int, default=123)
    parser.add_argument(
        "--json", default=None, help="where to write the JSON (default bench-results/ep.json, with --gpu ep-gpu.json)"
    )
    parser.add_argument(
        "--gpu",
        action="store_true",
        help="CUDA: EpDispatchCombineOp, one process per GPU of this node, vs the NCCL path",
    )
    parser.add_argument("--block-num", type=int, default=264, help="GPU blocks per kernel")
    parser.add_argument("--warp-per-block", type=int, default=16, help="GPU warps per block")
    parser.add_argument(
        "--quant",
        nargs="+",
        default=["none"],
        choices=["none", "fp8_direct_cast", "fp8_blockwise", "fp4_blockwise"],
        help="combine quant_type(s), each measured on its own op (none = bf16)",
    )
    parser.add_argument(
        "--zero-copy", action="store_true", help="combine from the registered input buffer (use_external_inp_buf=False)"
    )
    parser.add_argument(
        "--no-shared",
        action="store_true",
        help="CPU: skip the combine from an input in the shared tensor arena (mori.shmem.shared_tensors)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--gpu-worker", action="store_true", help=argparse.SUPPRESS)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.json is None:
        args.json = "bench-results/ep-gpu.json" if args.gpu else "bench-results/ep.json"
    if args.worker:
        return _worker(args)
    if args.gpu_worker:
        return _gpu_worker(args)
    if args.gpu:
        import torch

        n = args.nproc if "-n" in argv or "--nproc" in argv else torch.cuda.device_count()
        return relaunch("mori.apps.bench.ep", argv, n, worker_flag="--gpu-worker", env=dict(os.environ, **GPU_JOB_ENV))
    env = dict(os.environ)
    # Receive buffers scale with tokens x hidden x ranks; make room unless the user chose (a
    # quantized combine's op lives beside the bf16 one).
    ops = 1 + (len([q for q in args.quant if q != "none"]) > 0)
    per_pe = ops * 6 * args.nproc * max(args.tokens) * args.hidden * 2 + (256 << 20)
    env.setdefault("MORI_SHMEM_HEAP_SIZE", str(per_pe))
    return relaunch("mori.apps.bench.ep", argv, args.nproc, env=env)


if __name__ == "__main__":
    sys.exit(main())
