# SPDX-License-Identifier: MIT
"""Distributed UMBP workers as real processes (umbp_dist_worker.py), driven from the tests."""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence

PROGRAM = Path(__file__).parent / "umbp_dist_worker.py"


def start_workers(*inits: dict, env: Optional[dict] = None,
                  prefixes: Optional[Sequence[Sequence[str]]] = None) -> list["Worker"]:
    """One worker per ``init`` keyword dict, started and initialised in parallel; ``prefixes``:
    per worker the command it runs under (e.g. ``ip netns exec NAME``)."""
    workers = [Worker(env=env, prefix=prefixes[i] if prefixes else ()) for i in range(len(inits))]
    try:
        for w, kw in zip(workers, inits):
            w.send("init", **kw)
        for w in workers:
            w.info = w.answer("init")
    except BaseException:
        for w in workers:
            w.kill()
        raise
    return workers


class Worker:
    """One worker process; ``ask`` sends a command and returns its answer (a hang is a failure)."""

    def __init__(self, env: Optional[dict] = None, prefix: Sequence[str] = ()) -> None:
        full = dict(os.environ)
        full["PYTHONUNBUFFERED"] = "1"
        full.setdefault("UMBP_LOOKUP_TIMEOUT_MS", "1000")
        full.update(env or {})
        self.info: dict = {}  # the answer to "init"
        self.proc = subprocess.Popen([*prefix, sys.executable, str(PROGRAM)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full, text=True)

    def send(self, cmd: str, **kw) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(json.dumps({"cmd": cmd, **kw}) + "\n")
        self.proc.stdin.flush()

    def answer(self, cmd: str, timeout: float = 60) -> dict:
        assert self.proc.stdout
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.kill()
            raise AssertionError(f"umbp worker did not answer '{cmd}' within {timeout} s (a hang)")
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"umbp worker died during '{cmd}':\n{err[-4000:]}")
        out = json.loads(line)
        if "error" in out:
            raise AssertionError(f"umbp worker failed '{cmd}': {out['error']}\n{out.get('trace', '')}")
        return out

    def ask(self, cmd: str, timeout: float = 60, **kw) -> dict:
        self.send(cmd, **kw)
        return self.answer(cmd, timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.ask("quit", timeout=30)
            except AssertionError:
                pass
        self.kill()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f:
                f.close()
