# SPDX-License-Identifier: MIT
"""Drives tests/programs/io_peer.py: a MORI-IO engine in another process."""
from __future__ import annotations

import base64
import json
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence

PROGRAM = Path(__file__).parents[1] / "programs" / "io_peer.py"


class RemotePeer:
    """One io_peer.py process; ``ask`` sends a command and returns its JSON answer."""

    def __init__(self, env: Optional[dict] = None, prefix: Sequence[str] = ()) -> None:
        full = dict(os.environ)
        full["PYTHONUNBUFFERED"] = "1"
        full.update(env or {})
        self.proc = subprocess.Popen([*prefix, sys.executable, str(PROGRAM)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full, text=True)

    def ask(self, cmd: str, timeout: float = 60, **kw) -> dict:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps({"cmd": cmd, **kw}) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.kill()
            raise AssertionError(f"io peer did not answer '{cmd}' within {timeout} s (a hang)")
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"io peer died during '{cmd}':\n{err}")
        out = json.loads(line)
        if "error" in out:
            raise AssertionError(f"io peer failed '{cmd}': {out['error']}")
        return out

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


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def unb64(s: str) -> bytes:
    return base64.b64decode(s)
