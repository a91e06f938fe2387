# SPDX-License-Identifier: MIT
"""One-sided operations complete while their target computes outside the library.

    mori run -n 2 busy_target.py [TRANSPORT]    # TRANSPORT: expected from PE 0 to PE 1

PE 1 first keeps its progress engine busy with its own calls (puts and quiets to PE 0,
the pattern after which a ucx progress thread stands aside), then computes for COMPUTE_S
seconds without calling the library. Meanwhile PE 0 gets, puts and fetch-adds to PE 1's
memory, checking every value, and times each: over a software-emulated transport only
PE 1's progress thread can serve them, so none may take about as long as the compute phase. PEs past 1 only join the barriers.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import mori.shmem as sh

COMPUTE_S = 2.0
OPS = 40
SLOWEST_OK_S = 0.5  # far below COMPUTE_S: the progress thread served them


def serve_while_computing(transport: str) -> float:
    """On an initialised job of 2 or more PEs; returns PE 0's slowest operation in seconds."""
    me = sh.my_pe()
    assert sh.n_pes() >= 2, "run on 2 PEs or more"
    if me < 2:
        assert sh.transport_name(1 - me) == transport, f"PE {me} reaches its peer over {sh.transport_name(1 - me)}"
    slowest = 0.0
    rng = np.random.default_rng(20261201)
    words = sh.zeros(OPS, np.int64)
    counter = sh.zeros(1, np.int64)
    values = rng.integers(1, 1 << 62, OPS, dtype=np.int64)
    if me == 1:
        words[:] = values
    sh.barrier_all()
    if me == 1:
        one = np.ones(1, np.int64)
        for _ in range(2000):  # busy with calls of its own, then silent
            sh.put(counter, one, pe=0)
            sh.quiet()
        end = time.monotonic() + COMPUTE_S
        x = 0
        while time.monotonic() < end:
            x = (x * 1103515245 + 12345) & 0xFFFFFFFF
    elif me == 0:
        time.sleep(0.2)  # PE 1 has left the library
        got = np.empty(1, np.int64)
        for i in range(OPS):
            t = time.monotonic()
            sh.get(got, words[i : i + 1], pe=1)
            assert got[0] == values[i], f"get {i}: {got[0]} != {values[i]}"
            sh.put(words[i : i + 1], -got, pe=1)
            sh.quiet()
            old = sh.atomic_fetch_add(counter, 1, pe=1)
            assert old == i, f"fetch-add {i} fetched {old}"
            slowest = max(slowest, time.monotonic() - t)
        assert slowest < SLOWEST_OK_S, f"an operation on the computing PE took {slowest:.3f} s"
    sh.barrier_all()
    if me == 1:
        assert np.array_equal(words, -values), "PE 0's puts did not land"
        assert counter[0] == OPS, f"counter {counter[0]} != {OPS}"
    sh.barrier_all()
    sh.free(counter)
    sh.free(words)
    return slowest


def main(transport: str) -> None:
    sh.init()
    slowest = serve_while_computing(transport)
    if sh.my_pe() == 0:
        print(f"busy target served: {OPS} rounds, slowest {slowest * 1e3:.2f} ms")
    sh.finalize()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "ucx")
