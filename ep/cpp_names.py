# SPDX-License-Identifier: MIT
"""The EP names MORI's native module exports, for code that imports them from ``mori.cpp``
(``from mori.cpp import EpDispatchCombineConfig``): the C++-shaped config (keyword
constructor with the native defaults, read-write fields, the size methods), the handle, the
two enums, the device clock query and the standalone local expert count. Each is a thin face over :mod:`mori.ep`.
"""
from __future__ import annotations

from typing import Any

from mori.ep.config import EpDispatchCombineConfig as _PyConfig
from mori.ep.kernel_type import EpDispatchCombineKernelType, EpDispatchCombineQuantType, normalize_quant_type
from mori.ep.local_expert_count import launch_local_expert_count

__all__ = ["EpDispatchCombineConfig", "EpDispatchCombineHandle", "EpDispatchCombineKernelType",
           "EpDispatchCombineQuantType", "get_cur_device_wall_clock_freq_mhz", "launch_local_expert_count"]


class EpDispatchCombineConfig:
    """MORI's native config (``mori.cpp.EpDispatchCombineConfig``): every field a keyword with the
    native default; ``max_num_tokens_to_*()`` are methods here (properties on the Python config)."""

    def __init__(self, rank: int = 0, world_size: int = 0, hidden_dim: int = 0, scale_dim: int = 0,
                 scale_type_size: int = 0, max_token_type_size: int = 0, max_num_inp_token_per_rank: int = 0,
                 num_experts_per_rank: int = 0, num_experts_per_token: int = 0, warp_num_per_block: int = 0,
                 block_num: int = 0, use_external_inp_buf: bool = True,
                 kernel_type: EpDispatchCombineKernelType = EpDispatchCombineKernelType.IntraNode,
                 gpu_per_node: int = 8, rdma_block_num: int = 0, num_qp_per_pe: int = 1,
                 quant_type: Any = EpDispatchCombineQuantType.None_, max_total_recv_tokens: int = 0):
        self.rank, self.world_size, self.hidden_dim = rank, world_size, hidden_dim
        self.scale_dim, self.scale_type_size, self.max_token_type_size = scale_dim, scale_type_size, max_token_type_size
        self.max_num_inp_token_per_rank = max_num_inp_token_per_rank
        self.num_experts_per_rank, self.num_experts_per_token = num_experts_per_rank, num_experts_per_token
        self.warp_num_per_block, self.block_num = warp_num_per_block, block_num
        self.use_external_inp_buf, self.kernel_type = use_external_inp_buf, kernel_type
        self.gpu_per_node, self.rdma_block_num, self.num_qp_per_pe = gpu_per_node, rdma_block_num, num_qp_per_pe
        self.quant_type, self.max_total_recv_tokens = normalize_quant_type(quant_type), max_total_recv_tokens

    def to_python(self, data_type: Any = None) -> _PyConfig:
        """The same fields as a ``mori.ops.EpDispatchCombineConfig``."""
        return _PyConfig(data_type=data_type, rank=self.rank, world_size=self.world_size, hidden_dim=self.hidden_dim,
                         scale_dim=self.scale_dim, scale_type_size=self.scale_type_size,
                         max_token_type_size=self.max_token_type_size,
                         max_num_inp_token_per_rank=self.max_num_inp_token_per_rank,
                         num_experts_per_rank=self.num_experts_per_rank,
                         num_experts_per_token=self.num_experts_per_token,
                         warp_num_per_block=self.warp_num_per_block, block_num=self.block_num,
                         max_total_recv_tokens=self.max_total_recv_tokens,
                         use_external_inp_buf=self.use_external_inp_buf, kernel_type=self.kernel_type,
                         gpu_per_node=self.gpu_per_node, rdma_block_num=self.rdma_block_num,
                         num_qp_per_pe=self.num_qp_per_pe, quant_type=self.quant_type)

    def max_num_tokens_to_send_per_rank(self) -> int:
        return self.to_python().max_num_tokens_to_send_per_rank

    def max_num_tokens_to_send(self) -> int:
        return self.to_python().max_num_tokens_to_send

    def max_num_tokens_to_recv_per_rank(self) -> int:
        return self.to_python().max_num_tokens_to_recv_per_rank

    def max_num_tokens_to_recv(self) -> int:
        return self.to_python().max_num_tokens_to_recv

    def __repr__(self) -> str:
        return f"mori.cpp.{self.to_python()!r}".replace("data_type=None, ", "")


class EpDispatchCombineHandle:
    """MORI's native handle: ``EpDispatchCombineHandle(config)`` allocates one PE's symmetric EP
    buffers (collective, after shmem init) and checks the config, naming a bad field. Here it
    holds the host handle the op uses (``mori.ops.EpDispatchCombineOp`` is the API that runs
    dispatch and combine)."""

    def __init__(self, config: Any = None):
        from mori import _C

        if config is None:
            config = EpDispatchCombineConfig()
        py = config.to_python() if isinstance(config, EpDispatchCombineConfig) else config
        self.config = config
        self._native = _C.ep.EpHandle(py.native())


def get_cur_device_wall_clock_freq_mhz() -> int:
    """Ticks per microsecond of the clock our EP spans use: nanoseconds on the host and on CUDA
    (CUDA events), so 1000."""
    return 1000
