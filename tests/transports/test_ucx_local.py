# SPDX-License-Identifier: MIT
"""The ucx transport on one host beyond the conformance suite (test_conformance.py): a wait
that peers keep busy still times out, the choice of transport with and without UCX, and a
bad MORI_NET_TRANSPORT."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from harness import check, mori_run, python_program
from ucx_env import ucx_all, ucx_or_skip


@pytest.fixture(scope="module", autouse=True)
def ucx():
    return ucx_or_skip()


def test_a_served_wait_still_times_out():
    # A waiting PE polls ucx for as long as peers keep it busy, but only up to a bound:
    # its checks (here MORI_SHMEM_WAIT_TIMEOUT) must still run while PE 0 streams puts to it.
    env = dict(ucx_all("tcp"), MORI_SHMEM_WAIT_TIMEOUT="2")
    proc = mori_run(2, python_program("busy_waiter.py"), timeout=90, env=env)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    m = re.search(r"busy waiter timed out after ([0-9.]+) s: .*MORI_SHMEM_WAIT_TIMEOUT", text)
    assert m and float(m.group(1)) < 8.0, text


def test_without_ucx_auto_is_tcp_and_ucx_fails_naming_why(tmp_path):
    missing = str(tmp_path / "no-libucp.so")
    # auto: between "hosts" (MORI_DISABLE_P2P: every peer is a network peer) it is tcp, as before.
    cmd = [sys.executable, "-m", "mori.apps.cli", "info", "--json"]
    out = check(
        mori_run(
            2,
            cmd,
            timeout=60,
            env={"MORI_DISABLE_P2P": "1", "MORI_UCX_LIBRARY": missing},
            launcher_args=["--no-prefix"],
        )
    )
    blobs = json.loads(out[out.index("[") : out.rindex("]") + 1])
    assert [b["transports"] for b in blobs] == [["shm", "tcp"], ["tcp", "shm"]]
    # ucx insists: every PE fails, naming MORI_NET_TRANSPORT and the library it could not load.
    res = mori_run(
        2,
        python_program("shmem_suite.py", "--quick"),
        timeout=60,
        env={"MORI_DISABLE_P2P": "1", "MORI_UCX_LIBRARY": missing, "MORI_NET_TRANSPORT": "ucx"},
    )
    text = res.stdout + res.stderr
    assert res.returncode != 0, text
    assert "MORI_NET_TRANSPORT=ucx but UCX cannot be used" in text, text
    assert missing in text, text
    assert "shmem suite passed" not in text


def test_auto_without_rdma_is_tcp_here():
    """A UCX without an RDMA transport (tcp, sm only, as here): auto keeps tcp between hosts."""
    devices = subprocess.run(["ucx_info", "-d"], capture_output=True, text=True, timeout=60).stdout
    if re.search(r"Transport: (rc|dc|ud)", devices):
        pytest.skip("this machine's UCX has an RDMA transport")
    cmd = [sys.executable, "-m", "mori.apps.cli", "info", "--json"]
    out = check(mori_run(2, cmd, timeout=60, env={"MORI_DISABLE_P2P": "1"}, launcher_args=["--no-prefix"]))
    blobs = json.loads(out[out.index("[") : out.rindex("]") + 1])
    assert [b["transports"] for b in blobs] == [["shm", "tcp"], ["tcp", "shm"]]


def test_bad_setting_is_named():
    res = mori_run(2, python_program("shmem_suite.py", "--quick"), timeout=60, env={"MORI_NET_TRANSPORT": "rdma"})
    text = res.stdout + res.stderr
    assert res.returncode != 0
    assert "MORI_NET_TRANSPORT=rdma: expected auto, tcp, ucx or ucx-all" in text, text
