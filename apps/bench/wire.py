# SPDX-License-Identifier: MIT
"""Reading a known number of bytes from a benchmark's own sockets (control connections and the
plain-socket baselines), where a short read means the other benchmark process is gone."""

from __future__ import annotations

import socket


def recv_into_exact(sock: socket.socket, view: memoryview, peer: str = "the other benchmark process") -> None:
    """Fill ``view`` from ``sock``; ConnectionError naming ``peer`` if it closes first."""
    got = 0
    while got < len(view):
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError(f"{peer} closed the connection after {got} of {len(view)} bytes")
        got += k


def recv_exact(sock: socket.socket, n: int, peer: str = "the other benchmark process") -> bytes:
    """Exactly ``n`` bytes from ``sock``."""
    buf = bytearray(n)
    recv_into_exact(sock, memoryview(buf), peer)
    return bytes(buf)
