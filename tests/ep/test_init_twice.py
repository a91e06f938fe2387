# SPDX-License-Identifier: MIT
"""A second shmem init in one process is MORI's no-op (returns 0); another PE, another torch group
or a thread as a second PE is a clear error (the last one at once, not a deadlock)."""

from __future__ import annotations


import pytest

from harness import _run as run, check, python_program

pytest.importorskip("torch")


@pytest.mark.parametrize("n", [3])  # the checks are per process; 3 PEs make "another PE" a ring
def test_second_init_returns_zero_and_other_groups_are_errors(n):
    out = check(run(python_program("ep_init_twice.py", n), timeout=240, env=None))
    assert out.count("init twice ok") == n


def test_threads_as_pes_are_refused_at_once():
    out = check(run(python_program("ep_threads_as_pes.py"), timeout=120, env={"MORI_BOOTSTRAP_TIMEOUT": "5"}))
    assert "threads as PEs refused at once" in out
