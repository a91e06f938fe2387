# SPDX-License-Identifier: MIT
"""mori.ops.launch_local_expert_count without any shmem runtime (MORI's needs none), on host
memory and (where there is a GPU) on device memory; bad launch shapes are refused."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from mori import _C  # noqa: E402
from mori.core.errors import InvalidArgument  # noqa: E402
from mori.ops import EpDispatchCombineConfig, launch_local_expert_count  # noqa: E402


def _case(seed: int, device: str):
    g = torch.Generator().manual_seed(seed)
    world, epr, k, rank = 4, 8, 6, 2
    cfg = EpDispatchCombineConfig(
        data_type=torch.bfloat16,
        rank=rank,
        world_size=world,
        hidden_dim=16,
        scale_dim=0,
        scale_type_size=4,
        max_token_type_size=4,
        max_num_inp_token_per_rank=40,
        num_experts_per_rank=epr,
        num_experts_per_token=k,
    )
    rows = cfg.max_num_tokens_to_recv
    idx = torch.stack([torch.randperm(world * epr, generator=g)[:k] for _ in range(rows)]).to(torch.int32)
    idx[torch.rand(idx.shape, generator=g) < 0.2] = -1
    total = int(torch.randint(1, rows + 1, (1,), generator=g))
    local = idx[:total].long().flatten() - rank * epr
    want = torch.bincount(local[(local >= 0) & (local < epr)], minlength=epr).to(torch.int32)
    tot = torch.tensor([total], dtype=torch.int32)
    out = torch.full((epr,), -5, dtype=torch.int32)
    return cfg, idx.to(device), tot.to(device), out.to(device), want


def test_host_memory_without_shmem_init():
    assert not _C.shmem.initialized()
    for seed in range(3):
        cfg, idx, tot, out, want = _case(seed, "cpu")
        launch_local_expert_count(cfg, idx.data_ptr(), tot.data_ptr(), out.data_ptr())
        assert torch.equal(out, want), (seed, out, want)
    launch_local_expert_count(cfg, idx.data_ptr(), tot.data_ptr(), out.data_ptr(), block_num=3, warp_per_block=2)
    assert torch.equal(out, want)


@pytest.mark.parametrize(
    "arg,value", [("block_num", 0), ("warp_per_block", 0), ("block_num", -2), ("warp_per_block", 1.5)]
)
def test_bad_launch_shape_is_refused(arg, value):
    cfg, idx, tot, out, _ = _case(9, "cpu")
    with pytest.raises(InvalidArgument, match=arg):
        launch_local_expert_count(cfg, idx.data_ptr(), tot.data_ptr(), out.data_ptr(), **{arg: value})
    assert (out == -5).all()  # nothing written


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or not _C.shmem.built_with_cuda(), reason="needs a CUDA GPU")
def test_device_memory_without_shmem_init():
    assert not _C.shmem.initialized()
    for seed in range(3):
        cfg, idx, tot, out, want = _case(seed, "cuda")
        launch_local_expert_count(
            cfg, idx.data_ptr(), tot.data_ptr(), out.data_ptr(), stream=torch.cuda.current_stream().cuda_stream
        )
        torch.cuda.synchronize()
        assert torch.equal(out.cpu(), want), (seed, out, want)
    with pytest.raises(InvalidArgument, match="one GPU or all host memory"):
        launch_local_expert_count(cfg, idx.data_ptr(), tot.cpu().data_ptr(), out.data_ptr())


def _native_case(seed: int, **fields):
    """MORI's own call (issue 29 item 13): mori.cpp's config, whose max_num_tokens_to_recv is a
    method (and 0 here: the test sets no token counts), random routing, exact counts."""
    import mori

    g = torch.Generator().manual_seed(seed)
    world, epr, k = 4, 3, 2
    rank = int(torch.randint(0, world, (1,), generator=g))
    cfg = mori.cpp.EpDispatchCombineConfig(
        rank=rank, world_size=world, num_experts_per_rank=epr, num_experts_per_token=k, **fields
    )
    rows = int(torch.randint(1, 9, (1,), generator=g))
    idx = torch.stack([torch.randperm(world * epr, generator=g)[:k] for _ in range(rows)]).to(torch.int32)
    local = idx.long().flatten() - rank * epr
    want = torch.bincount(local[(local >= 0) & (local < epr)], minlength=epr).to(torch.int32)
    return mori, cfg, idx, torch.tensor([rows], dtype=torch.int32), torch.full((epr,), -7, dtype=torch.int32), want


def test_mori_cpp_config_counts_exactly():
    for seed in range(4):
        mori, cfg, idx, tot, out, want = _native_case(seed, warp_num_per_block=2, block_num=4)
        for launch in (mori.ops.launch_local_expert_count, mori.cpp.launch_local_expert_count):
            out.fill_(-7)
            launch(cfg, idx.data_ptr(), tot.data_ptr(), out.data_ptr())
            assert torch.equal(out, want), (seed, out, want)
        tot.zero_()
        mori.cpp.launch_local_expert_count(cfg, idx.data_ptr(), tot.data_ptr(), out.data_ptr())
        assert torch.equal(out, torch.zeros_like(want))


@pytest.mark.parametrize(
    "fields,named",
    [
        ({"block_num": 0, "warp_num_per_block": 2}, "block_num"),
        ({"block_num": 4, "warp_num_per_block": 0}, "warp_num_per_block"),
        ({}, "block_num"),
    ],
)
def test_config_without_a_launch_shape_is_a_runtime_error(fields, named):
    """MORI raises RuntimeError when the config's block_num / warp_num_per_block are 0 and the
    call passes -1 (the config's); an explicit shape in the call still works."""
    mori, cfg, idx, tot, out, want = _native_case(11, **fields)
    with pytest.raises(RuntimeError, match=named):
        mori.ops.launch_local_expert_count(cfg, idx.data_ptr(), tot.data_ptr(), out.data_ptr())
    assert (out == -7).all()  # nothing written
    mori.ops.launch_local_expert_count(
        cfg, idx.data_ptr(), tot.data_ptr(), out.data_ptr(), block_num=2, warp_per_block=1
    )
    assert torch.equal(out, want)
