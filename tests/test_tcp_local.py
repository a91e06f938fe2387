# SPDX-License-Identifier: MIT
"""The tcp transport on one host (MORI_DISABLE_P2P=1 routes every peer through tcp):
fast coverage of the whole shmem matrix, the MPI bootstrap's job secret and a PE
dying under tcp. The hostile-client guard is in tests/hostile/test_network_attacks.py."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from mori.core.ports import free_port

from harness import check, job_env, mori_run, mpirun, python_program

TCP = {"MORI_DISABLE_P2P": "1"}


def test_shmem_suite_over_tcp():
    out = check(mori_run(4, python_program("shmem_suite.py", "--quick"), timeout=150, env=TCP))
    assert "shmem suite passed on 4 PEs" in out


def test_stress_chunked_transfers_over_tcp():
    out = check(mori_run(2, python_program("tcp_stress.py", "10"), timeout=90, env=TCP))
    assert "tcp stress passed: 10 rounds on 2 PEs" in out


def test_info_reports_tcp_for_every_pair():
    cmd = [sys.executable, "-m", "mori.apps.cli", "info", "--json"]
    out = check(mori_run(3, cmd, timeout=60, env=TCP, launcher_args=["--no-prefix"]))
    blobs = json.loads(out[out.index("["):out.rindex("]") + 1])
    for b in blobs:
        assert b["transports"] == ["shm" if pe == b["pe"] else "tcp" for pe in range(3)], b


def test_mpirun_bootstrap_over_tcp():
    """mpirun + mpi4py bootstrap: rank 0 draws the job secret and broadcasts it over MPI."""
    pytest.importorskip("mpi4py")
    out = check(mpirun(2, python_program("shmem_suite.py", "--quick"), timeout=150, env=TCP))
    assert "shmem suite passed on 2 PEs" in out


def test_killed_pe_is_reported_over_tcp():
    """Ranks started straight from env vars (no launcher to stop the survivors): when PE 2
    dies, PEs 0 and 1 get an error naming it quickly instead of hanging."""
    n, port, secret = 3, free_port(), os.urandom(32).hex()
    procs = []
    for rank in range(n):
        env = job_env({**TCP, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                       "WORLD_SIZE": str(n), "MORI_JOB_SECRET": secret})
        procs.append(subprocess.Popen(python_program("tcp_faults.py", "kill", "2"), env=env, text=True,
                                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=60)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert procs[2].returncode == -9, outs[2]
    for rank in (0, 1):
        assert procs[rank].returncode == 3, outs[rank]
        m = re.search(r"caught (\w+) after ([\d.]+) s: (.*)", outs[rank])
        assert m, outs[rank]
        assert "PE 2" in m.group(3), f"the error does not name the dead PE: {m.group(0)}"
        assert float(m.group(2)) < 10, f"took {m.group(2)} s to notice"


def test_socket_ifname_picks_the_interface():
    code = ("from mori import _C; _C.core.reload_env(); print(_C.core.local_ip_address())")
    ok = subprocess.run([sys.executable, "-c", code], env=job_env({"MORI_SOCKET_IFNAME": "lo"}),
                        capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0 and ok.stdout.strip() == "127.0.0.1", ok.stdout + ok.stderr
    bad = subprocess.run([sys.executable, "-c", code], env=job_env({"MORI_SOCKET_IFNAME": "nosuchif0"}),
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode != 0 and "MORI_SOCKET_IFNAME=nosuchif0" in bad.stderr, bad.stderr
