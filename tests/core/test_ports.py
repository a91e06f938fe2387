# SPDX-License-Identifier: MIT
"""mori.core.ports: the one free_port / restartable_port / job_master_port / wait_port of tests,
launcher and umbp."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest

from mori.core.errors import RemoteError, Timeout
from mori.core.ports import free_port, job_master_port, restartable_port, wait_port


def test_free_port_can_be_bound_and_waited_for():
    port = free_port()
    assert 1024 <= port < 65536
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def listen_later() -> None:
        time.sleep(0.3)  # wait_port must poll, not give up on the first refusal
        server.bind(("127.0.0.1", port))
        server.listen()

    t = threading.Thread(target=listen_later)
    t.start()
    try:
        wait_port(port, timeout=10)
    finally:
        t.join()
        server.close()


def test_free_port_on_every_interface():
    port = free_port("")
    with socket.socket() as s:
        s.bind(("", port))


def test_nothing_listening_times_out_naming_the_address():
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(Timeout, match=f"127.0.0.1:{port}") as caught:
        wait_port(port, timeout=0.3)
    assert isinstance(caught.value, TimeoutError)
    assert time.monotonic() - t0 < 5


def test_server_that_died_is_not_waited_for():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(7)"])
    proc.wait(timeout=30)
    t0 = time.monotonic()
    with pytest.raises(RemoteError, match=f"exited with 7 before listening on 127.0.0.1:{port}"):
        wait_port(port, timeout=60, process=proc)
    assert time.monotonic() - t0 < 5


def test_restartable_port_is_below_the_ephemeral_range_and_comes_back():
    """A server stopped and started again on a restartable_port gets it back while clients keep
    dialling it: below ip_local_port_range, no outgoing connection is handed that port as its
    own meanwhile."""
    port = restartable_port()
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    if low > 10000:
        assert 10000 <= port < low
    for _ in range(3):
        with socket.socket() as server:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("127.0.0.1", port))
            server.listen()
        for _ in range(200):  # dialled while down: refused every time, never connected
            with socket.socket() as c:
                assert c.connect_ex(("127.0.0.1", port)) != 0


def test_job_master_port_leaves_the_store_port_free_below_the_ephemeral_range():
    """A MASTER_ADDR job's rank 0 binds MORI's store on MASTER_PORT + 1 after the other ranks
    start dialling it. job_master_port gives a MASTER_PORT whose next port is free too and, like
    both, below ip_local_port_range, where no outgoing connection (or its TIME_WAIT) can hold it
    (CI once failed with rank 0's "bind ...: Address already in use" on a free_port + 1)."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    for _ in range(20):
        port = job_master_port()
        if low > 10002:
            assert 10000 <= port and port + 1 < low
        for p in (port, port + 1):
            with socket.socket() as s:
                s.bind(("127.0.0.1", p))  # free: nothing else is bound to either
