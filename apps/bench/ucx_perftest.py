# SPDX-License-Identifier: MIT
"""Raw UCX beside ours: UCX's own ``ucx_perftest`` (Debian ``ucx-utils``; the PyPI
``libucx-cu12`` wheel ships it too), a server and a client on this host with the environment
of our ucx runs (the same ``UCX_TLS``), so that a bench prints our per-op overhead above UCX
itself in the same run.

Which perftest matches which of our measures (both are means over the whole run):

============  ===============  ========================================================
ours          perftest         what perftest times
============  ===============  ========================================================
get_lat       ``ucp_get``      a blocking get (a round trip)
fadd_lat      ``ucp_fadd``     a fetch-and-add (a round trip)
pingpong_lat  ``ucp_put_lat``  half a put ping-pong (8 B; ours: shmem_long_p, wait_until)
put_bw        ``ucp_put_bw``   a stream of puts
============  ===============  ========================================================
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Optional

from mori.core.ports import free_port

# (our op, perftest test, whether the figure is a bandwidth)
MEASURES = [
    ("get_lat", "ucp_get", False),
    ("fadd_lat", "ucp_fadd", False),
    ("pingpong_lat", "ucp_put_lat", False),
    ("put_bw", "ucp_put_bw", True),
]


@dataclass
class PerftestResult:
    test: str
    bytes: int
    iters: int
    us: float  # mean latency over the run (overall_lat), or per message for bandwidth tests
    GBps: float  # overall bandwidth (0 for latency tests)


def missing_reason() -> Optional[str]:
    """Why ucx_perftest cannot run here, or None when it can."""
    if shutil.which("ucx_perftest") is None:
        return (
            "ucx_perftest not found (Debian: apt-get install ucx-utils; PyPI libucx-cu12 ships it): "
            "raw UCX rows skipped"
        )
    return None


def run_test(test: str, size: int, iters: int, env: dict, timeout: float = 120.0) -> PerftestResult:
    """One perftest: a server on a free port, then a client against it (retried while the
    server is not listening yet). Raises RuntimeError with perftest's output when it fails."""
    warmup = max(10, iters // 10)
    port = str(free_port())
    server = subprocess.Popen(
        ["ucx_perftest", "-p", port],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        cmd = [
            "ucx_perftest",
            "127.0.0.1",
            "-p",
            port,
            "-t",
            test,
            "-s",
            str(size),
            "-n",
            str(iters),
            "-w",
            str(warmup),
            "-f",
            "-v",
        ]
        deadline = time.monotonic() + timeout
        while True:
            res = subprocess.run(
                cmd,
                env=env,
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
                timeout=max(1.0, deadline - time.monotonic()),
            )
            if res.returncode == 0 or server.poll() is not None or time.monotonic() > deadline - 5:
                break
            time.sleep(0.2)  # the server was not listening yet
        if res.returncode != 0:
            raise RuntimeError(
                f"{' '.join(cmd)} exited with {res.returncode}:\n{res.stdout[-1500:]}\n{res.stderr[-1500:]}"
            )
        return parse_final(test, size, res.stdout)
    finally:
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def parse_final(test: str, size: int, text: str) -> PerftestResult:
    """The final figures of ``ucx_perftest -f -v`` (a CSV header and one row)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for i, ln in enumerate(lines):
        if ln.startswith("iterations,") and i + 1 < len(lines):
            row = dict(zip(ln.split(","), lines[i + 1].split(",")))
            iters = int(float(row["iterations"]))
            mbps = float(row["overall_bw"])  # MB/s (2^20 bytes)
            bandwidth = test.endswith("_bw")
            return PerftestResult(
                test, size, iters, float(row["overall_lat"]), mbps * (1 << 20) / 1e9 if bandwidth else 0.0
            )
    raise RuntimeError(f"ucx_perftest -t {test}: no final CSV figures in its output:\n{text[-1500:]}")
