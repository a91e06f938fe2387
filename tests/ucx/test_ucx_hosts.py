# SPDX-License-Identifier: MIT
"""The ucx transport between hosts for real: two network namespaces joined by veth,
one `mori run --nnodes 2` per namespace, MORI_NET_TRANSPORT=ucx over UCX_TLS=tcp
(shm within a host). Faults: a killed PE, a link that goes down."""
from __future__ import annotations

import os
import re
import sys
import time

import pytest

from harness import python_program
from multihost import MultiHostJob, check_all, info_blobs, run_on_hosts, veth_hosts_or_skip
from ucx_env import ucx_or_skip

pytestmark = pytest.mark.netns

UCX = {"MORI_NET_TRANSPORT": "ucx", "UCX_TLS": "tcp"}
CAUGHT = re.compile(r"PE (\d+) caught (\w+) after ([\d.]+) s: (.*)")


@pytest.fixture
def veth():
    ucx_or_skip()
    vh = veth_hosts_or_skip()
    try:
        yield vh
    finally:
        vh.destroy()


def test_shmem_suite_two_hosts_two_pes_each(veth):
    out = check_all(run_on_hosts(veth.hosts, 2, python_program("shmem_suite.py", "--quick"), timeout=150, env=UCX))
    assert "shmem suite passed on 4 PEs" in out


def test_transport_matrix_and_lanes(veth):
    cmd = [sys.executable, "-m", "mori.apps.cli", "info", "--json"]
    results = run_on_hosts(veth.hosts, 2, cmd, timeout=60, env=UCX)
    check_all(results)
    blobs = info_blobs(results)
    assert len(blobs) == 4
    for b in blobs:
        me = b["pe"]
        assert b["transports"] == ["shm" if pe // 2 == me // 2 else "ucx" for pe in range(4)], b
        for pe in range(4):
            if pe // 2 != me // 2:
                # UCX's tcp transport on the veth device, never loopback.
                assert re.match(r"ucx tcp/[^l]\S*: .*\bam\b", b["endpoints"][pe]), b["endpoints"][pe]


def _caught(text: str) -> dict[int, tuple[str, float, str]]:
    return {int(m.group(1)): (m.group(2), float(m.group(3)), m.group(4)) for m in CAUGHT.finditer(text)}


def test_killed_pe_gives_others_an_error(veth):
    """PE 3 (host 1) SIGKILLs itself; PEs 0 and 1 (host 0) fail fast, naming a PE of host 1."""
    results = run_on_hosts(veth.hosts, 2, python_program("tcp_faults.py", "kill", "3"), timeout=90,
                           env={**UCX, "MORI_BOOTSTRAP_TIMEOUT": "30"})
    host0 = results[0]
    assert host0.returncode != 0, host0.text
    caught = _caught(host0.text)
    assert set(caught) & {0, 1}, f"no survivor on host 0 reported an error:\n{host0.text}"
    for pe, (kind, after, msg) in caught.items():
        if pe in (0, 1):
            assert re.search(r"PE [23]\b", msg), f"PE {pe}'s error does not name a PE of host 1: {msg}"
            assert after < 10, f"PE {pe} took {after} s to notice"
    assert any("PE 3" in msg for pe, (_, _, msg) in caught.items() if pe in (0, 1)), host0.text


def test_host_link_down_becomes_an_error(veth, tmp_path):
    """Host 1's link goes down mid-run (no FIN, no RST): the heartbeat finds the silent peer
    and both hosts get an error naming the other within about MORI_BOOTSTRAP_TIMEOUT."""
    timeout = 6
    progress = tmp_path / "progress"
    job = MultiHostJob(veth.hosts, 1, python_program("tcp_faults.py", "loop", str(progress)), os.urandom(32).hex(),
                       env={**UCX, "MORI_BOOTSTRAP_TIMEOUT": str(timeout)})
    deadline = time.monotonic() + 60
    while not progress.exists():
        assert time.monotonic() < deadline, "the job made no progress"
        assert all(p.poll() is None for p in job.procs), "the job ended before the link went down"
        time.sleep(0.05)
    veth.link_down(1)
    results = job.wait(60)
    for r, other in zip(results, (1, 0)):
        assert r.returncode != 0, r.text
        caught = _caught(r.text)
        assert caught, f"host {r.host.name} reported no error:\n{r.text}"
        for pe, (kind, after, msg) in caught.items():
            assert f"PE {other}" in msg, f"PE {pe}'s error does not name PE {other}: {msg}"
            assert after < 4 * timeout, f"PE {pe} took {after} s to notice"
