# SPDX-License-Identifier: MIT
"""Local TCP ports for processes MORI starts itself (a launcher's store, a test's server).

``free_port`` asks the kernel for an unused port; ``restartable_port`` picks one below the
kernel's ephemeral range, for a server that is stopped and started again on the same port;
``job_master_port`` a MASTER_PORT whose next port (MORI's store in a MASTER_ADDR job) is free
too; ``wait_port`` waits until something listens on one. A port is free when they return, not
reserved: the caller hands it to the process that binds it next, which is the usual (and only
portable) way to do this.
"""

from __future__ import annotations

import random
import socket
import subprocess
import time

from mori.core.errors import RemoteError, Timeout

__all__ = ["free_port", "job_master_port", "restartable_port", "wait_port"]


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that nothing is bound to now (``""``: every interface)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def restartable_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that nothing is bound to now, below the kernel's ephemeral
    range (``net.ipv4.ip_local_port_range``), for a server that goes down and comes back on the
    same port. While it is down, a port in that range can be handed to any outgoing connection
    of the host as its local port (a client dialling the server itself may even connect to
    itself), which then holds the port the server wants back. Falls back to ``free_port`` where
    the range cannot be read or leaves no room below it."""
    return _below_ephemeral_range(host, 1)


def job_master_port(host: str = "127.0.0.1") -> int:
    """Return a ``MASTER_PORT`` for a job whose ranks start from MASTER_ADDR/MASTER_PORT/RANK/
    WORLD_SIZE: it and the next port are free now and below the kernel's ephemeral range. Rank 0
    hosts MORI's bootstrap store on ``MASTER_PORT + 1`` (``MASTER_PORT`` is torchrun's), and binds
    it only once its process has started, while the other ranks already dial it: a port of the
    ephemeral range could meanwhile be any outgoing connection's local port, or still held by
    one that closed (TIME_WAIT), and rank 0's bind would fail. Falls back to ``free_port`` for
    both where the range cannot be read or leaves no room below it (then checked free together)."""
    return _below_ephemeral_range(host, 2)


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _below_ephemeral_range(host: str, count: int) -> int:
    """The first of ``count`` consecutive ports that are all free now, below the ephemeral range
    where it leaves room (random ones are tried), else from ``free_port``."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    if low - count > 10000:
        for port in random.sample(range(10000, low - count + 1), min(64, low - count + 1 - 10000)):
            if all(_bindable(host, port + k) for k in range(count)):
                return port
    for _ in range(64):
        port = free_port(host)
        if port + count - 1 <= 65535 and all(_bindable(host, port + k) for k in range(1, count)):
            return port
    raise OSError(f"no {count} consecutive free TCP ports on {host}")


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
        if _listening(host, port):
            return
        if process is not None and process.poll() is not None:
            raise RemoteError(
                f"process {process.pid} exited with {process.returncode} before listening on {host}:{port}"
            )
        if time.monotonic() >= deadline:
            raise Timeout(f"nothing listens on {host}:{port} after {timeout}s")
        time.sleep(0.05)


def _listening(host: str, port: int) -> bool:
    """Whether a connection to ``host:port`` succeeds with something else than itself. While
    nothing listens on a port of the ephemeral range, a connect() to it may be given that very
    port and complete with itself; SO_REUSEADDR keeps the TIME_WAIT it leaves from stopping the
    server that binds the port next (as core/src/socket.cc's connect_tcp does)."""
    try:
        addrs = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return False
    for family, kind, proto, _, addr in addrs:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.settimeout(0.5)
            try:
                s.connect(addr)
            except OSError:
                continue
            if s.getsockname()[:2] != s.getpeername()[:2]:
                return True
    return False
