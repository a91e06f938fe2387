# SPDX-License-Identifier: MIT
"""Between hosts for real: two network namespaces joined by veth, one `mori run
--nnodes 2` per namespace, PEs that can reach each other only over that link."""
from __future__ import annotations

import os
import sys

import pytest

from harness import job_env, python_program
from multihost import check_all, info_blobs, run_on_hosts, veth_hosts_or_skip

pytestmark = pytest.mark.netns


@pytest.fixture
def hosts():
    vh = veth_hosts_or_skip()
    try:
        yield vh.hosts
    finally:
        vh.destroy()


def test_shmem_suite_two_hosts_two_pes_each(hosts):
    out = check_all(run_on_hosts(hosts, 2, python_program("shmem_suite.py", "--quick"), timeout=150))
    assert "shmem suite passed on 4 PEs" in out


def test_transport_matrix_and_addresses(hosts):
    cmd = [sys.executable, "-m", "mori.apps.cli", "info", "--json"]
    results = run_on_hosts(hosts, 2, cmd, timeout=60)
    check_all(results)
    blobs = info_blobs(results)
    assert len(blobs) == 4
    for b in blobs:
        me = b["pe"]
        assert b["num_nodes"] == 2
        assert b["transports"] == ["shm" if pe // 2 == me // 2 else "tcp" for pe in range(4)], b
        for p in b["pes"]:
            assert p["ip"] == hosts[p["pe"] // 2].ip, p  # each PE publishes its own host's address


def test_hostile_client_from_another_host(hosts, tmp_path):
    """A client in the other namespace: refused without the secret; with it, every
    out-of-bounds or malformed request is refused and the target keeps serving."""
    from multihost import MultiHostJob

    secret = os.urandom(32).hex()
    job = MultiHostJob(hosts, 1, python_program("tcp_guard_target.py", str(tmp_path)), secret)
    try:
        client = hosts[1].run(python_program("tcp_hostile_client.py", str(tmp_path), secret), timeout=120,
                              env=job_env(), capture_output=True, text=True)
    finally:
        results = job.wait(120)
    text = check_all(results)
    assert client.returncode == 0, client.stdout + client.stderr + text
    assert "target survived the hostile client" in text
    assert "could not prove it holds the job secret" in text and "are outside region 0" in text


def test_unreachable_address_is_a_clear_init_error(hosts):
    """`--socket-ifname lo` makes every PE publish 127.0.0.1, which the other host cannot reach:
    init must fail within the timeout, naming the PE, its address and the setting to fix."""
    from multihost import MultiHostJob

    job = MultiHostJob(hosts, 1, python_program("shmem_suite.py", "--quick"), os.urandom(32).hex(),
                       env={"MORI_BOOTSTRAP_TIMEOUT": "4"}, launcher_args=["--socket-ifname", "lo"])
    results = job.wait(60)
    text = "\n".join(r.text for r in results)
    assert all(r.returncode != 0 for r in results), text
    assert "cannot reach PE" in text and "127.0.0.1:" in text and "MORI_SOCKET_IFNAME" in text, text
