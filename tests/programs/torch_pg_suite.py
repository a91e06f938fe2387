# SPDX-License-Identifier: MIT
"""torch.multiprocessing + gloo process group + shmem_torch_process_group_init, as in MORI's seeds."""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mori.core.ports import restartable_port

sys.path.insert(0, os.path.dirname(__file__))


def worker(rank: int, world: int, port: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch._C._distributed_c10d._register_process_group("default", dist.group.WORLD)
    import mori

    assert mori.shmem.shmem_torch_process_group_init("default") == 0
    assert mori.shmem.shmem_mype() == rank and mori.shmem.shmem_npes() == world
    # MORI's own functions on the same runtime
    ptr = mori.shmem.shmem_malloc_align(256, 4096)
    assert ptr % 256 == 0
    peer = mori.shmem.shmem_ptr_p2p(ptr, rank, (rank + 1) % world)
    assert peer != 0
    mori.shmem.shmem_barrier_all()
    mori.shmem.shmem_free(ptr)
    from shmem_suite import run_suite

    run_suite(quick=True)
    mori.shmem.shmem_finalize()
    dist.destroy_process_group()


if __name__ == "__main__":
    n = int(sys.argv[1])
    port = restartable_port("")  # torch's store: rank 0 binds it while the others may dial it
    mp.spawn(worker, args=(n, port), nprocs=n, join=True)
