# SPDX-License-Identifier: MIT
"""``EpDispatchCombineConfig``: the fields and defaults of MORI's dataclass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mori import _C
from mori.ep.kernel_type import EpDispatchCombineKernelType, normalize_quant_type


@dataclass
class EpDispatchCombineConfig:
    """Configuration of one ``EpDispatchCombineOp`` (same fields, order and defaults as MORI).

    ``data_type`` is kept for compatibility: each call uses its input tensor's dtype.
    ``max_total_recv_tokens`` (0 = no cap) caps the receive buffer at
    ``world_size * min(ceil(cap / world_size), max_num_inp_token_per_rank)`` rows.
    On CPU, ``block_num`` is the number of token blocks (each reserves its receive rows with
    one atomic per destination, as a GPU thread block does); ``warp_num_per_block``,
    ``rdma_block_num`` and ``num_qp_per_pe`` only matter on GPUs and are checked for range.
    """

    data_type: Any
    rank: int
    world_size: int
    hidden_dim: int
    scale_dim: int
    scale_type_size: int
    max_token_type_size: int
    max_num_inp_token_per_rank: int
    num_experts_per_rank: int
    num_experts_per_token: int
    warp_num_per_block: int = 8
    block_num: int = 80
    max_total_recv_tokens: int = 0
    use_external_inp_buf: bool = True
    kernel_type: EpDispatchCombineKernelType = EpDispatchCombineKernelType.IntraNode
    gpu_per_node: int = 8
    rdma_block_num: int = 0
    num_qp_per_pe: int = 1
    quant_type: str = "none"

    @property
    def max_num_tokens_to_send_per_rank(self) -> int:
        """``max_num_inp_token_per_rank`` (MORI's MaxNumTokensToSendPerRank)."""
        return self.max_num_inp_token_per_rank

    @property
    def max_num_tokens_to_send(self) -> int:
        """Stride of the flat source positions: ``world_size * max_num_inp_token_per_rank``."""
        return self.world_size * self.max_num_inp_token_per_rank

    @property
    def max_num_tokens_to_recv_per_rank(self) -> int:
        if self.max_total_recv_tokens > 0:
            per = -(-self.max_total_recv_tokens // self.world_size)
            return min(per, self.max_num_inp_token_per_rank)
        return self.max_num_inp_token_per_rank

    @property
    def max_num_tokens_to_recv(self) -> int:
        """Rows of every dispatch output (and of the registered combine input)."""
        return self.world_size * self.max_num_tokens_to_recv_per_rank

    def native(self, num_threads: int = 0) -> dict:
        """The fields the C++ handle takes (after checking types the C++ side cannot).

        The field list is the C++ one (``MORI_EP_CONFIG_FIELDS`` in ep/include/mori/ep/config.h,
        as ``mori._C.ep.config_fields()``); this dataclass declares the same names in the same order.
        """
        out: dict[str, Any] = {}
        for name, kind, _default in _C.ep.config_fields():
            value = getattr(self, name)
            if kind == "int":
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ValueError(f"EpDispatchCombineConfig.{name} must be an int, got {value!r}")
                if not -(2**31) <= value < 2**31:
                    raise ValueError(f"EpDispatchCombineConfig.{name} = {value} does not fit int32")
                out[name] = value
            elif kind == "bool":
                out[name] = bool(value)
            elif kind == "EpDispatchCombineKernelType":
                try:
                    out[name] = int(EpDispatchCombineKernelType(int(value)))
                except (TypeError, ValueError):
                    raise ValueError(
                        f"EpDispatchCombineConfig.kernel_type {value!r} is not an EpDispatchCombineKernelType"
                    ) from None
            elif kind == "EpDispatchCombineQuantType":
                out[name] = int(normalize_quant_type(value))
            else:
                raise AssertionError(f"EpDispatchCombineConfig.{name}: unknown native kind {kind!r}")
        out["num_threads"] = int(num_threads)
        return out
