# SPDX-License-Identifier: MIT
"""``mori.ops.dispatch_combine``: the module path ROCm/mori gives its EP op. Integrations
import it by that name (vLLM: ``import mori.ops.dispatch_combine as mori_ops``)."""

from mori.ep.config import EpDispatchCombineConfig
from mori.ep.kernel_type import EpDispatchCombineKernelType, EpDispatchCombineQuantType
from mori.ep.op import TOPK_IDX_DTYPE, EpDispatchCombineOp, warmup_jit_kernels
from mori.ep.routing import EpDispatchRoutingHandle

__all__ = [
    "EpDispatchCombineConfig",
    "EpDispatchCombineKernelType",
    "EpDispatchCombineOp",
    "EpDispatchCombineQuantType",
    "EpDispatchRoutingHandle",
    "TOPK_IDX_DTYPE",
    "warmup_jit_kernels",
]
