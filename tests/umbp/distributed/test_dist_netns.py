# SPDX-License-Identifier: MIT
"""The pool across pretend hosts: network namespaces on one bridge (mori.apps.netns). Host 0
runs the master, host 1 worker a (the larger DRAM), host 2 worker b; each worker has its own
MORI_NODE_ID, so MORI-IO moves the bytes over tcp between the namespaces, never the same-host
path. b's puts land on a (a pulls them from b), b reads them back and a's own puts, bytes
checked. Skips where namespaces cannot be made (not root, no iproute2)."""

from __future__ import annotations

import os
import random
import select
import subprocess
import sys
import threading
import time

import pytest
from dist_harness import start_workers
from umbp_master_harness import stop_process, uid

from mori.apps.netns import BridgedHosts, unavailable_reason

pytestmark = pytest.mark.timeout(180)
MIB = 1 << 20
MASTER_PORT = 15558


@pytest.fixture
def hosts():
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"two-host UMBP needs network namespaces: {reason}")
    with BridgedHosts(count=3, subnet="10.207.0") as h:
        yield h.hosts


def _master_in(host) -> tuple[subprocess.Popen, threading.Thread]:
    """``umbp_master`` inside the namespace, on its veth address; returns once it listens, with
    the thread that keeps its output drained (a master blocked on a full pipe would hang)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = host.popen(
        [sys.executable, "-m", "mori.umbp.distributed.master_server", f"{host.ip}:{MASTER_PORT}", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 60  # a loaded 2-core box may take long to import it
    seen = ""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            seen += line
            # Its log line comes once the port is bound and serving (the "listening" print
            # right after it may sit in this reader's buffer, unseen by select).
            if "umbp master on" in line or "listening on" in line:
                drain = threading.Thread(target=proc.stdout.read, daemon=True)
                drain.start()
                return proc, drain
            if not line and proc.poll() is not None:
                break
    proc.kill()
    raise AssertionError(f"umbp_master did not start in {host.name}:\n{seen}")


def test_put_on_one_host_get_on_the_other(hosts):
    hm, h0, h1 = hosts
    master, drain = _master_in(hm)
    address = f"{hm.ip}:{MASTER_PORT}"
    workers = []
    a_id = uid("a")
    try:
        a, b = workers[:] = start_workers(
            dict(master=address, node_id=a_id, dram=64 << 20, host=h0.ip),
            dict(master=address, node_id=uid("b"), dram=4 << 20, host=h1.ip, pool_bytes=8 << 20),
            prefixes=[h.command(["env", f"MORI_NODE_ID={h.name}"]) for h in (h0, h1)],
        )
        assert a.info["peer"].startswith(h0.ip) and b.info["peer"].startswith(h1.ip)
        seed = random.randrange(1 << 30)
        for size, batch, pool in ((64 << 10, 16, True), (1 * MIB, 3, False)):
            keys = [uid("x") for _ in range(batch)]
            before = b.ask("stats")["stats"]
            # b's DRAM is the smaller: the master routes its puts to a, across the link.
            assert b.ask("put", keys=keys, size=size, seed=seed, pool=pool)["ok"] == [True] * batch
            st = b.ask("stats")["stats"]
            assert st["remote_puts"] == before["remote_puts"] + batch
            assert st["pulled_puts"] == before["pulled_puts"] + batch  # a read them from b over tcp
            got = b.ask("get", keys=keys, size=size, seed=seed, pool=pool)
            assert got["right"] == [True] * batch
            assert a.ask("get", keys=keys, size=size, seed=seed)["right"] == [True] * batch  # a owns them
            # a's own puts stay on a (most room); b reads them across the link.
            mine = [uid("y") for _ in range(batch)]
            assert a.ask("put", keys=mine, size=size, seed=seed + 100)["ok"] == [True] * batch
            assert b.ask("get", keys=mine, size=size, seed=seed + 100, pool=pool)["right"] == [True] * batch
            assert b.ask("stats")["stats"]["remote_gets"] >= before["remote_gets"] + 2 * batch
        assert b.ask("exists", keys=[uid("absent")])["found"] == [False]
        assert b.ask("io_backend", node_id=a_id)["backend"] == "tcp"  # between hosts, not the same-host path
    finally:
        for w in workers:
            w.close()
        stop_process(master)
        drain.join(timeout=10)
        master.stdout.close()


def test_owner_link_down_then_up(hosts):
    """Issue 28's chaos case "down the veth link": the owner's cable is pulled while a reader on
    another host wants its keys. The reader's gets become misses within the deadlines (the master,
    on a third host, still answers; the owner's address does not), nothing wrong is served, and once
    the cable is back (within the master's heartbeat TTL, so the owner is not reaped) the same keys
    read right again."""
    hm, h0, h1 = hosts
    master, drain = _master_in(hm)
    address = f"{hm.ip}:{MASTER_PORT}"
    workers = []
    timeout_ms = 2000  # MORI-IO's deadline for a silent peer (no RST comes from a pulled cable)
    try:
        a, b = workers[:] = start_workers(
            dict(master=address, node_id=uid("a"), dram=64 << 20, host=h0.ip),
            dict(master=address, node_id=uid("b"), dram=4 << 20, host=h1.ip),
            prefixes=[
                h.command(["env", f"MORI_NODE_ID={h.name}", f"MORI_IO_TIMEOUT_MS={timeout_ms}"]) for h in (h0, h1)
            ],
        )
        keys = [uid("k") for _ in range(6)]
        seed = random.randrange(1 << 30)
        size = 256 << 10
        assert a.ask("put", keys=keys, size=size, seed=seed)["ok"] == [True] * 6
        before = b.ask("stats")["stats"]
        got = b.ask("get", keys=keys, size=size, seed=seed)["right"]
        assert got == [True] * 6, f"b: {b.moved_since(before)}\na's log:\n{a.stderr_so_far()[-3000:]}"
        b.ask("clear")  # drop any copy b cached: its next reads must go to a
        time.sleep(2.5)  # past the read lease b found them under (its remembered places)

        h0.set_link(False)
        t0 = time.monotonic()
        got = b.ask("get", keys=keys, size=size, seed=seed, timeout=60)
        took = time.monotonic() - t0
        assert got["ok"] == [False] * 6 and got["untouched_misses"] == [True] * 6
        assert took < 20, f"gets from an unplugged owner took {took:.1f} s"
        assert b.ask("stats")["stats"]["remote_errors"] >= 1

        h0.set_link(True)
        deadline = time.monotonic() + 30  # the failed peer's hold-off, then a fresh dial
        while True:
            got = b.ask("get", keys=keys, size=size, seed=seed, timeout=60)
            if got["ok"] == [True] * 6:
                assert got["right"] == [True] * 6
                break
            assert all(r for o, r in zip(got["ok"], got["right"]) if o)
            assert time.monotonic() < deadline, f"the keys never came back after the link did: {got}"
            time.sleep(0.5)
    finally:
        h0.set_link(True)
        for w in workers:
            w.close()
        stop_process(master)
        drain.join(timeout=10)
        master.stdout.close()
