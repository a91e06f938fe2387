# SPDX-License-Identifier: MIT
"""Local TCP ports for processes MORI starts itself (a launcher's store, a test's server).

``free_port`` asks the kernel for an unused port; ``wait_port`` waits until something listens
on one. The port is free when ``free_port`` returns, not reserved: the caller hands it to the
process that binds it next, which is the usual (and only portable) way to do this.
"""

from __future__ import annotations

import socket
import subprocess
import time

from mori.core.errors import RemoteError, Timeout

__all__ = ["free_port", "wait_port"]


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that nothing is bound to now (``""``: every interface)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_port(
    port: int, host: str = "127.0.0.1", timeout: float = 10.0, process: subprocess.Popen | None = None
) -> None:
    """Return once a TCP connection to ``host:port`` succeeds.

    Raises ``mori.core.errors.Timeout`` (a ``TimeoutError``) naming the address after ``timeout``
    seconds, and ``mori.core.errors.RemoteError`` at once if ``process`` (the one expected to
    listen) has exited, so a server that died at start-up is not waited for.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            pass
        if process is not None and process.poll() is not None:
            raise RemoteError(
                f"process {process.pid} exited with {process.returncode} before listening on {host}:{port}"
            )
        if time.monotonic() >= deadline:
            raise Timeout(f"nothing listens on {host}:{port} after {timeout}s")
        time.sleep(0.05)
