# SPDX-License-Identifier: MIT
"""The EP names MORI's native module exports, for code that imports them from ``mori.cpp``
(``from mori.cpp import EpDispatchCombineConfig``): the C++-shaped config (keyword
constructor with the native defaults, read-write fields, the size methods), the handle, the
two enums, the device clock query and the standalone local expert count. Each is a thin face over :mod:`mori.ep`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mori.ep.config import EpDispatchCombineConfig as _PyConfig
from mori.ep.kernel_type import EpDispatchCombineKernelType, EpDispatchCombineQuantType, normalize_quant_type
from mori.ep.local_expert_count import launch_local_expert_count

# The Python config's fields after data_type (the same names as the native struct's).
_FIELDS = tuple(f.name for f in dataclasses.fields(_PyConfig) if f.name != "data_type")

__all__ = [
    "EpDispatchCombineConfig",
    "EpDispatchCombineHandle",
    "EpDispatchCombineKernelType",
    "EpDispatchCombineQuantType",
    "get_cur_device_wall_clock_freq_mhz",
    "launch_local_expert_count",
]


class EpDispatchCombineConfig:
    """MORI's native config (``mori.cpp.EpDispatchCombineConfig``): every field a keyword with the
    native default; ``max_num_tokens_to_*()`` are methods here (properties on the Python config)."""

    def __init__(
        self,
        rank: int = 0,
        world_size: int = 0,
        hidden_dim: int = 0,
        scale_dim: int = 0,
        scale_type_size: int = 0,
        max_token_type_size: int = 0,
        max_num_inp_token_per_rank: int = 0,
        num_experts_per_rank: int = 0,
        num_experts_per_token: int = 0,
        warp_num_per_block: int = 0,
        block_num: int = 0,
        use_external_inp_buf: bool = True,
        kernel_type: EpDispatchCombineKernelType = EpDispatchCombineKernelType.IntraNode,
        gpu_per_node: int = 8,
        rdma_block_num: int = 0,
        num_qp_per_pe: int = 1,
        quant_type: Any = EpDispatchCombineQuantType.None_,
        max_total_recv_tokens: int = 0,
    ):
        given = locals()
        for name in _FIELDS:
            setattr(self, name, given[name])
        self.quant_type = normalize_quant_type(quant_type)

    def to_python(self, data_type: Any = None) -> _PyConfig:
        """The same fields as a ``mori.ops.EpDispatchCombineConfig``."""
        return _PyConfig(data_type=data_type, **{name: getattr(self, name) for name in _FIELDS})

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
