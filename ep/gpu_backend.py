# SPDX-License-Identifier: MIT
"""The CUDA side of ``EpDispatchCombineOp``: one process per GPU, buffers on the shmem GPU heap.

Every PE allocates the same symmetric block from the runtime's GPU heap (the allocation
``mori.shmem.shmem_malloc`` makes when bound to a GPU), zeroes it, and asks the runtime
for each peer's mapping of it (``shmem_ptr_p2p``). The IntraNode kernels get those per-PE
addresses and run on torch's current stream; their counters and signals reset themselves
on the device, so nothing here synchronizes the host and dispatch/combine can be captured
in CUDA graphs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from mori import _C
from mori.core.errors import Unavailable
from mori.shmem.tensor_utils import wrap_device_pointer

_COMBINE_CODES = {torch.float32: int(_C.core.DataType.Float32), torch.bfloat16: int(_C.core.DataType.BFloat16)}
if hasattr(torch, "float4_e2m1fn_x2"):  # fp4 rows: summed in fp32 and rounded back to e2m1, as on CPU
    _COMBINE_CODES[torch.float4_e2m1fn_x2] = int(_C.core.DataType.Float4E2M1x2)

# Per-PE buffers that peers write (their addresses travel to the kernels for every PE).
_SHARED = (
    "disp_tok",
    "disp_w",
    "disp_idx",
    "disp_scale",
    "disp_src",
    "counter",
    "disp_sig",
    "comb_stage",
    "comb_stage_w",
    "comb_flag",
    "comb_done",
    "reg_in",
    "comb_ready",
    "disp_inv",
)
# Buffers only this PE touches.
_LOCAL = ("dest_map", "total_recv", "state", "comb_out", "comb_out_w")


def _align(v: int) -> int:
    return (v + 255) // 256 * 256


@dataclass
class _PendingCombine:
    dtype: torch.dtype
    hidden: int
    weights: bool
    num_tokens: int
    fp8: bool
    block: int
    fp4: bool = False


class GpuIntraNode:
    """Symmetric GPU buffers and kernel launches of one PE (collective construction)."""

    def __init__(self, cfg):
        native = _C.shmem
        self.cfg = cfg
        self.device = torch.device("cuda", int(native.gpu_device()))
        world, rank, k = cfg.world_size, cfg.rank, cfg.num_experts_per_token
        self.world, self.rank, self.topk = world, rank, k
        self.max_recv = int(cfg.max_num_tokens_to_recv)
        self.max_send = int(cfg.max_num_tokens_to_send)
        self.max_inp = int(cfg.max_num_inp_token_per_rank)
        self.max_row = cfg.hidden_dim * cfg.max_token_type_size
        self.scale_bytes = cfg.scale_dim * cfg.scale_type_size
        stage_rows = world * self.max_inp
        sizes = {
            "disp_tok": self.max_recv * self.max_row,
            "disp_w": self.max_recv * k * 4,
            "disp_idx": self.max_recv * k * 4,
            "disp_scale": self.max_recv * self.scale_bytes + 16,
            "disp_src": self.max_recv * 4,
            "counter": 16,
            "disp_sig": 2 * world * 8,
            "comb_stage": stage_rows * self.max_row,
            "comb_stage_w": stage_rows * k * 4,
            "comb_flag": stage_rows * 4,
            "comb_done": world * 8,
            "comb_ready": world * 8,
            "disp_inv": stage_rows * 8,
            "dest_map": self.max_inp * k * 8,
            "total_recv": 4,
            "state": int(_C.ep.PeKernels.state_words(world)) * 8,
            "comb_out": self.max_inp * self.max_row,
            "comb_out_w": self.max_inp * k * 4,
            # zero-copy combine input (get_registered_combine_input_buffer)
            "reg_in": self.max_recv * self.max_row,
        }
        off, offsets = 0, {}
        for name, size in sizes.items():
            offsets[name] = off
            off = _align(off + size)
        self.nbytes = off
        # The same path as mori.shmem.shmem_malloc on a bound PE: one heap, collective.
        self.base = int(native.gpu_malloc(off, 256))
        with torch.cuda.device(self.device):
            wrap_device_pointer(self.base, off, torch.uint8, (off,)).zero_()
            torch.cuda.synchronize(self.device)
        native.barrier_all()  # every PE's counters and signals are zero before anyone's first round
        self.addr = {name: self.base + o for name, o in offsets.items()}
        peers = {name: [] for name in _SHARED}
        for pe in range(world):
            remote = self.base if pe == rank else int(native.ptr(self.base, pe))
            if remote == 0:
                raise Unavailable(
                    f"EpDispatchCombineOp: PE {pe}'s GPU heap is not P2P-reachable from PE {rank} "
                    f"(other node or MORI_DISABLE_P2P); the CUDA IntraNode kernels need NVLink/P2P peers"
                )
            for name in _SHARED:
                peers[name].append(remote + offsets[name])
        local = {name: self.addr[name] for name in _LOCAL}
        self.kernels = _C.ep.PeKernels(
            rank,
            world,
            k,
            cfg.num_experts_per_rank,
            self.max_inp,
            self.max_recv,
            self.max_send,
            self.scale_bytes,
            peers,
            local,
        )
        self._views: dict = {}
        self.pending: Optional[_PendingCombine] = None
        self.last_num_tokens = 0

    def free(self) -> None:
        """Collective: give the block back to the GPU heap (kernels using it must be done)."""
        if self.base:
            torch.cuda.synchronize(self.device)
            _C.shmem.gpu_free(self.base)
            self.base = 0

    # ------------------------------------------------------------------ views

    def view(self, name: str, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
        key = (name, shape, dtype)
        t = self._views.get(key)
        if t is None:
            numel = 1
            for d in shape:
                numel *= d
            t = wrap_device_pointer(self.addr[name], numel * dtype.itemsize, dtype, shape)
            self._views[key] = t
        return t

    # ------------------------------------------------------------------ launches

    def grid(self, blocks: int, warps: int) -> tuple[int, int]:
        """-1 means the config's block_num / warp_num_per_block (as in MORI)."""
        return (blocks if blocks > 0 else self.cfg.block_num, warps if warps > 0 else self.cfg.warp_num_per_block)

    @staticmethod
    def stream() -> int:
        return int(torch.cuda.current_stream().cuda_stream)

    def dispatch_send(
        self,
        x: torch.Tensor,
        w: Optional[torch.Tensor],
        s: Optional[torch.Tensor],
        idx: torch.Tensor,
        blocks: int,
        warps: int,
        with_recv: bool,
        replay: int = 0,
    ) -> None:
        """with_recv: the same launch also waits for the peers (else dispatch_recv does); replay: the
        device address of a routing handle's dest map (rows go to its slots)."""
        row_bytes = x.shape[1] * x.element_size()
        if row_bytes > self.max_row:
            raise ValueError(
                f"EpDispatchCombineOp.dispatch: rows of {row_bytes} bytes exceed hidden_dim x "
                f"max_token_type_size = {self.max_row}"
            )
        self.last_num_tokens = x.shape[0]
        blocks, warps = self.grid(blocks, warps)
        self.kernels.dispatch_send(
            x.data_ptr() if x.numel() else 0,
            row_bytes,
            w.data_ptr() if w is not None and w.numel() else 0,
            s.data_ptr() if s is not None and s.numel() else 0,
            idx.data_ptr() if idx.numel() else 0,
            x.shape[0],
            blocks,
            warps,
            with_recv,
            self.stream(),
            replay,
        )

    def dispatch_recv(self) -> None:
        self.kernels.dispatch_recv(self.stream())

    def combine(
        self,
        x: torch.Tensor,
        w: Optional[torch.Tensor],
        num_tokens: int,
        fp8: bool,
        phase: int,
        blocks: int,
        warps: int,
        block: int = 0,
        fp4: bool = False,
    ) -> None:
        """phase 0: send and sum in one kernel; 1: send only; 2: sum only (AsyncLL's halves).
        ``block`` > 0: blockwise rows, e4m3 codes (``fp4``: packed e2m1 codes) + one fp32 scale per
        ``block`` values."""
        fn = "EpDispatchCombineOp.combine"
        if x.dtype not in _COMBINE_CODES:
            raise NotImplementedError(
                f"{fn}: CUDA combine supports float32, bfloat16 and float4_e2m1fn_x2, got {x.dtype}"
            )
        if x.dtype not in (torch.float32, torch.bfloat16) and (fp8 or block):
            raise ValueError(
                f"{fn}: fp8_direct_cast and the blockwise combines need float32/bfloat16 input, got "
                f"{x.dtype} (combine fp4 rows with quant_type none)"
            )
        hidden = x.shape[1]
        if hidden * x.element_size() > self.max_row or hidden % 8:
            raise ValueError(
                f"{fn}: rows of {hidden} x {x.dtype} must fit hidden_dim x max_token_type_size = "
                f"{self.max_row} bytes, with hidden a multiple of 8"
            )
        if block:
            staged = ((hidden // 2 if fp4 else hidden) + 4 * -(-hidden // block) + 15) // 16 * 16
            if staged > self.max_row:
                raise ValueError(
                    f"{fn}: blockwise rows of {staged} bytes (codes + scales) exceed hidden_dim x "
                    f"max_token_type_size = {self.max_row}"
                )
        blocks, warps = self.grid(blocks, warps)
        zero_copy = x.numel() > 0 and x.data_ptr() == self.addr["reg_in"]
        self.kernels.combine(
            x.data_ptr() if x.numel() else 0,
            w.data_ptr() if w is not None and w.numel() else 0,
            w is not None,
            _COMBINE_CODES[x.dtype],
            hidden,
            fp8,
            num_tokens,
            phase,
            zero_copy,
            blocks,
            warps,
            self.stream(),
            block,
            fp4,
        )
        if phase == 1:
            self.pending = _PendingCombine(x.dtype, hidden, w is not None, num_tokens, fp8, block, fp4)

    def combine_recv(self, blocks: int, warps: int) -> None:
        p = self.pending
        if p is None:
            raise RuntimeError("EpDispatchCombineOp.combine_recv: no combine_send before it")
        blocks, warps = self.grid(blocks, warps)
        self.kernels.combine(
            0,
            0,
            p.weights,
            _COMBINE_CODES[p.dtype],
            p.hidden,
            p.fp8,
            p.num_tokens,
            2,
            False,
            blocks,
            warps,
            self.stream(),
            p.block,
            p.fp4,
        )
        self.pending = None
