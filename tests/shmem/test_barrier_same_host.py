# SPDX-License-Identifier: MIT
"""Python's shmem_barrier_all over PEs of one host takes the runtime's same-host barrier (one
arrival mask, one wake-up per PE); across the tcp transport it stays a dissemination barrier.
Either way it orders every PE's puts before every PE's reads."""

from __future__ import annotations

import pytest

from harness import check, mori_run, python_program


@pytest.mark.parametrize("n", [2, 5])
def test_barrier_rounds_same_host(n):
    out = check(mori_run(n, python_program("barrier_rounds.py", "150"), timeout=120))
    assert f"barrier_rounds ok: {n} PEs, 150 rounds" in out


def test_barrier_rounds_over_tcp():
    out = check(mori_run(3, python_program("barrier_rounds.py", "60"), timeout=120, env={"MORI_DISABLE_P2P": "1"}))
    assert "barrier_rounds ok: 3 PEs, 60 rounds" in out
