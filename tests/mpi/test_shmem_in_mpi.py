# SPDX-License-Identifier: MIT
"""Tests that run inside an MPI job: `mpirun -n 4 python -m pytest --with-mpi tests/mpi`.
Serial pytest skips them (pytest-mpi)."""

from __future__ import annotations

import numpy as np
import pytest

import mori.shmem as sh


@pytest.fixture(scope="module")
def world():
    sh.shmem_mpi_init()
    yield sh.my_pe(), sh.n_pes()
    sh.shmem_finalize()


@pytest.mark.mpi(min_size=2)
def test_ranks_match_mpi(world):
    from mpi4py import MPI

    me, n = world
    assert me == MPI.COMM_WORLD.Get_rank() and n == MPI.COMM_WORLD.Get_size()
    assert sh.topology()["local_size"] == n


@pytest.mark.mpi(min_size=2)
def test_ring_put_random(world):
    me, n = world
    rng = np.random.default_rng(7)
    data = rng.standard_normal((n, 4097))
    buf = sh.zeros(4097)
    sh.put(buf, data[me], pe=(me + 1) % n)
    sh.barrier_all()
    assert np.array_equal(buf, data[(me - 1) % n])
    sh.free(buf)


@pytest.mark.mpi(min_size=2)
def test_counter_contention(world):
    me, n = world
    c = sh.zeros(1, np.int64)
    for _ in range(500):
        sh.atomic_add(c, 1, pe=0)
    sh.barrier_all()
    assert sh.atomic_fetch(c, pe=0) == 500 * n
    sh.free(c)
