# SPDX-License-Identifier: MIT
"""A rank that dials the bootstrap store before the store's host has bound its port must not
take that port itself.

While nothing listens on a port of the host's ephemeral range, a connect() to it can be given
that very port as its own local port and then completes with itself (TCP's simultaneous open).
The rank would then hold the port its store is about to bind: rank 0 fails with "Address
already in use" and the others with "could not reach the bootstrap store" (CI met it twice in
one run). In a network namespace of its own whose ephemeral range is four ports, a connect()
to the first of them meets itself within a few tries, so a rank that dials it for half a second
provokes it: without the fix, rank 0's bind fails in every run.

The fix (core/src/socket.cc, connect_tcp): a connection that met itself is closed and counted
as refused, and client sockets set SO_REUSEADDR, so the TIME_WAIT it leaves does not keep the
port from the store's listener. Each half alone fails this test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(60)

PORT = 40000  # the first port of the namespace's ephemeral range

_STORE_AFTER_RANK = f"""
import os, socket, threading, time
from mori import _C

secret = os.urandom(32).hex()
got = {{}}

def rank_1():
    try:
        client = _C.core.StoreClient("127.0.0.1", {PORT}, secret, 1, 20.0)
        client.set("rank 1", b"here")
        got["rank 1"] = True
    except Exception as e:
        got["rank 1"] = repr(e)

t = threading.Thread(target=rank_1)
t.start()
time.sleep(0.5)  # rank 1 has been dialling for a while
server = _C.core.StoreServer(secret, "127.0.0.1", {PORT})
rank_0 = _C.core.StoreClient("127.0.0.1", {PORT}, secret, 0, 20.0)
t.join(30)
value = rank_0.get(["rank 1"], [1], 10.0)[0] if got.get("rank 1") is True else None
print("rank 1:", got.get("rank 1"), "value:", value)
server.stop()
"""


def in_small_namespace(program: str) -> subprocess.CompletedProcess:
    """Runs a Python program in a network namespace of its own whose ephemeral range is
    PORT..PORT+3."""
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    if os.geteuid() != 0 or unshare is None or ip is None:
        pytest.skip("needs root, unshare and ip (a network namespace of its own)")
    script = (
        f"{ip} link set lo up && "
        f"echo '{PORT} {PORT + 3}' > /proc/sys/net/ipv4/ip_local_port_range && "
        f'exec "{sys.executable}" -c "$0"'
    )
    run = subprocess.run([unshare, "-n", "sh", "-c", script, program], capture_output=True, text=True, timeout=50)
    if run.returncode != 0 and "unshare failed" in run.stderr:
        pytest.skip(f"no network namespace here: {run.stderr.strip()}")
    return run


def test_rank_dialling_early_leaves_the_store_port_free():
    run = in_small_namespace(_STORE_AFTER_RANK)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "rank 1: True value: b'here'" in run.stdout, run.stdout + run.stderr


_WAIT_THEN_SERVE = f"""
import socket, time
from mori.core.errors import Timeout
from mori.core.ports import wait_port

t = time.monotonic()
try:
    wait_port({PORT}, timeout=1.5)
    print("wait_port returned with nothing listening")
except Timeout:
    print("wait_port timed out after", round(time.monotonic() - t, 1), "s")
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", {PORT}))
server.listen()
wait_port({PORT}, timeout=5)
print("served")
"""


def test_wait_port_is_not_fooled_by_meeting_itself():
    """mori.core.ports.wait_port dials until something listens: a connection that met itself is
    not a listener, and leaves the port bindable by the server that comes next."""
    run = in_small_namespace(_WAIT_THEN_SERVE)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "wait_port timed out after" in run.stdout and "served" in run.stdout, run.stdout + run.stderr
