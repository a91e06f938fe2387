# SPDX-License-Identifier: MIT
"""shmem4py's own test suite against MORI's OpenSHMEM library (a real client).

Opt-in (building shmem4py takes minutes): set MORI_TEST_SHMEM4PY_PYTHON to a Python in which
shmem4py was built with OSHCC=<mori>/bin/oshcc (and numpy < 2, which shmem4py 1.0's tests
need), and MORI_TEST_SHMEM4PY_TESTS to its source tree's test/ directory.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness import job_env

PY = os.environ.get("MORI_TEST_SHMEM4PY_PYTHON", "")
TESTS = os.environ.get("MORI_TEST_SHMEM4PY_TESTS", "")

pytestmark = pytest.mark.skipif(not (PY and TESTS), reason="set MORI_TEST_SHMEM4PY_PYTHON and _TESTS to run shmem4py")


@pytest.mark.parametrize("n", [1, 2])
def test_shmem4py_suite(n):
    from mori.shmem.capi import paths

    lib = subprocess.run([PY, "-c", "import shmem4py.api as a, sys; print(a.__file__)"], capture_output=True, text=True)
    assert lib.returncode == 0, lib.stderr
    ldd = subprocess.run(["ldd", lib.stdout.strip()], capture_output=True, text=True).stdout
    assert "libmori_shmem" in ldd, f"shmem4py is not built against MORI:\n{ldd}"
    cmd = [str(paths().bin_dir / "oshrun"), "-n", str(n), PY, "-m", "unittest", "discover", "-f"]
    proc = subprocess.run(
        cmd, cwd=TESTS, env=job_env({"MORI_PYTHON": sys.executable}), capture_output=True, text=True, timeout=600
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    assert out.count("\nOK") >= n, out[-3000:]
