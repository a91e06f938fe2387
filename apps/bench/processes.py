# SPDX-License-Identifier: MIT
"""Ending the helper processes a benchmark started (terminate, then kill what lingers)."""
from __future__ import annotations

import subprocess
from typing import Sequence


def stop(procs: Sequence[subprocess.Popen], grace_s: float = 10) -> None:
    """Terminate every process still running, give each `grace_s` to exit, then kill it."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
