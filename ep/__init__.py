# SPDX-License-Identifier: MIT
"""``mori.ep`` (also ``mori.ops``): MoE expert-parallel dispatch/combine with MORI's API.

    import mori
    mori.shmem.shmem_torch_process_group_init("default")
    config = mori.ops.EpDispatchCombineConfig(data_type=torch.bfloat16, rank=rank, world_size=world, ...)
    op = mori.ops.EpDispatchCombineOp(config)
    out, out_w, out_s, out_idx, recv_num_token = op.dispatch(x, weights, scales, indices)
    combined, combined_w = op.combine(expert_out, out_w, indices)

See docs/ep.md.
"""

from mori.ep.config import EpDispatchCombineConfig
from mori.ep.kernel_type import EpDispatchCombineKernelType, EpDispatchCombineQuantType
from mori.ep.local_expert_count import launch_local_expert_count
from mori.ep.op import TOPK_IDX_DTYPE, EpDispatchCombineOp, warmup_jit_kernels
from mori.ep.routing import EpDispatchRoutingHandle

__all__ = [
    "EpDispatchCombineConfig",
    "EpDispatchCombineKernelType",
    "EpDispatchCombineOp",
    "EpDispatchCombineQuantType",
    "EpDispatchRoutingHandle",
    "TOPK_IDX_DTYPE",
    "launch_local_expert_count",
    "warmup_jit_kernels",
]
