# SPDX-License-Identifier: MIT
"""Large and small transfers between PEs on different nodes, every byte checked.

    mori run ... tcp_stress.py [ROUNDS [TRANSPORT]]    # TRANSPORT: expected to the next PE (tcp)

Each round draws (from a generator seeded alike on every PE) a size up to 3 MiB and
an offset, then does blocking put, non-blocking put + quiet, get, non-blocking get,
and put_signal of fresh random bytes to the next PE, checking the result exactly.
Sizes straddle the transport's 1 MiB chunk so chunking and pipelining are covered.
"""

from __future__ import annotations

import sys
from typing import Optional

import numpy as np

import mori.shmem as sh

MAX = 3 << 20


def stress(rounds: int, transport: Optional[str] = "tcp") -> None:
    """The rounds on an initialised job, to the next PE over ``transport`` (None: whichever it
    is); raises AssertionError naming the round that failed."""
    me, n = sh.my_pe(), sh.n_pes()
    right, left = (me + 1) % n, (me - 1) % n
    if transport is not None:
        assert sh.transport_name(right) == transport, f"PE {me} reaches PE {right} over {sh.transport_name(right)}"
    rng = np.random.default_rng(20261129)
    buf = sh.zeros(MAX + 64, np.uint8)
    sig = sh.zeros(1, np.uint64)
    for r in range(1, rounds + 1):
        size = int(rng.choice([1, 7, 4096, (1 << 20) - 3, 1 << 20, (1 << 20) + 5, int(rng.integers(1, MAX))]))
        off = int(rng.integers(0, 64))
        data = [rng.integers(0, 256, size, dtype=np.uint8) for _ in range(n)]
        nbi = bool(r % 2)
        sh.put(buf[off : off + size], data[me], pe=right, nbi=nbi)
        if nbi:
            sh.quiet()
        sh.barrier_all()
        assert np.array_equal(buf[off : off + size], data[left]), f"round {r}: put of {size} B @+{off}"
        got = np.empty(size, np.uint8)
        sh.get(got, buf[off : off + size], pe=right, nbi=nbi)
        if nbi:
            sh.quiet()
        assert np.array_equal(got, data[me]), f"round {r}: get of {size} B"
        sh.barrier_all()
        # put_signal: the signal must not be seen before the last byte.
        fresh = [rng.integers(0, 256, size, dtype=np.uint8) for _ in range(n)]
        sh.put_signal(buf[off : off + size], fresh[me], sig, r, sh.SIGNAL_SET, pe=right)
        sh.wait_until(sig, sh.CMP_EQ, r)
        assert np.array_equal(buf[off : off + size], fresh[left]), f"round {r}: put_signal payload of {size} B"
        sh.barrier_all()
    sh.free(sig)
    sh.free(buf)


def main(rounds: int, transport: str = "tcp") -> None:
    sh.init()
    stress(rounds, transport)
    if sh.my_pe() == 0:
        print(f"tcp stress passed: {rounds} rounds on {sh.n_pes()} PEs")
    sh.finalize()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 12, sys.argv[2] if len(sys.argv) > 2 else "tcp")
