# SPDX-License-Identifier: MIT
"""``GpuEpGroup``: the CUDA IntraNode kernels driven from one process for the GPUs of a node
(one EP rank per GPU, buffers reached by NVLink peer access), with torch views of every
rank's outputs. It tests and benchmarks the kernels on a GPU machine; ``EpDispatchCombineOp``
itself runs on the host symmetric heap (CPU tensors).
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from mori import _C
from mori.ep.tensors import dtype_code

_COMBINE_CODES = {torch.float32: 0, torch.bfloat16: 1}


class _DeviceArray:
    """Exposes device memory to torch.as_tensor (bytes; viewed as any dtype afterwards)."""

    def __init__(self, addr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (addr, False), "version": 3}


def device_view(addr: int, shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    numel = 1
    for s in shape:
        numel *= s
    nbytes = numel * torch.empty(0, dtype=dtype).element_size()
    raw = torch.as_tensor(_DeviceArray(addr, nbytes), device=device)
    return raw.view(dtype).view(tuple(shape))


class GpuEpGroup:
    def __init__(self, devices: Sequence[int], hidden: int, topk: int, experts_per_rank: int, max_inp: int,
                 scale_dim: int = 0, scale_type_size: int = 4, max_token_type_size: int = 2):
        if not getattr(_C.ep, "cuda_built", False):
            raise NotImplementedError("this MORI was built without CUDA")
        self.devices = [torch.device("cuda", d) for d in devices]
        self.world = len(devices)
        self.hidden, self.topk, self.epr, self.max_inp = hidden, topk, experts_per_rank, max_inp
        self.max_recv = self.world * max_inp
        self.max_send = self.world * max_inp
        self.scale_dim, self.scale_type_size = scale_dim, scale_type_size
        self._g = _C.ep.GpuGroup(list(devices), topk, experts_per_rank, max_inp, self.max_recv,
                                 scale_dim * scale_type_size, hidden * max_token_type_size)
        self._bufs = [self._g.buffers(r) for r in range(self.world)]
        self._combine_dtype = {}

    def _stream(self, rank: int, stream: Optional[torch.cuda.Stream]) -> int:
        return (stream or torch.cuda.current_stream(self.devices[rank])).cuda_stream

    def dispatch_send(self, rank: int, x: torch.Tensor, weights: Optional[torch.Tensor], scales: Optional[torch.Tensor],
                      indices: torch.Tensor, block_num: int = 64, warp_per_block: int = 16, stream=None) -> None:
        dtype_code(x.dtype, "GpuEpGroup.dispatch")
        self._g.dispatch_send(rank, x.data_ptr(), x.shape[1] * x.element_size(),
                              weights.data_ptr() if weights is not None else 0,
                              scales.data_ptr() if scales is not None and scales.numel() else 0,
                              indices.data_ptr(), x.shape[0], block_num, warp_per_block, self._stream(rank, stream))

    def dispatch_recv(self, rank: int, stream=None) -> None:
        self._g.dispatch_recv(rank, self._stream(rank, stream))

    def combine_send(self, rank: int, x: torch.Tensor, weights: Optional[torch.Tensor], block_num: int = 64,
                     warp_per_block: int = 16, stream=None) -> None:
        self._g.combine_send(rank, x.data_ptr(), _COMBINE_CODES[x.dtype], x.shape[1],
                             weights.data_ptr() if weights is not None else 0, block_num, warp_per_block,
                             self._stream(rank, stream))

    def combine_recv(self, rank: int, dtype: torch.dtype, num_tokens: int, weights: bool = True, block_num: int = 64,
                     warp_per_block: int = 16, stream=None) -> None:
        self._g.combine_recv(rank, _COMBINE_CODES[dtype], self.hidden, weights, num_tokens, block_num, warp_per_block,
                             self._stream(rank, stream))

    def outputs(self, rank: int, dtype: torch.dtype, scale_dtype: Optional[torch.dtype] = None):
        """(out, out_weights, out_scales, out_indices, recv_num_token) views of rank's buffers."""
        b, dev = self._bufs[rank], self.devices[rank]
        out = device_view(b["disp_tok"], (self.max_recv, self.hidden), dtype, dev)
        w = device_view(b["disp_w"], (self.max_recv, self.topk), torch.float32, dev)
        s = (device_view(b["disp_scale"], (self.max_recv, self.scale_dim), scale_dtype, dev)
             if self.scale_dim and scale_dtype is not None else None)
        i = device_view(b["disp_idx"], (self.max_recv, self.topk), torch.int32, dev)
        n = device_view(b["total_recv"], (1,), torch.int32, dev)
        return out, w, s, i, n

    def src_token_pos(self, rank: int) -> torch.Tensor:
        return device_view(self._bufs[rank]["disp_src"], (self.max_recv,), torch.int32, self.devices[rank])

    def combine_outputs(self, rank: int, dtype: torch.dtype):
        b, dev = self._bufs[rank], self.devices[rank]
        return (device_view(b["comb_out"], (self.max_inp, self.hidden), dtype, dev),
                device_view(b["comb_out_w"], (self.max_inp, self.topk), torch.float32, dev))
