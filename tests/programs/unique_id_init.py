# SPDX-License-Identifier: MIT
"""shmem_get_unique_id on rank 0, shared out of band (a pipe here), shmem_init_attr everywhere."""

from __future__ import annotations

import multiprocessing as mp
import sys


def worker(rank: int, n: int, queue) -> None:
    import numpy as np

    import mori.shmem as sh

    uid = queue.get()
    assert len(uid) == 128
    assert sh.shmem_init_attr(sh.MORI_SHMEM_INIT_WITH_UNIQUEID, rank, n, uid) == 0
    x = sh.zeros(n, np.int64)
    for pe in range(n):
        sh.p(x, rank + 1, pe=pe, index=rank)
    sh.barrier_all()
    assert x.tolist() == list(range(1, n + 1)), x
    sh.free(x)
    sh.shmem_finalize()


if __name__ == "__main__":
    n = int(sys.argv[1])
    ctx = mp.get_context("spawn")
    queues = [ctx.Queue() for _ in range(n)]
    procs = [ctx.Process(target=worker, args=(r, n, queues[r])) for r in range(n)]
    for p in procs:
        p.start()
    import mori.shmem as sh

    uid = sh.shmem_get_unique_id()  # this launcher process hosts the store: like rank 0 would
    for q in queues:
        q.put(uid)
    for p in procs:
        p.join(60)
    codes = [p.exitcode for p in procs]
    assert codes == [0] * n, codes
    print(f"unique id init ok on {n} PEs")
