# SPDX-License-Identifier: MIT
"""Issue 29 item 9: a job whose PEs are all blocked in waits says so once on stderr (which PEs,
where), with the default unbounded MORI_SHMEM_WAIT_TIMEOUT; a PE that is merely slow is not
taken for a deadlock. The setting is listed by `mori info --env`."""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time

from harness import job_env, python_program


def test_deadlock_is_reported_once_and_names_every_wait():
    env = job_env()
    env.pop("MORI_SHMEM_WAIT_TIMEOUT", None)
    env.pop("MORI_DISABLE_P2P", None)  # same-host PEs map each other's control blocks
    proc = subprocess.Popen(
        [sys.executable, "-m", "mori.apps.cli", "run", "-n", "3", "--", *python_program("deadlock.py")],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    text, reported_at, phase2_at = "", None, None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + 40
    try:
        while time.monotonic() < deadline:
            if reported_at is not None and time.monotonic() > reported_at + 2:
                break  # long enough to see a second report, if there were one
            if not sel.select(timeout=0.5):
                continue
            line = proc.stdout.readline()
            if not line:
                break
            text += line
            if "phase 2" in line and phase2_at is None:
                phase2_at = time.monotonic()
            if "likely deadlock" in line and reported_at is None:
                reported_at = time.monotonic()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert phase2_at is not None, text  # the slow PE (4.5 s, not in a wait) was not reported
    assert reported_at is not None, text
    assert text.count("likely deadlock") == 1, text
    assert text.index("likely deadlock") > text.index("phase 2"), text
    line = next(l for l in text.splitlines() if "likely deadlock" in l)
    assert re.search(r"PE 0 in shmem_barrier_all for [3-9]\.\d s", line), line
    assert re.search(r"PE 1 in shmem_\w*wait_until\w* for [3-9]\.\d s", line), line
    assert re.search(r"PE 2 in shmem_barrier_all \(for PE \d\) for [3-9]\.\d s|PE 2 in shmem_barrier_all for", line), (
        line
    )
    assert "MORI_SHMEM_WAIT_TIMEOUT" in line
    assert 2.5 < reported_at - phase2_at < 10, text


def test_wait_timeout_is_listed_by_mori_info_env():
    out = subprocess.run(
        [sys.executable, "-m", "mori.apps.cli", "info", "--env"],
        env=job_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    row = next((l for l in out.stdout.splitlines() if "MORI_SHMEM_WAIT_TIMEOUT" in l), "")
    assert "inf" in row and "wait" in row, out.stdout
