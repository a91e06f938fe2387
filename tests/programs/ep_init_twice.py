# SPDX-License-Identifier: MIT
"""A second shmem init in one process (vLLM and SGLang call shmem_torch_process_group_init for
every EP group they build): MORI returns 0, and so do we; an init as another PE or over another
torch group is an error naming both; EP keeps working. torch.multiprocessing + gloo, as MORI's
seeds. Launch: python ep_init_twice.py N
"""

from __future__ import annotations

import sys
import threading

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mori.core.ports import restartable_port


def expect_usage_error(needles: tuple, fn, *args) -> None:
    from mori.core.errors import InvalidUsage

    try:
        fn(*args)
    except InvalidUsage as exc:
        assert all(n in str(exc) for n in needles), f"{exc} does not mention {needles}"
        return
    raise AssertionError(f"{fn.__name__}{args[:3]} did not raise InvalidUsage")


def ep_round(rank: int, world: int, seed: int) -> None:
    from mori.ops import EpDispatchCombineConfig, EpDispatchCombineOp

    cfg = EpDispatchCombineConfig(
        data_type=torch.float32,
        rank=rank,
        world_size=world,
        hidden_dim=32,
        scale_dim=0,
        scale_type_size=4,
        max_token_type_size=4,
        max_num_inp_token_per_rank=16,
        num_experts_per_rank=2,
        num_experts_per_token=2,
    )
    op = EpDispatchCombineOp(cfg)
    g = torch.Generator().manual_seed(seed * 100 + rank)
    x = torch.randn(16, 32, generator=g)
    idx = torch.stack([torch.randperm(2 * world, generator=g)[:2] for _ in range(16)]).to(torch.int32)
    out = op.dispatch(x, None, None, idx)
    comb, _ = op.combine(out[0][: int(out[4][0])], None, idx)
    mult = torch.tensor([float(len({int(e) // 2 for e in row})) for row in idx.tolist()])
    assert torch.allclose(comb[:16], x * mult[:, None], atol=1e-5), f"PE {rank}: EP round {seed}"


def worker(rank: int, world: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch._C._distributed_c10d._register_process_group("default", dist.group.WORLD)
    import mori.shmem as sh

    assert sh.shmem_torch_process_group_init("default") == 0
    ep_round(rank, world, 1)
    assert sh.shmem_torch_process_group_init("default") == 0  # MORI: idempotent
    assert (sh.shmem_mype(), sh.shmem_npes()) == (rank, world)
    uid = sh.shmem_get_unique_id()
    assert sh.shmem_init_attr(sh.MORI_SHMEM_INIT_WITH_UNIQUEID, rank, world, uid) == 0
    assert sh.shmem_init() == 0  # no launcher environment here: "as whatever came first"
    ep_round(rank, world, 2)
    # Another group (same members): an error naming both groups, on every PE alike.
    other = dist.new_group(list(range(world)))
    torch._C._distributed_c10d._register_process_group("other", other)
    expect_usage_error(("'default'", "'other'"), sh.shmem_torch_process_group_init, "other")
    # Another PE or another job size: an error naming both.
    expect_usage_error(
        (f"PE {rank} of {world}", f"PE {(rank + 1) % world} of {world}", "threads as PEs"),
        sh.shmem_init_attr,
        sh.MORI_SHMEM_INIT_WITH_UNIQUEID,
        (rank + 1) % world,
        world,
        uid,
    )
    expect_usage_error(
        (f"PE {rank} of {world}", f"of {world + 1}", "shmem_finalize"),
        sh.shmem_init_attr,
        sh.MORI_SHMEM_INIT_WITH_UNIQUEID,
        rank,
        world + 1,
        uid,
    )
    # A thread asking for this PE gets 0; a thread asking to be another PE (MORI's single-process
    # multi-thread mode) gets the error at once instead of a deadlock.
    results: list = []

    def as_pe(r: int) -> None:
        try:
            results.append((r, sh.shmem_init_attr(sh.MORI_SHMEM_INIT_WITH_UNIQUEID, r, world, uid)))
        except Exception as exc:  # noqa: BLE001 (reported below)
            results.append((r, exc))

    threads = [threading.Thread(target=as_pe, args=(r,)) for r in (rank, (rank + 1) % world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    got = dict(results)
    assert got[rank] == 0, got
    assert "threads as PEs" in str(got[(rank + 1) % world]), got
    ep_round(rank, world, 3)
    sh.shmem_finalize()
    # After finalize a fresh init works (and is a new job).
    assert sh.shmem_torch_process_group_init("default") == 0
    ep_round(rank, world, 4)
    sh.shmem_finalize()
    dist.destroy_process_group()
    print(f"PE {rank}/{world}: init twice ok", flush=True)


if __name__ == "__main__":
    n = int(sys.argv[1])
    port = restartable_port()  # torch's store: rank 0 binds it while the others may dial it
    mp.spawn(worker, args=(n, port), nprocs=n, join=True)
