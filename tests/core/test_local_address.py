# SPDX-License-Identifier: MIT
"""core's local address: MORI_SOCKET_IFNAME picks the interface a PE publishes."""

from __future__ import annotations

import subprocess
import sys

from harness import job_env


def test_socket_ifname_picks_the_interface():
    code = "from mori import _C; _C.core.reload_env(); print(_C.core.local_ip_address())"
    ok = subprocess.run(
        [sys.executable, "-c", code],
        env=job_env({"MORI_SOCKET_IFNAME": "lo"}),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert ok.returncode == 0 and ok.stdout.strip() == "127.0.0.1", ok.stdout + ok.stderr
    bad = subprocess.run(
        [sys.executable, "-c", code],
        env=job_env({"MORI_SOCKET_IFNAME": "nosuchif0"}),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode != 0 and "MORI_SOCKET_IFNAME=nosuchif0" in bad.stderr, bad.stderr
