# SPDX-License-Identifier: MIT
"""Hostile endings: a killed or hung-up launcher, PEs that die, stop or skip a barrier.

Nothing may outlive its job (no PE, no /dev/shm segment) and nothing may wait forever:
every survivor gets an error naming the PE it lost within a bounded time."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from harness import job_env, python_program

BOUND_S = 15.0  # how long a PE may survive its launcher, or a survivor take to notice a death


def _gone(pid: int) -> bool:
    """True once `pid` has exited (a zombie counts: its parent is gone, nobody may reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def _wait_gone(pids: list[int], bound: float) -> list[int]:
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        alive = [p for p in pids if not _gone(p)]
        if not alive:
            return []
        time.sleep(0.05)
    return [p for p in pids if not _gone(p)]


# Every rank prints its pid and the pid of a child it forked (a grandchild of the launcher).
_SLEEPER = ("import os, subprocess, sys, time\n"
            "kid = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
            "print('pids', os.getpid(), kid.pid, flush=True)\n"
            "time.sleep(600)\n")


def _start_sleepers(n: int) -> tuple[subprocess.Popen, list[int]]:
    launcher = subprocess.Popen([sys.executable, "-m", "mori.apps.cli", "run", "-n", str(n), "--",
                                 sys.executable, "-c", _SLEEPER], env=job_env(), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pids: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while len(pids) < 2 * n:
            assert time.monotonic() < deadline, f"ranks did not start; got {pids}"
            line = launcher.stdout.readline()
            assert line, "launcher ended early"
            if "pids" in line:
                pids += [int(v) for v in line.split()[-2:]]
    except BaseException:
        launcher.kill()
        raise
    return launcher, pids


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGHUP, signal.SIGTERM])
def test_no_rank_outlives_its_launcher(sig):
    launcher, pids = _start_sleepers(3)
    try:
        launcher.send_signal(sig)
        rc = launcher.wait(timeout=60)
        survivors = _wait_gone(pids, BOUND_S)
        assert not survivors, f"after {sig.name} of the launcher these processes still run: {survivors}"
        if sig != signal.SIGKILL:  # it stopped the ranks itself and says by which signal
            assert rc == 128 + sig, rc
    finally:
        for p in pids:
            if not _gone(p):
                os.kill(p, signal.SIGKILL)
        launcher.kill()
        launcher.wait()


def test_no_shm_segment_outlives_a_job_killed_in_init(tmp_path):
    """Both PEs are SIGKILLed inside init once their heaps exist: nothing may stay in /dev/shm."""
    procs = [subprocess.Popen(python_program("die_in_init.py", r, 2, tmp_path), env=job_env(),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=120)[0])
        finally:
            p.kill()
    for p, out in zip(procs, outs):
        assert p.returncode == -signal.SIGKILL, out
        heap = out.split("heap mapped at:", 1)[1].split()
        assert heap, out  # the PE died with its heap mapped: the case under test happened
        left = [path for path in heap if path.startswith("/dev/") and os.path.exists(path)]
        assert not left, f"segments of a dead job are still in /dev/shm: {left}"

