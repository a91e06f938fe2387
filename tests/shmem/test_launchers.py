# SPDX-License-Identifier: MIT
"""The shmem matrix launched by `mpirun` (+ pytest-mpi) and torch; under `mori run` it is part of
the transport conformance suite (tests/transports/test_conformance.py)."""

from __future__ import annotations

import sys

import pytest

from harness import check, mpirun, python_program, _run

PYTEST_MPI_DIR = __import__("pathlib").Path(__file__).parent.parent / "mpi"


@pytest.mark.parametrize("n,env", [(2, {}), (2, {"MORI_DISABLE_P2P": "1"})], ids=["2", "2-tcp"])
def test_suite_under_mpirun(n, env):
    """mpirun + mpi4py bootstrap; over tcp (MORI_DISABLE_P2P=1) rank 0 draws the job secret and
    broadcasts it over MPI."""
    out = check(mpirun(n, python_program("shmem_suite.py", "--quick"), timeout=240, env=env))
    assert f"shmem suite passed on {n} PEs" in out


def test_pytest_mpi_inside_mpirun():
    """`mpirun -n 4 python -m pytest --with-mpi`: every rank runs the MPI-marked tests."""
    out = check(
        mpirun(
            4,
            [sys.executable, "-m", "pytest", "--with-mpi", "-q", "-p", "no:cacheprovider", str(PYTEST_MPI_DIR)],
            timeout=240,
        )
    )
    assert out.count(" passed") >= 4, out[-3000:]


@pytest.mark.parametrize("n", [2])  # 4 and 8 PEs: tests/transports/test_conformance.py
def test_suite_under_torch_multiprocessing(n):
    pytest.importorskip("torch")
    out = check(_run(python_program("torch_pg_suite.py", n), timeout=240, env=None))
    assert f"shmem suite passed on {n} PEs" in out


def test_suite_under_torchrun():
    pytest.importorskip("torch")
    # torchrun of this interpreter (python -m torch.distributed.run is what the torchrun script runs)
    out = check(
        _run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nproc-per-node",
                "2",
                "--master-port",
                "29631",
                *python_program("shmem_suite.py", "--quick")[1:],
            ],
            timeout=240,
            env=None,
        )
    )
    assert "shmem suite passed on 2 PEs" in out


def test_unique_id_init():
    out = check(_run(python_program("unique_id_init.py", 3), timeout=120, env=None))
    assert "unique id init ok on 3 PEs" in out
