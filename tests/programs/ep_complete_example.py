# SPDX-License-Identifier: MIT
"""The "Complete Example" of MORI's EP guide (seed 002, section 7), run on CPU.

Only the device changed: CUDA device/NCCL/synchronize became CPU/gloo/no-op. With the
argument ``cuda`` it runs as the guide wrote it (one GPU per rank, nccl). Launched
by `mori run -n N` (which sets MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE), or, without a
launcher, by torch.multiprocessing.spawn as in the guide. The guide's example checks
nothing; the two asserts at the end (marked) make it a test.
"""

import os
import sys
import torch
import torch.distributed as dist
import mori

os.environ["MORI_SHMEM_HEAP_SIZE"] = "4G"
ON_GPU = len(sys.argv) > 1 and sys.argv[1] == "cuda"  # added: the guide's own device


def _sync():
    if ON_GPU:
        torch.cuda.synchronize()


def run_ep(rank, world_size):
    # Setup
    if ON_GPU:
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        dist.init_process_group(backend="cpu:gloo,cuda:nccl", rank=rank, world_size=world_size, device_id=device)
    else:
        device = torch.device("cpu")  # changed: was torch.cuda.set_device(rank); torch.device("cuda", rank)
        dist.init_process_group(
            backend="gloo",  # changed: was "cpu:gloo,cuda:nccl" with device_id=device
            rank=rank,
            world_size=world_size,
        )
    world_group = dist.group.WORLD
    torch._C._distributed_c10d._register_process_group("default", world_group)
    mori.shmem.shmem_torch_process_group_init("default")

    # Configuration
    config = mori.ops.EpDispatchCombineConfig(
        data_type=torch.bfloat16,
        rank=rank,
        world_size=world_size,
        hidden_dim=7168,
        scale_dim=0,
        scale_type_size=torch.tensor([], dtype=torch.float8_e4m3fnuz).element_size(),
        max_token_type_size=torch.tensor([], dtype=torch.float32).element_size(),
        max_num_inp_token_per_rank=4096,
        num_experts_per_rank=32,
        num_experts_per_token=8,
        use_external_inp_buf=False,
    )

    op = mori.ops.EpDispatchCombineOp(config)

    # Generate test data
    num_tokens = 128
    input_data = torch.randn(num_tokens, config.hidden_dim, dtype=torch.bfloat16, device=device)
    weights = torch.rand(num_tokens, config.num_experts_per_token, dtype=torch.float32, device=device)
    scales = torch.empty(num_tokens, 0, dtype=torch.float8_e4m3fnuz, device=device)

    # Random top-K expert selection
    indices = torch.stack(
        [
            torch.randperm(config.num_experts_per_rank * world_size, device=device)[: config.num_experts_per_token]
            for _ in range(num_tokens)
        ]
    ).to(torch.int32)

    # Dispatch tokens to experts
    dispatch_out, dispatch_w, dispatch_s, dispatch_idx, recv_count = op.dispatch(
        input_data, weights, scales, indices, block_num=80, warp_per_block=16
    )
    _sync()  # changed: torch.cuda.synchronize() (a no-op on CPU: CPU ops complete on return)

    total_recv = recv_count[0].item()
    print(f"Rank {rank}: sent {num_tokens} tokens, received {total_recv}")

    # Simulate expert computation (identity for testing)
    expert_output = dispatch_out[:total_recv].to(torch.bfloat16)

    # Combine results back
    combine_out, combine_w = op.combine(
        expert_output,
        dispatch_w,
        indices,
        block_num=80,
        warp_per_block=8,
        call_reset=True,  # reset automatically
    )
    _sync()  # changed: torch.cuda.synchronize()

    # added for the test: identity experts give input x (unique destination ranks).
    ranks = (indices // config.num_experts_per_rank).tolist()
    input_data, weights = input_data.cpu(), weights.cpu()
    combine_out, combine_w = combine_out.cpu(), combine_w.cpu()
    mult = torch.tensor([float(len(set(r))) for r in ranks])
    assert torch.allclose(combine_out[:num_tokens].float(), input_data.float() * mult[:, None], atol=1e-2, rtol=1e-2)
    assert torch.allclose(combine_w[:num_tokens], weights * mult[:, None], rtol=1e-6)

    # Cleanup
    del op
    mori.shmem.shmem_finalize()
    dist.destroy_process_group()


if __name__ == "__main__":
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # added: launched by `mori run`
        run_ep(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    else:
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = "12355"
        world_size = 8
        torch.multiprocessing.spawn(run_ep, args=(world_size,), nprocs=world_size, join=True)
