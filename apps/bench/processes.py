# SPDX-License-Identifier: MIT
"""Ending the helper processes a benchmark started (terminate, then kill what lingers), and
holding one until it is told to end or its starter is gone."""

from __future__ import annotations

import os
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


def hold_until(stop, poll_s: float = 1.0) -> None:
    """Block a helper process (a ``multiprocessing`` child holding memory or a server) until
    ``stop`` (an Event) is set or the process that started it is gone: a benchmark that was
    killed leaves no helper behind."""
    parent = os.getppid()
    while not stop.wait(poll_s):
        if os.getppid() != parent:
            return
