# SPDX-License-Identifier: MIT
"""shmem_barrier_all orders every PE's puts before every PE's reads, round after round.

    mori run -n 4 python barrier_rounds.py ROUNDS

Each round every PE puts a fresh random word into its slot on every PE, meets the others at
barrier_all, checks all n slots exactly (every PE rebuilds the others' values from the shared
seed), and meets them again before the next round overwrites a slot. Exits non-zero naming
the first wrong slot.
"""

from __future__ import annotations

import sys

import numpy as np

import mori.shmem as sh


def main() -> int:
    rounds = int(sys.argv[1])
    sh.shmem_init()
    me, n = sh.my_pe(), sh.n_pes()
    seed = np.random.SeedSequence().entropy if me == 0 else 0
    seed_cell = sh.zeros(2, np.uint64)
    if me == 0:
        for pe in range(n):
            sh.put(seed_cell, np.array([seed & (2**64 - 1), seed >> 64 & (2**64 - 1)], np.uint64), pe=pe)
    sh.barrier_all()
    rng = np.random.default_rng([int(seed_cell[0]), int(seed_cell[1])])
    values = rng.integers(1, 2**63, size=(rounds, n), dtype=np.int64)  # never zero: a missed put shows
    slots = sh.zeros(n, np.int64)
    for r in range(rounds):
        mine = values[r, me : me + 1]
        for pe in range(n):
            sh.put(slots[me : me + 1], mine, pe=pe)
        sh.barrier_all()
        got = np.array(slots)
        if not np.array_equal(got, values[r]):
            bad = int(np.flatnonzero(got != values[r])[0])
            raise AssertionError(
                f"PE {me}, round {r}: slot of PE {bad} holds {got[bad]}, PE {bad} put {values[r, bad]}"
            )
        sh.barrier_all()
    if me == 0:
        print(f"barrier_rounds ok: {n} PEs, {rounds} rounds, seed {seed:x}", flush=True)
    sh.shmem_finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
