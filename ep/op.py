# SPDX-License-Identifier: MIT
"""``EpDispatchCombineOp``: MORI's MoE dispatch/combine operator.

Semantics (MORI's): each token goes once to every *rank* that hosts one of its top-k
experts, carrying all k indices and weights; the receiver sees the rows in arrival order
(not sorted) and ``recv_num_token[0]`` of them are valid. Combine returns, for each own
token, the unweighted sum of the rows its destination ranks send back (expert weighting
belongs to the expert computation), and the sum of their weight rows.

Outputs are views of the op's symmetric buffers: they are overwritten by the next call
of the same phase, and stay valid while the op lives.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import torch

from mori import _C
from mori.core.env import setting
from mori.ep import standard_moe
from mori.ep.config import EpDispatchCombineConfig
from mori.ep.kernel_type import (
    BLOCKWISE,
    BLOCKWISE_KERNELS,
    EpDispatchCombineKernelType,
    blockwise_scale_dim,
    normalize_quant_type,
)
from mori.ep.local_expert_count import count_local_experts
from mori.ep.profiler import TraceBuffer, enabled as profiling_enabled, traced
from mori.ep.routing import EpDispatchRoutingHandle
from mori.ep.tensors import address, dtype_code, view_at
from mori.ep.tuning import LaunchConfigurator, mode_from_env

TOPK_IDX_DTYPE = torch.int32


_GPU_KERNELS = (
    EpDispatchCombineKernelType.IntraNode,
    EpDispatchCombineKernelType.IntraNodeLL,
    EpDispatchCombineKernelType.AsyncLL,
)


def warmup_jit_kernels(kernel_type: EpDispatchCombineKernelType) -> None:
    """MORI compiles a kernel type's kernels here; ours are compiled ahead of time (CPU and CUDA
    alike), so this checks ``kernel_type`` and returns."""
    try:
        EpDispatchCombineKernelType(int(kernel_type))
    except (TypeError, ValueError):
        raise ValueError(f"Unknown kernel_type: {kernel_type!r}") from None


def _gpu_bound() -> bool:
    return bool(getattr(_C.ep, "cuda_built", False)) and bool(_C.shmem.gpu_bound())


def _require_tensor(t, fn: str, name: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
    return t


class _HostPath:
    """Where an op's calls on CPU tensors run: the host handle (built on first use on a GPU-bound PE).
    The op picks this or :class:`_GpuPath` once per dispatch/combine (by the tensors' device); the
    calls that follow (the recv halves, the last dispatch's layout) ask the path the last dispatch took.
    A path is handed the op on each call and keeps no reference to it: a cycle would leave freeing
    an op (collective: its symmetric buffers) to the garbage collector, at different times on
    different PEs."""

    on_gpu = False
    device_name = "cpu"

    def dispatch_recv(self, op: EpDispatchCombineOp, block_num: int, warp_per_block: int) -> None:
        op._handle.dispatch_recv()

    def combine_recv(self, op: EpDispatchCombineOp, block_num: int, warp_per_block: int) -> None:
        op._handle.combine_recv()

    def total_recv(self, op: EpDispatchCombineOp) -> int:
        return int(op._handle.total_recv())

    def src_pos(self, op: EpDispatchCombineOp, total: int) -> torch.Tensor:
        return view_at(op._handle.src_token_pos(), (total,), torch.int32)

    def cur_rank_num_token(self, op: EpDispatchCombineOp) -> int:
        return int(op._handle.cur_rank_num_token())


class _GpuPath:
    """Where an op's calls on CUDA tensors run: the GPU heap's kernels (mori.ep.gpu_backend)."""

    on_gpu = True
    device_name = "cuda"

    def __init__(self, gpu: Any):
        self._gpu = gpu  # mori.ep.gpu_backend.GpuIntraNode (it does not refer to the op)

    def dispatch_recv(self, op: EpDispatchCombineOp, block_num: int, warp_per_block: int) -> None:
        self._gpu.dispatch_recv()

    def combine_recv(self, op: EpDispatchCombineOp, block_num: int, warp_per_block: int) -> None:
        self._gpu.combine_recv(*op._gpu_launch("combine", block_num, warp_per_block))

    def total_recv(self, op: EpDispatchCombineOp) -> int:
        return int(self._gpu.view("total_recv", (1,), torch.int32).item())

    def src_pos(self, op: EpDispatchCombineOp, total: int) -> torch.Tensor:
        return self._gpu.view("disp_src", (op.config.max_num_tokens_to_recv,), torch.int32)[:total]

    def cur_rank_num_token(self, op: EpDispatchCombineOp) -> int:
        return int(self._gpu.last_num_tokens)


class EpDispatchCombineOp:
    """MoE dispatch/combine over the shmem runtime. Collective: every PE of the shmem job
    constructs one with the same config (except ``rank``), after shmem is initialized."""

    def __init__(self, config: EpDispatchCombineConfig, *, num_threads: int = 0):
        self.config = config
        self._kernel = EpDispatchCombineKernelType(int(config.kernel_type))
        self._quant = normalize_quant_type(config.quant_type)
        # Read when the op is built, as the native handle does.
        self._blockwise_scale_dim = blockwise_scale_dim() if self._quant in BLOCKWISE else 0
        # MORI's names for the same (its tests read them): scales per row of a blockwise combine
        # (0: this op combines no blockwise rows) and their size (fp32 here), and what the last
        # combine ran (None before the first).
        self._fp8_blockwise_combine_scale_dim = self._blockwise_scale_dim
        self._fp8_blockwise_combine_scale_type_size = 4 if self._quant in BLOCKWISE else 0
        self._last_combine_kernel_name: Optional[str] = None
        self._num_threads = num_threads
        self._cpu_handle = None
        self._gpu = None
        if _gpu_bound():
            _C.ep.validate_config(config.native(num_threads))  # the host handle checks it on CPU
            # Every PE is bound to its GPU: the op's buffers live on the GPU heap. The host
            # handle (CPU tensors) is built on first use (collective, like every call).
            if self._kernel in _GPU_KERNELS:
                from mori.ep.gpu_backend import GpuIntraNode

                self._gpu = GpuIntraNode(config)
        else:
            self._cpu_handle = _C.ep.EpHandle(config.native(num_threads))
            if setting("MORI_SHARED_TENSORS"):  # every large CPU tensor peer-readable (a combine reads it in place)
                from mori.shmem.shared_arena import enable_shared_tensors

                enable_shared_tensors()
        self._host_path = _HostPath()
        self._gpu_path = _GpuPath(self._gpu) if self._gpu is not None else None
        self._last_path: Union[_HostPath, _GpuPath] = self._host_path  # the path the last dispatch took
        mode, explicit = mode_from_env()
        self.launch_config_mode = (mode or "MANUAL").upper()
        self._launch = LaunchConfigurator(
            self._kernel, config.world_size, config.num_experts_per_token, self.launch_config_mode, explicit
        )
        self._views: dict = {}
        self._last_dispatch_dtype: Optional[torch.dtype] = None
        self._last_hidden = config.hidden_dim
        self._std_src_info: Optional[torch.Tensor] = None
        # Allocated with the op, as MORI does; every count overwrites it in place, so a caller
        # (or a captured CUDA graph) may hold on to this tensor.
        self.local_expert_count = torch.zeros(
            config.num_experts_per_rank, dtype=torch.int32, device=self._gpu.device if self._gpu is not None else "cpu"
        )
        self._count_at_recv = False  # AsyncLL: dispatch_send asked for the count, dispatch_recv makes it
        self._last_out_indices: Optional[tuple] = None  # (out_indices, recv_num_token) views of the last dispatch
        self._trace: Optional[TraceBuffer] = TraceBuffer(config.rank) if profiling_enabled() else None

    @property
    def _handle(self):
        """The host-heap handle (CPU tensors); built on first use on a GPU-bound PE."""
        if self._cpu_handle is None:
            self._cpu_handle = _C.ep.EpHandle(self.config.native(self._num_threads))
        return self._cpu_handle

    # ------------------------------------------------------------------ sizes

    def max_num_tokens_to_send(self) -> int:
        return self.config.max_num_tokens_to_send

    def max_num_tokens_to_recv(self) -> int:
        return self.config.max_num_tokens_to_recv

    def max_num_tokens_to_recv_per_rank(self) -> int:
        return self.config.max_num_tokens_to_recv_per_rank

    def max_num_tokens_to_send_per_rank(self) -> int:
        """``max_num_inp_token_per_rank`` (MORI's MaxNumTokensToSendPerRank)."""
        return self.config.max_num_tokens_to_send_per_rank

    @property
    def num_threads(self) -> int:
        """CPU threads this PE's kernels use (``MORI_COPY_THREADS``, else automatic)."""
        return self._handle.threads

    def get_launch_config(
        self,
        is_dispatch: bool = True,
        block_num: int = -1,
        rdma_block_num: int = -1,
        warp_per_block: int = -1,
        *,
        dtype: Optional[torch.dtype] = None,
        num_tokens: int = 0,
        hidden_dim: int = -1,
    ) -> tuple[int, int, int]:
        """(block_num, rdma_block_num, warp_per_block) this op would use (AUTO rules or the
        given values; -1 means the config's)."""
        return self._launch.resolve(
            "dispatch" if is_dispatch else "combine",
            torch.device("cpu"),
            dtype or self.config.data_type,
            num_tokens,
            hidden_dim if hidden_dim > 0 else self.config.hidden_dim,
            block_num,
            rdma_block_num,
            warp_per_block,
            zero_copy=not self.config.use_external_inp_buf,
            quant_type=str(self.config.quant_type),
        )

    # ------------------------------------------------------------------ views

    def _view(self, key: str, addr: int, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
        k = (key, addr, shape, dtype)
        t = self._views.get(k)
        if t is None:
            t = view_at(addr, shape, dtype)
            self._views[k] = t
        return t

    def _path_for(self, fn: str, *tensors: Optional[torch.Tensor]) -> Union[_HostPath, _GpuPath]:
        """The path a call on these tensors runs: the GPU's (CUDA tensors) or the host's (CPU tensors)."""
        devs = {t.device for t in tensors if t is not None}
        if all(d.type == "cpu" for d in devs):
            return self._host_path
        if self._gpu is None:
            if self._kernel not in _GPU_KERNELS:
                raise NotImplementedError(
                    f"{fn}: kernel_type {self._kernel.name} has no GPU implementation (no cross-node GPU transport); "
                    f"use IntraNode, IntraNodeLL or AsyncLL with CUDA tensors, or CPU tensors"
                )
            raise NotImplementedError(
                f"{fn}: CUDA tensors need every PE bound to its GPU before shmem init (MORI_DEVICE, or "
                f"torch.cuda.set_device(local_rank) first); this PE has no GPU heap"
            )
        want = self._gpu.device
        for d in devs:
            if d != want:
                raise ValueError(f"{fn}: every tensor must be on {want} (this PE's GPU heap), got one on {d}")
        return self._gpu_path

    # ------------------------------------------------------------------ dispatch

    @traced("dispatch")
    def dispatch(
        self,
        input: torch.Tensor,
        weights: Optional[torch.Tensor],
        scales: Optional[torch.Tensor],
        indices: torch.Tensor,
        block_num: int = -1,
        rdma_block_num: int = -1,
        warp_per_block: int = -1,
        call_local_expert_count: bool = False,
        *,
        routing: Optional[EpDispatchRoutingHandle] = None,
        return_routing: bool = False,
    ):
        """Send each token to the ranks of its top-k experts.

        Returns ``(out, out_weights, out_scales, out_indices, recv_num_token)``: views with
        ``max_num_tokens_to_recv()`` rows, of which ``recv_num_token[0]`` are valid;
        ``out_scales`` is None when ``scale_dim == 0``. For ``AsyncLL`` this is the send
        half: the views fill in at ``dispatch_recv()``. ``return_routing=True`` appends an
        :class:`EpDispatchRoutingHandle` of this layout (``recv_num_token`` is then its tensor);
        ``routing=h`` dispatches the same routing again into ``h``'s layout (IntraNode, InterNodeV1).
        """
        fn = "EpDispatchCombineOp.dispatch"
        cfg = self.config
        input = _require_tensor(input, fn, "input")
        indices = _require_tensor(indices, fn, "indices")
        path = self._path_for(fn, input, weights, scales, indices)
        if routing is not None and return_routing:
            raise ValueError("pass either `routing=` (replay) or `return_routing=True` (new layout), not both")
        if routing is not None or return_routing:
            self._check_routing_support(fn, replay=routing is not None)
        if input.dim() != 2:
            raise ValueError(f"{fn}: input must be 2-D [num_tokens, hidden_dim], got shape {tuple(input.shape)}")
        n, hidden = input.shape
        k = cfg.num_experts_per_token
        if indices.dim() != 2 or indices.shape[0] != n or indices.shape[1] != k:
            raise ValueError(
                f"{fn}: indices must be [num_tokens={n}, num_experts_per_token={k}], got shape {tuple(indices.shape)}"
            )
        if indices.dtype.is_floating_point or indices.dtype == torch.bool or indices.is_complex():
            raise ValueError(f"{fn}: indices must be an integer tensor (int32), got {indices.dtype}")
        if weights is not None:
            weights = _require_tensor(weights, fn, "weights")
            if weights.shape != (n, k):
                raise ValueError(
                    f"{fn}: weights must be [num_tokens={n}, num_experts_per_token={k}], "
                    f"got shape {tuple(weights.shape)}"
                )
            if weights.dtype != torch.float32:
                raise ValueError(f"{fn}: weights must be float32, got {weights.dtype}")
            weights = weights.contiguous()
        # An empty scales tensor on a rank with no tokens still means "scales travel": the
        # output view is returned, filled by the peers that do send.
        has_scales = scales is not None and cfg.scale_dim > 0
        if has_scales:
            scales = _require_tensor(scales, fn, "scales")
            if scales.shape != (n, cfg.scale_dim):
                raise ValueError(
                    f"{fn}: scales must be [num_tokens={n}, scale_dim={cfg.scale_dim}], got shape {tuple(scales.shape)}"
                )
            if scales.element_size() != cfg.scale_type_size:
                raise ValueError(
                    f"{fn}: scales dtype {scales.dtype} is {scales.element_size()} bytes, but "
                    f"scale_type_size is {cfg.scale_type_size}"
                )
            scales = scales.contiguous()
        input = input.contiguous()
        if indices.dtype != TOPK_IDX_DTYPE:
            if n and (indices.min() < -(2**31) or indices.max() >= 2**31):
                raise ValueError(f"{fn}: indices hold values outside int32")
            indices = indices.to(TOPK_IDX_DTYPE)
        indices = indices.contiguous()
        bn, rbn, wpb = self._launch.resolve(
            "dispatch", input.device, input.dtype, n, hidden, block_num, rdma_block_num, warp_per_block
        )
        self._last_path = path
        if path.on_gpu:
            replay_map = self._gpu_replay_map(fn, routing, indices) if routing is not None else None
            outs = self._dispatch_gpu(
                input, weights, scales if has_scales else None, indices, bn, wpb, call_local_expert_count, replay_map
            )
            if routing is not None:
                return outs[:4] + (routing.total_recv_token_num,)
            if return_routing:
                h = self._snapshot_routing_gpu(indices)
                return outs[:4] + (h.total_recv_token_num, h)
            return outs
        replay, replay_forward = (0, 0) if routing is None else self._replay_map(fn, routing, indices)
        out_p, w_p, s_p, i_p, total_p = self._handle.dispatch(
            address(input),
            dtype_code(input.dtype, fn),
            n,
            hidden,
            address(weights),
            address(scales) if has_scales else 0,
            address(indices),
            bn,
            wpb,
            rbn,
            replay,
            replay_forward,
        )
        self._last_dispatch_dtype = input.dtype
        self._last_hidden = hidden
        rows = cfg.max_num_tokens_to_recv
        out = self._view("tok", out_p, (rows, hidden), input.dtype)
        out_w = self._view("w", w_p, (rows, k), torch.float32)
        out_s = self._view("s", s_p, (rows, cfg.scale_dim), scales.dtype) if has_scales else None
        out_i = self._view("i", i_p, (rows, k), TOPK_IDX_DTYPE)
        recv = self._view("n", total_p, (1,), torch.int32)
        self._after_dispatch(out_i, recv, call_local_expert_count)
        if routing is not None:
            if int(recv[0]) != int(routing.total_recv_token_num[0]):
                raise RuntimeError(
                    f"{fn}: replaying the routing handle delivered {int(recv[0])} rows to this PE, "
                    f"the handle's dispatch {int(routing.total_recv_token_num[0])}: every PE must "
                    f"replay the handle of the same dispatch"
                )
            return out, out_w, out_s, out_i, routing.total_recv_token_num
        if return_routing:
            h = self._snapshot_routing(indices)
            return out, out_w, out_s, out_i, h.total_recv_token_num, h
        return out, out_w, out_s, out_i, recv

    # ------------------------------------------------------------------ routing handles

    def _check_routing_support(self, fn: str, replay: bool = False) -> None:
        if self._kernel not in (EpDispatchCombineKernelType.IntraNode, EpDispatchCombineKernelType.InterNodeV1):
            raise NotImplementedError(
                f"{fn}: routing handle path not supported for kernel_type={self._kernel.name}; "
                f"only IntraNode and InterNodeV1 take routing handles (as in MORI)"
            )

    def _snapshot_routing_gpu(self, indices: torch.Tensor) -> EpDispatchRoutingHandle:
        """The layout of the dispatch just enqueued, copied on the GPU (no host sync)."""
        g, cfg, n = self._gpu, self.config, int(indices.shape[0])
        k, rows = cfg.num_experts_per_token, cfg.max_num_tokens_to_recv
        empty = torch.zeros(0, dtype=torch.int32, device=g.device)
        return EpDispatchRoutingHandle(
            disp_dest_tok_id_map=g.view("dest_map", (cfg.max_num_inp_token_per_rank * k,), torch.int64)[
                : n * k
            ].clone(),
            inter_node_disp_dest_tok_id_map=empty,
            inter_node_disp_send_map=empty.clone(),
            total_recv_token_num=g.view("total_recv", (1,), torch.int32).clone(),
            disp_tok_id_to_src_tok_id_local=g.view("disp_src", (rows,), torch.int32).clone(),
            cur_rank_num_token=n,
            indices=indices.clone(),
        )

    def _gpu_replay_map(self, fn: str, routing: EpDispatchRoutingHandle, indices: torch.Tensor) -> torch.Tensor:
        """A handle's dest map checked for a replay on the GPU (by count and tensor kind: comparing
        the routing itself would sync the host)."""
        if not isinstance(routing, EpDispatchRoutingHandle):
            raise ValueError(f"{fn}: routing must be an EpDispatchRoutingHandle, got {type(routing).__name__}")
        n, k = routing.source_token_count(), self.config.num_experts_per_token
        if int(indices.shape[0]) != n:
            raise ValueError(
                f"{fn}: replay dispatch indices has {int(indices.shape[0])} tokens but routing.cur_rank_num_token={n}"
            )
        dm = routing.disp_dest_tok_id_map
        if (
            not isinstance(dm, torch.Tensor)
            or dm.dtype != torch.int64
            or dm.device != self._gpu.device
            or dm.numel() < n * k
        ):
            raise ValueError(
                f"{fn}: routing.disp_dest_tok_id_map must be an int64 tensor on {self._gpu.device} of "
                f"at least {n * k} elements (a handle from this op's dispatch(..., return_routing=True))"
            )
        return dm.reshape(-1)[: n * k].contiguous()

    def _restore_routing_gpu(self, fn: str, routing: EpDispatchRoutingHandle, indices: torch.Tensor) -> None:
        """Puts a handle's layout back into the op's GPU buffers for the combine that follows (device
        copies on the current stream; the routing itself is compared by token count only here)."""
        if not isinstance(routing, EpDispatchRoutingHandle):
            raise ValueError(f"{fn}: routing must be an EpDispatchRoutingHandle, got {type(routing).__name__}")
        g, cfg = self._gpu, self.config
        n, k, rows = routing.source_token_count(), cfg.num_experts_per_token, cfg.max_num_tokens_to_recv
        if int(indices.shape[0]) != n:
            raise ValueError(f"{fn}: indices has {int(indices.shape[0])} tokens but routing.cur_rank_num_token={n}")
        fields = (
            ("disp_dest_tok_id_map", routing.disp_dest_tok_id_map, torch.int64, n * k),
            ("total_recv_token_num", routing.total_recv_token_num, torch.int32, 1),
            ("disp_tok_id_to_src_tok_id_local", routing.disp_tok_id_to_src_tok_id_local, torch.int32, rows),
        )
        for name, t, dtype, need in fields:
            if not isinstance(t, torch.Tensor) or t.dtype != dtype or t.device != g.device or t.numel() < need:
                raise ValueError(
                    f"{fn}: routing.{name} must be a {dtype} tensor on {g.device} of at least {need} "
                    f"elements (a handle from this op's dispatch(..., return_routing=True))"
                )
        g.view("dest_map", (n * k,), torch.int64).copy_(routing.disp_dest_tok_id_map.reshape(-1)[: n * k])
        g.view("total_recv", (1,), torch.int32).copy_(routing.total_recv_token_num.reshape(-1)[:1])
        g.view("disp_src", (rows,), torch.int32).copy_(routing.disp_tok_id_to_src_tok_id_local.reshape(-1)[:rows])

    def _snapshot_routing(self, indices: torch.Tensor) -> EpDispatchRoutingHandle:
        """This dispatch's layout, copied out of the handle (it outlives later dispatches)."""
        cfg, n = self.config, int(indices.shape[0])
        k, rows = cfg.num_experts_per_token, cfg.max_num_tokens_to_recv
        total = int(self._handle.total_recv())
        src = torch.full((rows,), -1, dtype=torch.int32)
        src[:total] = view_at(self._handle.src_token_pos(), (total,), torch.int32)
        inbox, sent = torch.zeros(0, dtype=torch.int32), torch.zeros(0, dtype=torch.uint8)
        if self._kernel == EpDispatchCombineKernelType.InterNodeV1:
            # Ours: the node each token visited (uint8 [tokens * nodes]); this PE's inbox as a
            # forwarder, its entry counts per node, then (source token, local-rank mask) pairs,
            # then the slot each entry took on each PE of this node (what a replay needs).
            nodes, g = self._v1_nodes()
            entries = nodes * cfg.max_num_inp_token_per_rank
            sent = view_at(self._handle.node_sent(), (n * nodes,), torch.uint8).clone()
            inbox = torch.cat(
                [
                    view_at(self._handle.inbox_count(), (nodes,), torch.int32),
                    view_at(self._handle.inbox_meta(), (entries * 2,), torch.int32),
                    view_at(self._handle.forward_slots(), (entries * g,), torch.int32),
                ]
            )
        return EpDispatchRoutingHandle(
            disp_dest_tok_id_map=view_at(self._handle.dest_map(), (n * k,), torch.int64).clone(),
            inter_node_disp_dest_tok_id_map=inbox,
            inter_node_disp_send_map=sent,
            total_recv_token_num=torch.tensor([total], dtype=torch.int32),
            disp_tok_id_to_src_tok_id_local=src,
            cur_rank_num_token=n,
            indices=indices.clone(),
        )

    def _v1_nodes(self) -> tuple[int, int]:
        """InterNodeV1's (nodes, PEs per node)."""
        g = min(self.config.gpu_per_node, self.config.world_size)
        return self.config.world_size // g, g

    def _routing_layout(
        self, fn: str, routing: EpDispatchRoutingHandle, indices: torch.Tensor, replay: bool = False
    ) -> dict:
        """The handle's tensors checked against this call (MORI's checks, and the routing itself)."""
        if not isinstance(routing, EpDispatchRoutingHandle):
            raise ValueError(f"{fn}: routing must be an EpDispatchRoutingHandle, got {type(routing).__name__}")
        cfg = self.config
        n, k = routing.source_token_count(), cfg.num_experts_per_token
        if int(indices.shape[0]) != n:
            raise ValueError(f"{fn}: indices has {int(indices.shape[0])} tokens but routing.cur_rank_num_token={n}")
        dm, tot, src = (
            routing.disp_dest_tok_id_map,
            routing.total_recv_token_num,
            routing.disp_tok_id_to_src_tok_id_local,
        )
        for name, t, dtype, need in (
            ("disp_dest_tok_id_map", dm, torch.int64, n * k),
            ("total_recv_token_num", tot, torch.int32, 1),
            ("disp_tok_id_to_src_tok_id_local", src, torch.int32, 0),
        ):
            if not isinstance(t, torch.Tensor) or t.dtype != dtype or t.device.type != "cpu" or t.numel() < need:
                raise ValueError(
                    f"{fn}: routing.{name} must be a CPU {dtype} tensor of at least {need} elements "
                    f"(a handle from this op's dispatch(..., return_routing=True))"
                )
        total = int(tot.reshape(-1)[0])
        if not 0 <= total <= min(src.numel(), cfg.max_num_tokens_to_recv):
            raise ValueError(f"{fn}: routing.total_recv_token_num is {total}, outside 0..{src.numel()}")
        if routing.indices is not None and not torch.equal(routing.indices.to(indices.dtype), indices):
            raise ValueError(
                f"{fn}: indices differ from the routing the handle was made with (a handle replays one routing)"
            )
        layout = {"dest_map": dm.contiguous(), "total": total, "src": src.contiguous(), "tokens": n}
        if self._kernel == EpDispatchCombineKernelType.InterNodeV1:
            nodes, g = self._v1_nodes()
            entries = nodes * cfg.max_num_inp_token_per_rank
            inbox, sent = routing.inter_node_disp_dest_tok_id_map, routing.inter_node_disp_send_map
            # A combine reads the inbox entries; a replay also the forward slots after them.
            for name, t, dtype, need in (
                ("inter_node_disp_send_map", sent, torch.uint8, n * nodes),
                ("inter_node_disp_dest_tok_id_map", inbox, torch.int32, nodes + entries * (2 + (g if replay else 0))),
            ):
                if not isinstance(t, torch.Tensor) or t.dtype != dtype or t.device.type != "cpu" or t.numel() < need:
                    raise ValueError(
                        f"{fn}: routing.{name} must be a CPU {dtype} tensor of at least {need} elements "
                        f"(InterNodeV1's maps, from this op's dispatch(..., return_routing=True))"
                    )
            inbox = inbox.contiguous()
            layout.update(sent=sent.contiguous(), inbox=inbox, inbox_meta=address(inbox) + 4 * nodes)
        return layout

    def _replay_map(self, fn: str, routing: EpDispatchRoutingHandle, indices: torch.Tensor) -> tuple[int, int]:
        """Addresses of the handle's dest map and (InterNodeV1) forwarding layout, checked."""
        layout = self._routing_layout(fn, routing, indices, replay=True)
        self._replay_keep = layout  # alive during the call
        return address(layout["dest_map"]) or 0, address(layout.get("inbox")) or 0

    def _dispatch_gpu(self, input, weights, scales, indices, bn, wpb, call_local_expert_count, replay=None):
        g, cfg = self._gpu, self.config
        if input.shape[0] > cfg.max_num_inp_token_per_rank:
            raise ValueError(
                f"EpDispatchCombineOp.dispatch: {input.shape[0]} tokens exceed "
                f"max_num_inp_token_per_rank={cfg.max_num_inp_token_per_rank}"
            )
        g.dispatch_send(
            input,
            weights,
            scales,
            indices,
            bn,
            wpb,
            with_recv=self._kernel != EpDispatchCombineKernelType.AsyncLL,
            replay=replay.data_ptr() if replay is not None and replay.numel() else 0,
        )
        self._last_dispatch_dtype = input.dtype
        hidden = input.shape[1]
        self._last_hidden = hidden
        rows, k = cfg.max_num_tokens_to_recv, cfg.num_experts_per_token
        out = g.view("disp_tok", (rows, hidden), input.dtype)
        out_w = g.view("disp_w", (rows, k), torch.float32)
        out_s = g.view("disp_scale", (rows, cfg.scale_dim), scales.dtype) if scales is not None else None
        out_i = g.view("disp_idx", (rows, k), TOPK_IDX_DTYPE)
        recv = g.view("total_recv", (1,), torch.int32)
        self._after_dispatch(out_i, recv, call_local_expert_count)
        return out, out_w, out_s, out_i, recv

    def _after_dispatch(self, out_i: torch.Tensor, recv: torch.Tensor, call_local_expert_count: bool) -> None:
        """Counts local experts now, or (AsyncLL, whose rows arrive at dispatch_recv) at dispatch_recv."""
        self._last_out_indices = (out_i, recv)
        split = self._kernel == EpDispatchCombineKernelType.AsyncLL
        self._count_at_recv = bool(call_local_expert_count) and split
        if call_local_expert_count and not split:
            self._count_local_experts()

    def _count_local_experts(self) -> None:
        out_i, recv = self._last_out_indices
        cfg = self.config
        self.local_expert_count.copy_(count_local_experts(out_i, recv, cfg.rank, cfg.num_experts_per_rank))

    def dispatch_send(
        self,
        input: torch.Tensor,
        weights: Optional[torch.Tensor],
        scales: Optional[torch.Tensor],
        indices: torch.Tensor,
        block_num: int = -1,
        warp_per_block: int = -1,
        call_local_expert_count: bool = False,
    ):
        """Same as ``dispatch`` (the send half for ``AsyncLL``). With ``call_local_expert_count``
        ``op.local_expert_count`` is filled as ``dispatch`` fills it: here, or for ``AsyncLL``
        (whose rows have not arrived yet) by the following ``dispatch_recv``."""
        return self.dispatch(input, weights, scales, indices, block_num, -1, warp_per_block, call_local_expert_count)

    @traced("dispatch_recv")
    def dispatch_recv(
        self, block_num: int = -1, warp_per_block: int = -1, call_local_expert_count: bool = False
    ) -> None:
        """``AsyncLL`` only: wait for every peer's tokens; fills the views ``dispatch_send`` returned.
        ``call_local_expert_count`` (here or at ``dispatch_send``) fills ``op.local_expert_count``."""
        if self._kernel != EpDispatchCombineKernelType.AsyncLL:
            raise ValueError(f"dispatch_recv only supports AsyncLL, got kernel_type={self._kernel.name}")
        self._last_path.dispatch_recv(self, block_num, warp_per_block)
        if (call_local_expert_count or self._count_at_recv) and self._last_out_indices is not None:
            self._count_local_experts()
        self._count_at_recv = False

    # ------------------------------------------------------------------ combine

    @traced("combine")
    def combine(
        self,
        input: torch.Tensor,
        weights: Optional[torch.Tensor],
        indices: torch.Tensor,
        block_num: int = -1,
        rdma_block_num: int = -1,
        warp_per_block: int = -1,
        use_external_inp_buf: int = -1,
        call_reset: bool = False,
        *,
        routing: Optional[EpDispatchRoutingHandle] = None,
    ):
        """Send expert outputs back and sum them per source token (``routing=h``: of the dispatch
        that made routing handle ``h``, whatever ran since; IntraNode).

        ``input`` rows align with the dispatch output rows (at least ``recv_num_token[0]``
        of them; or the registered buffer in zero-copy mode); ``weights`` likewise (or None);
        ``indices`` must be this rank's original ``[num_tokens, top_k]`` routing, as given
        to dispatch. Returns ``(out [max_num_inp_token_per_rank, hidden], out_weights or None)``.
        """
        fn = "EpDispatchCombineOp.combine"
        cfg = self.config
        input = _require_tensor(input, fn, "input")
        indices = _require_tensor(indices, fn, "indices")
        path = self._path_for(fn, input, weights, indices)
        if routing is not None:
            self._check_routing_support(fn)
        if input.dim() != 2:
            raise ValueError(f"{fn}: input must be 2-D [rows, hidden_dim], got shape {tuple(input.shape)}")
        rows, hidden = input.shape
        k = cfg.num_experts_per_token
        if indices.dim() != 2 or indices.shape[1] != k:
            raise ValueError(
                f"{fn}: indices must be this rank's [num_tokens, {k}] routing, "
                f"got shape {tuple(indices.shape)} (MORI issue #475)"
            )
        if weights is not None:
            weights = _require_tensor(weights, fn, "weights")
            if weights.dim() != 2 or weights.shape[1] != k:
                raise ValueError(f"{fn}: weights must be [rows, {k}] aligned with input, got {tuple(weights.shape)}")
            # (on the GPU the count stays on the device: reading it would sync the host)
            received = (
                0
                if path.on_gpu
                else int(routing.total_recv_token_num.reshape(-1)[0])
                if routing is not None
                else path.total_recv(self)
            )
            if weights.shape[0] < received:
                raise ValueError(
                    f"{fn}: weights has {weights.shape[0]} rows, fewer than the {received} received tokens"
                )
            if weights.dtype != torch.float32:
                raise ValueError(f"{fn}: weights must be float32, got {weights.dtype}")
            weights = weights.contiguous()
        if not input.is_contiguous():
            input = input.contiguous()
        if indices.dtype != TOPK_IDX_DTYPE:
            indices = indices.to(TOPK_IDX_DTYPE)
        indices = indices.contiguous()
        external = cfg.use_external_inp_buf if use_external_inp_buf < 0 else bool(use_external_inp_buf)
        if self._quant in BLOCKWISE:
            self._check_blockwise(input.dtype, external)
        bn, rbn, wpb = self._launch.resolve(
            "combine",
            input.device,
            input.dtype,
            indices.shape[0],
            hidden,
            block_num,
            rdma_block_num,
            warp_per_block,
            zero_copy=not external,
            quant_type=str(cfg.quant_type),
        )
        self._last_combine_kernel_name = self._combine_kernel_name(input, weights, external, path)
        if path.on_gpu:
            return self._combine_gpu(input, weights, indices, external, bn, wpb, call_reset, routing)
        layout = self._routing_layout(fn, routing, indices) if routing is not None else None
        made_with = routing.indices.to(TOPK_IDX_DTYPE).contiguous() if layout and routing.indices is not None else None
        route = (
            {}
            if layout is None
            else {
                "routing": True,
                "routing_dest_map": address(layout["dest_map"]),
                "routing_tokens": layout["tokens"],
                "routing_indices": address(made_with),
                "routing_total": layout["total"],
                "routing_src": address(layout["src"]),
            }
        )
        if layout is not None and "sent" in layout:
            route.update(
                routing_node_sent=address(layout["sent"]) or 0,
                routing_inbox_count=address(layout["inbox"]),
                routing_inbox_meta=layout["inbox_meta"],
            )
        out_p, w_p = self._handle.combine(
            address(input),
            dtype_code(input.dtype, fn),
            rows,
            hidden,
            address(weights),
            address(indices),
            indices.shape[0],
            int(external),
            bn,
            wpb,
            rbn,
            **route,
        )
        out = self._view("cout", out_p, (cfg.max_num_inp_token_per_rank, hidden), input.dtype)
        out_w = self._view("cw", w_p, (cfg.max_num_inp_token_per_rank, k), torch.float32) if w_p else None
        if call_reset:
            self.reset()
        return out, out_w

    def _combine_kernel_name(
        self, input: torch.Tensor, weights: Optional[torch.Tensor], external: bool, path: Union[_HostPath, _GpuPath]
    ) -> str:
        """What this combine runs, in MORI's naming where the feature is the same: the kernel type,
        the row type, how rows travel (zero-copy / fp8 cast / blockwise fp8 or fp4 codes with the
        block size and whether weights are summed), and where it runs (our kernels are not MORI's
        GPU specializations: no vec8 / top9 tokens)."""
        dtype = {torch.bfloat16: "bf16", torch.float32: "fp32", torch.float16: "fp16"}.get(
            input.dtype, str(input.dtype).replace("torch.", "")
        )
        parts = [f"EpCombine{self._kernel.name}Kernel", dtype]
        if not external:
            parts.append("zerocopy")
        if int(self._quant) == 1:
            parts.append("fp8cast")
        elif self._quant in BLOCKWISE:
            parts.append("fp4bwq" if self._quant == BLOCKWISE[1] else "fp8bwq")
            if weights is None:
                parts.append("noweight")
            parts.append(f"block{-(-input.shape[1] // self._blockwise_scale_dim)}")
        parts.append(path.device_name)
        return "_".join(parts)

    def _check_blockwise(self, dtype: torch.dtype, external: bool) -> None:
        """MORI's rules for blockwise combine, raised where MORI raises them (at combine, after a
        dispatch that worked): the kernel types it builds, bfloat16 input, an external input."""
        label = "fp4_blockwise" if self._quant == BLOCKWISE[1] else "fp8_blockwise"
        allowed = BLOCKWISE_KERNELS[self._quant]
        if self._kernel.name not in allowed:
            raise ValueError(
                f"{label} combine currently only supports {'/'.join(allowed)} combine (kernel_type={self._kernel.name})"
            )
        if dtype != torch.bfloat16:
            raise ValueError(f"{label} combine only supports bf16, got {dtype}")
        if not external:
            raise ValueError(
                f"{label} combine currently requires use_external_inp_buf=True (zero-copy input "
                f"is read by peers as it is, unquantized)"
            )

    def _combine_gpu(self, input, weights, indices, external, bn, wpb, call_reset, routing=None):
        g, cfg = self._gpu, self.config
        fn = "EpDispatchCombineOp.combine"
        if routing is not None:
            # The handle's layout goes into the buffers the kernels read, and the last dispatch's
            # comes back after the combine (device copies, in stream order); staging is the bulk
            # kind (the pipelined kind follows the map the last dispatch left, not the handle's).
            live_tokens = g.last_num_tokens
            live = self._snapshot_routing_gpu(torch.empty(live_tokens, 0))
            self._restore_routing_gpu(fn, routing, indices)
            pipelined, g.kernels.pipelined_staging = g.kernels.pipelined_staging, False
            try:
                g.last_num_tokens = int(indices.shape[0])
                return self._combine_gpu(input, weights, indices, external, bn, wpb, call_reset)
            finally:
                g.kernels.pipelined_staging = pipelined
                self._restore_routing_gpu(fn, live, torch.empty(live_tokens, 0))
                g.last_num_tokens = live_tokens
        block = 0
        if self._quant in BLOCKWISE:
            block = -(-input.shape[1] // self._blockwise_scale_dim)
            if block % 8:
                raise NotImplementedError(
                    f"{fn}: on CUDA tensors blockwise combine needs blocks of a multiple of 8 "
                    f"values (hidden 7168 at MORI_FP8_COMBINE_SCALE_DIM=56: 128); got "
                    f"quant_type={cfg.quant_type!r}, block {block} (CPU tensors take any)"
                )
        if indices.shape[0] != g.last_num_tokens:
            raise ValueError(
                f"{fn}: indices has {indices.shape[0]} rows but the last dispatch sent "
                f"{g.last_num_tokens} tokens (pass this rank's original routing; MORI issue #475)"
            )
        # Zero-copy (registered buffer) and external input run the same kernel: peers never read
        # the input, this PE's warps push its rows. fp8_direct_cast converts rows as they are pushed.
        fp8 = int(self._quant) == 1
        split = self._kernel == EpDispatchCombineKernelType.AsyncLL
        g.combine(
            input, weights, indices.shape[0], fp8, 1 if split else 0, bn, wpb, block, fp4=self._quant == BLOCKWISE[1]
        )
        hidden, k = input.shape[1], cfg.num_experts_per_token
        out = g.view("comb_out", (cfg.max_num_inp_token_per_rank, hidden), input.dtype)
        out_w = (
            g.view("comb_out_w", (cfg.max_num_inp_token_per_rank, k), torch.float32) if weights is not None else None
        )
        return out, out_w

    def combine_send(
        self,
        input: torch.Tensor,
        weights: Optional[torch.Tensor],
        indices: torch.Tensor,
        block_num: int = -1,
        warp_per_block: int = -1,
    ):
        """Same as ``combine`` (the send half for ``AsyncLL``)."""
        return self.combine(input, weights, indices, block_num, -1, warp_per_block)

    @traced("combine_recv")
    def combine_recv(self, block_num: int = -1, warp_per_block: int = -1) -> None:
        """``AsyncLL`` only: wait for every peer's rows and sum them into the views ``combine_send`` returned."""
        if self._kernel != EpDispatchCombineKernelType.AsyncLL:
            raise ValueError(f"combine_recv only supports AsyncLL, got kernel_type={self._kernel.name}")
        self._last_path.combine_recv(self, block_num, warp_per_block)

    def _gpu_launch(self, phase: str, block_num: int, warp_per_block: int) -> tuple[int, int]:
        bn, _, wpb = self._launch.resolve(
            phase,
            self._gpu.device,
            self._last_dispatch_dtype or self.config.data_type,
            0,
            self._last_hidden,
            block_num,
            -1,
            warp_per_block,
        )
        return bn, wpb

    def _total_recv(self) -> int:
        return self._last_path.total_recv(self)

    def _src_pos(self, total: int) -> torch.Tensor:
        return self._last_path.src_pos(self, total)

    def reset(self) -> None:
        """Kept for MORI compatibility: every counter resets itself inside dispatch/combine."""

    # ------------------------------------------------------------------ introspection

    def get_debug_time_buf(self) -> TraceBuffer:
        """This PE's spans of dispatch/combine calls (``MORI_EP_PROFILE=1`` when the op was built;
        else empty), for :func:`mori.kernel_profiler.export_to_perfetto`."""
        return self._trace if self._trace is not None else TraceBuffer(self.config.rank)

    def get_debug_time_offset(self) -> torch.Tensor:
        """int32 ``[1]``: how many spans :meth:`get_debug_time_buf` holds (MORI's per-warp write
        offsets into its device buffer; our one recorder is the host)."""
        return torch.tensor([len(self._trace) if self._trace is not None else 0], dtype=torch.int32)

    def get_dispatch_src_token_pos(self) -> torch.Tensor:
        """Source of each received row: ``src_rank * max_num_tokens_to_send() + src_token``
        (int32, ``recv_num_token[0]`` entries; a copy)."""
        return self._src_pos(self._total_recv()).clone()

    def decode_send_flat_idx(self, flat_idx):
        """``(src_rank, src_token)`` of a flat source position (int or tensor)."""
        stride = self.config.max_num_tokens_to_send
        if isinstance(flat_idx, torch.Tensor):
            return torch.div(flat_idx, stride, rounding_mode="floor"), torch.remainder(flat_idx, stride)
        return int(flat_idx) // stride, int(flat_idx) % stride

    def get_cur_rank_num_token(self) -> int:
        return self._last_path.cur_rank_num_token(self)

    def get_registered_combine_input_buffer(self, dtype: torch.dtype, hidden_dim: int = -1) -> torch.Tensor:
        """The symmetric buffer zero-copy combine reads: ``[max_num_tokens_to_recv(), hidden]``
        of ``dtype``. Write expert outputs into its first ``recv_num_token[0]`` rows."""
        hidden = self.config.hidden_dim if hidden_dim is None or hidden_dim <= 0 else hidden_dim
        size = torch.empty(0, dtype=dtype).element_size()
        if hidden > self.config.hidden_dim or size > self.config.max_token_type_size:
            raise ValueError(
                f"get_registered_combine_input_buffer: {hidden} x {dtype} rows exceed the buffer's "
                f"hidden_dim={self.config.hidden_dim} x max_token_type_size="
                f"{self.config.max_token_type_size} bytes"
            )
        if self._gpu is not None:
            return self._gpu.view("reg_in", (self.config.max_num_tokens_to_recv, hidden), dtype)
        addr, _ = self._handle.registered_combine_input()
        return self._view("reg", addr, (self.config.max_num_tokens_to_recv, hidden), dtype)

    def last_remote_bytes(self) -> tuple[int, int]:
        """Bytes the last dispatch and combine moved between different PEs (this PE's share)."""
        return int(self._handle.last_dispatch_remote_bytes()), int(self._handle.last_combine_remote_bytes())

    def last_combine_in_place_peers(self) -> int:
        """CPU: how many peers' rows the last combine summed in place, straight from their input in
        the shared tensor arena (``mori.shmem.shared_tensors``) instead of staged copies."""
        if self._cpu_handle is None:
            return 0
        return int(self._handle.last_combine_in_place_peers())

    # ------------------------------------------------------------------ standard MoE (DeepEP layout)

    def convert_dispatch_output(
        self,
        dispatch_out_x: torch.Tensor,
        dispatch_out_topk_idx: torch.Tensor,
        block_num: int = -1,
        warp_per_block: int = -1,
    ):
        """Regroup the last dispatch's rows per local expert:
        ``(packed_recv_x [E_local, world*max_inp, hidden], packed_recv_count [E_local] int32,
        packed_recv_src_info [E_local, world*max_inp] int32 (flat source position, -1 = empty),
        packed_recv_layout_range (empty int64))``."""
        total = self._total_recv()
        src = self._src_pos(total)
        result = standard_moe.pack_by_expert(dispatch_out_x, dispatch_out_topk_idx, total, src, self.config)
        self._std_src_info = result[2]
        return result

    def convert_combine_input(
        self,
        packed_recv_x: torch.Tensor,
        packed_recv_src_info: torch.Tensor,
        packed_recv_layout_range: Optional[torch.Tensor],
        block_num: int = -1,
        warp_per_block: int = -1,
    ) -> torch.Tensor:
        """Sum each received token's local-expert rows back into one row per dispatch output
        row; returns the registered combine input buffer (a view) holding them."""
        total = self._total_recv()
        src = self._src_pos(total)
        reg = self.get_registered_combine_input_buffer(packed_recv_x.dtype, packed_recv_x.shape[2])
        standard_moe.unpack_to_rows(packed_recv_x, packed_recv_src_info, src, reg[:total])
        return reg

    @traced("dispatch_standard_moe")
    def dispatch_standard_moe(
        self, input, weights, scales, indices, block_num: int = -1, rdma_block_num: int = -1, warp_per_block: int = -1
    ):
        """dispatch + convert_dispatch_output."""
        out, _, _, out_i, recv = self.dispatch(
            input, weights, scales, indices, block_num, rdma_block_num, warp_per_block
        )
        if self._kernel == EpDispatchCombineKernelType.AsyncLL:
            self.dispatch_recv()
        return self.convert_dispatch_output(out, out_i)

    @traced("combine_standard_moe")
    def combine_standard_moe(
        self,
        input,
        weights,
        indices,
        block_num: int = -1,
        rdma_block_num: int = -1,
        warp_per_block: int = -1,
        call_reset: bool = False,
    ):
        """convert_combine_input (with the last dispatch_standard_moe's layout) + combine.
        Returns ``(out, None)`` as MORI does."""
        if self._std_src_info is None:
            raise RuntimeError("combine_standard_moe: no dispatch_standard_moe/convert_dispatch_output before it")
        reg = self.convert_combine_input(input, self._std_src_info, None)
        external = 1 if int(self._quant) != 0 else -1  # fp8 casting needs the push path
        out, _ = self.combine(
            reg,
            weights,
            indices,
            block_num,
            rdma_block_num,
            warp_per_block,
            use_external_inp_buf=external,
            call_reset=call_reset,
        )
        if self._kernel == EpDispatchCombineKernelType.AsyncLL:
            self.combine_recv()
        return out, None
