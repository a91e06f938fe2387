# SPDX-License-Identifier: MIT
"""Times a run of shmem_barrier_all and checks each one held (issue 29 item 19).

    mori run -n 4 python barriers_timed.py BARRIERS

After a warm-up, every PE adds 1 to a counter on PE 0 before each barrier, and PE 0 checks
after it that all n PEs had; PE 0 prints ``barriers: <BARRIERS> on <n> PEs in <s> s
(oversubscribed: <yes|no>)``.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import mori.shmem as sh


def main() -> int:
    count = int(sys.argv[1])
    sh.init()
    me, n = sh.my_pe(), sh.n_pes()
    arrivals = sh.zeros(1, np.int64)
    for _ in range(100):
        sh.barrier_all()
    start = time.monotonic()
    for i in range(count):
        sh.atomic_add(arrivals, 1, pe=0)
        sh.barrier_all()
        if me == 0 and arrivals[0] != n * (i + 1):
            print(f"barrier {i} passed with {arrivals[0]} arrivals of {n * (i + 1)}", flush=True)
            return 1
        sh.barrier_all()  # nobody adds for the next round before PE 0 has checked this one
    took = time.monotonic() - start
    if me == 0:
        crowded = n > len(os.sched_getaffinity(0))
        print(
            f"barriers: {count} on {n} PEs in {took:.3f} s (oversubscribed: {'yes' if crowded else 'no'})", flush=True
        )
    sh.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
