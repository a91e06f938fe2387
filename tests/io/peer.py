# SPDX-License-Identifier: MIT
"""Drives tests/programs/io_peer.py: a MORI-IO engine in another process."""

from __future__ import annotations

import base64
from typing import Optional, Sequence

from harness import ProgramPeer, python_program


class RemotePeer(ProgramPeer):
    """One io_peer.py process; ``ask`` sends a command and returns its JSON answer."""

    def __init__(self, env: Optional[dict] = None, prefix: Sequence[str] = ()) -> None:
        super().__init__(python_program("io_peer.py"), "io peer", env, prefix)


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def unb64(s: str) -> bytes:
    return base64.b64decode(s)
