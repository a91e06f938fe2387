# SPDX-License-Identifier: MIT
"""Faults between hosts: a PE killed mid-run, a host whose link goes down, and a
rate-limited link. Survivors must get an error naming the lost PE, never hang."""
from __future__ import annotations

import os
import re
import time

import pytest

from harness import python_program
from multihost import MultiHostJob, check_all, run_on_hosts, veth_hosts_or_skip

pytestmark = pytest.mark.netns

CAUGHT = re.compile(r"PE (\d+) caught (\w+) after ([\d.]+) s: (.*)")


@pytest.fixture
def veth():
    vh = veth_hosts_or_skip()
    try:
        yield vh
    finally:
        vh.destroy()


def _caught(text: str) -> dict[int, tuple[str, float, str]]:
    return {int(m.group(1)): (m.group(2), float(m.group(3)), m.group(4)) for m in CAUGHT.finditer(text)}


def test_killed_pe_gives_others_an_error(veth):
    """PE 3 (host 1) SIGKILLs itself; PEs 0 and 1 (host 0) must fail fast, naming a lost PE of host 1."""
    results = run_on_hosts(veth.hosts, 2, python_program("tcp_faults.py", "kill", "3"), timeout=90,
                           env={"MORI_BOOTSTRAP_TIMEOUT": "30"})
    host0 = results[0]
    assert host0.returncode != 0, host0.text
    caught = _caught(host0.text)
    assert set(caught) & {0, 1}, f"no survivor on host 0 reported an error:\n{host0.text}"
    for pe, (kind, after, msg) in caught.items():
        if pe in (0, 1):
            assert re.search(r"PE [23]\b", msg), f"PE {pe}'s error does not name a PE of host 1: {msg}"
            assert after < 10, f"PE {pe} took {after} s to notice"
    # The first PE to go was 3; the message of at least one survivor says so.
    assert any("PE 3" in msg for pe, (_, _, msg) in caught.items() if pe in (0, 1)), host0.text


def test_host_link_down_becomes_an_error(veth, tmp_path):
    """Host 1's link goes down mid-run (no FIN, no RST): keepalive/timeouts turn the silence
    into errors on both hosts within about MORI_BOOTSTRAP_TIMEOUT."""
    timeout = 6
    progress = tmp_path / "progress"
    job = MultiHostJob(veth.hosts, 1, python_program("tcp_faults.py", "loop", str(progress)), os.urandom(32).hex(),
                       env={"MORI_BOOTSTRAP_TIMEOUT": str(timeout)})
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


def test_rate_limited_link_stays_correct(veth):
    """tbf-shaped link (200 Mbit/s both ways): chunked transfers up to 3 MiB, every byte checked."""
    veth.limit_rate("200mbit")
    out = check_all(run_on_hosts(veth.hosts, 1, python_program("tcp_stress.py", "8"), timeout=150))
    assert "tcp stress passed: 8 rounds on 2 PEs" in out
