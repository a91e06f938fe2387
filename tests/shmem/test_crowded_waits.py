# SPDX-License-Identifier: MIT
"""Waits where PEs outnumber cores and other jobs load them (issue 29 item 19).

4 PEs and 2 busy loops share 2 cores (everything pinned to them, as on the 2-vCPU CI box).
A waiting PE that yields its core hands the busy loop a whole time slice, each time: before
the fix these barriers fell into phases of ~1 ms each (0.65-1.4 ms a barrier over 3000 of them
in 9 of 9 runs on the shared 2-vCPU VM); now a slow yield makes waits sleep at once for a while
(kYieldTaken in shmem/include/mori/shmem/runtime_wait.h): 0.25-0.42 ms (5 runs, with other
jobs on the VM). The bound, 0.5 ms a barrier, is thin on both sides: the old behaviour exceeds it
by 1.3x to 2.8x only, and a CI machine loaded beyond the two loops may fail the new one, so it
runs only with MORI_TEST_TIMING=1 (the suite's other tests never assert speed). It is
not a speed figure (`mori bench shmem-c --pes 4 --load 2` measures, beside Open MPI)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from harness import check, mori_run, python_program

ROUNDS = 1500  # two barriers each
BOUND_US = 500.0


def _busy_loops(n: int, cpus: set[int]) -> list[subprocess.Popen]:
    loops = []
    for _ in range(n):
        p = subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        os.sched_setaffinity(p.pid, cpus)
        loops.append(p)
    return loops


@pytest.mark.skipif(
    os.environ.get("MORI_TEST_TIMING") != "1",
    reason="a timing bound with a thin margin: run with MORI_TEST_TIMING=1 on an otherwise idle machine",
)
def test_barriers_beside_busy_loops_do_not_fall_into_millisecond_phases():
    cpus = sorted(os.sched_getaffinity(0))[:2]
    if len(cpus) < 2:
        pytest.skip("needs 2 CPUs")
    loops = _busy_loops(2, set(cpus))
    try:
        out = check(
            mori_run(
                4,
                ["taskset", "-c", ",".join(map(str, cpus)), *python_program("barriers_timed.py", str(ROUNDS))],
                timeout=180,
            )
        )
    finally:
        for p in loops:
            p.kill()
            p.wait()
    m = re.search(r"barriers: (\d+) on 4 PEs in ([\d.]+) s \(oversubscribed: (\w+)\)", out)
    assert m, out[-3000:]
    assert m.group(3) == "yes", out[-3000:]  # the crowded waits are the ones under test
    per_barrier_us = float(m.group(2)) / (2 * ROUNDS) * 1e6
    assert per_barrier_us < BOUND_US, f"{per_barrier_us:.0f} us a barrier beside 2 busy loops:\n{out[-3000:]}"
