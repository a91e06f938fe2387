# SPDX-License-Identifier: MIT
"""MORI-IO under attack and failure: strangers on the port (garbage, wrong secret, replay,
idle floods), killed and stopped peers, a downed link between two network namespaces.
Nothing may hang and nothing may be written by anyone who lacks the descriptors."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import threading
import time

import msgpack
import numpy as np
import pytest

import ucx_variants
from peer import RemotePeer, unb64

from mori.io import (
    BackendType,
    EngineDesc,
    IOEngine,
    IOEngineConfig,
    MemoryDesc,
    MemoryLocationType,
    StatusCode,
    TcpBackendConfig,
)

pytestmark = pytest.mark.timeout(180)
_seq = iter(range(1 << 30))


def rng_bytes(size: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def start_target(env: dict | None = None, prefix=(), backend: str = "tcp"):
    peer = RemotePeer(env={"MORI_IO_DIRECT": "0", **(env or {})}, prefix=prefix)
    desc = EngineDesc.unpack(
        unb64(
            peer.ask("engine", key=f"target-{next(_seq)}", backend=backend, host="0.0.0.0" if prefix else "127.0.0.1")[
                "engine"
            ]
        )
    )
    return peer, desc


def make_initiator(remote: EngineDesc, rdma: bool = False) -> IOEngine:
    me = IOEngine(f"initiator-{next(_seq)}", IOEngineConfig("127.0.0.1", 0))
    if rdma:
        me.create_backend(BackendType.RDMA)
    else:
        me.create_backend(BackendType.TCP, TcpBackendConfig(2, False))
    me.register_remote_engine(remote)
    return me


def with_fields(desc: EngineDesc, **changes) -> EngineDesc:
    fields = msgpack.unpackb(desc.pack(), raw=False)
    names = ["key", "node_id", "hostname", "host", "port", "pid", "secret"]
    for k, v in changes.items():
        fields[names.index(k)] = v
    return EngineDesc.unpack(msgpack.packb(fields, use_bin_type=True))


@pytest.fixture
def target():
    peer, desc = start_target()
    r = peer.ask("alloc", size=1 << 20, seed=5)
    yield peer, desc, r
    peer.close()


@pytest.fixture(params=["tcp", "ucx-tcp"])
def any_target(request, monkeypatch):
    """A target on the tcp backend, or on BackendType.RDMA over UCX (both processes);
    yields (peer, desc, region, rdma) where rdma says how to make the initiator."""
    ucx = request.param in ucx_variants.VARIANTS
    if ucx:
        ucx_variants.use(monkeypatch, request.param)
    peer, desc = start_target(ucx_variants.env(request.param) if ucx else None, backend="rdma" if ucx else "tcp")
    r = peer.ask("alloc", size=1 << 20, seed=5)
    yield peer, desc, r, ucx
    peer.close()


def digest_unchanged(peer, r) -> bool:
    return peer.ask("digest", index=r["index"])["sha"] == hashlib.sha256(rng_bytes(1 << 20, 5).tobytes()).hexdigest()


def legit_write_works(desc, r) -> None:
    me = make_initiator(desc)
    buf = rng_bytes(4096, 6)
    local = me.register_memory(buf.ctypes.data, buf.nbytes, -1, MemoryLocationType.CPU)
    st = me.write(local, 0, MemoryDesc.unpack(unb64(r["mem"])), 8192, 4096, 1)
    assert st.WaitFor(30000) == StatusCode.SUCCESS, st.Message()


def test_stranger_garbage_and_idle_flood(target):
    peer, desc, r = target
    junk = []
    for payload in (b"", b"GET / HTTP/1.0\r\n\r\n", os.urandom(4096), b"MORIAUTH" + os.urandom(200)):
        s = socket.create_connection((desc.host, desc.port), timeout=10)
        s.sendall(payload)
        junk.append(s)
    idle = [socket.create_connection((desc.host, desc.port), timeout=10) for _ in range(100)]
    for s in junk:
        s.settimeout(10)
        try:
            while s.recv(4096):  # the engine answers nothing useful, then closes
                pass
        except (ConnectionResetError, socket.timeout):
            pass
    assert digest_unchanged(peer, r)
    for s in idle + junk:
        s.close()
    legit_write_works(desc, r)  # still serving


def test_wrong_secret_is_refused(any_target):
    """Over UCX too: the control connection's challenge-response fails before any UCX
    endpoint is used, so nothing is written (the rkey never helps without the secret)."""
    peer, desc, r, rdma = any_target
    forged = with_fields(desc, secret=os.urandom(32))
    me = make_initiator(forged, rdma)
    buf = rng_bytes(1 << 20, 8)
    local = me.register_memory(buf.ctypes.data, buf.nbytes, -1, MemoryLocationType.CPU)
    st = me.write(local, 0, MemoryDesc.unpack(unb64(r["mem"])), 0, 1 << 20, 1)
    assert st.WaitFor(30000) == StatusCode.ERR_RDMA_OP
    assert "prove" in st.Message() and desc.key in st.Message()
    with pytest.raises(RuntimeError, match="secret"):
        me.create_session(local, MemoryDesc.unpack(unb64(r["mem"])))
    assert digest_unchanged(peer, r)


class Recorder:
    """A TCP proxy that records what the client sends on its first connection."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.sent = bytearray()
        self.first = True
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            u = socket.create_connection(self.upstream)
            record = self.first
            self.first = False

            def pump(a, b, rec):
                try:
                    while data := a.recv(65536):
                        if rec:
                            self.sent.extend(data)
                        b.sendall(data)
                except OSError:
                    pass
                for s in (a, b):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

            threading.Thread(target=pump, args=(c, u, record), daemon=True).start()
            threading.Thread(target=pump, args=(u, c, False), daemon=True).start()


def test_replayed_session_is_refused(target):
    """Record a real client's bytes (handshake + a write) and replay them: refused, nothing written."""
    peer, desc, r = target
    rec = Recorder(desc.host, desc.port)
    me = IOEngine(f"initiator-{next(_seq)}", IOEngineConfig("127.0.0.1", 0))
    me.create_backend(BackendType.TCP, TcpBackendConfig(1, False))
    me.register_remote_engine(with_fields(desc, host="127.0.0.1", port=rec.port))
    buf = rng_bytes(1 << 20, 9)
    local = me.register_memory(buf.ctypes.data, buf.nbytes, -1, MemoryLocationType.CPU)
    st = me.write(local, 0, MemoryDesc.unpack(unb64(r["mem"])), 0, 1 << 20, 1)
    assert st.WaitFor(30000) == StatusCode.SUCCESS, st.Message()
    time.sleep(0.2)
    recorded = bytes(rec.sent)
    assert len(recorded) > (1 << 20)
    # Put the original bytes back, then replay the recorded stream on a fresh connection.
    restore = IOEngine(f"restore-{next(_seq)}", IOEngineConfig("127.0.0.1", 0))
    restore.create_backend(BackendType.TCP, TcpBackendConfig(1, False))
    restore.register_remote_engine(desc)
    orig = rng_bytes(1 << 20, 5)
    od = restore.register_memory(orig.ctypes.data, orig.nbytes, -1, MemoryLocationType.CPU)
    assert restore.write(od, 0, MemoryDesc.unpack(unb64(r["mem"])), 0, 1 << 20, 1).WaitFor(30000) == StatusCode.SUCCESS
    assert digest_unchanged(peer, r)
    s = socket.create_connection((desc.host, desc.port), timeout=10)
    try:
        s.sendall(recorded)
    except OSError:
        pass
    s.settimeout(10)
    try:
        while s.recv(65536):
            pass
    except OSError:
        pass
    s.close()
    assert digest_unchanged(peer, r)
    legit_write_works(desc, r)


def test_killed_peer_fails_in_flight_and_later_transfers(any_target):
    peer, desc, r, rdma = any_target
    me = make_initiator(desc, rdma)
    buf = rng_bytes(1 << 20, 10)
    local = me.register_memory(buf.ctypes.data, buf.nbytes, -1, MemoryLocationType.CPU)
    remote = MemoryDesc.unpack(unb64(r["mem"]))
    assert me.write(local, 0, remote, 0, 1 << 20, 1).WaitFor(30000) == StatusCode.SUCCESS
    inflight = [me.write(local, 0, remote, 0, 1 << 20, i) for i in range(20)]
    peer.proc.kill()
    peer.proc.wait(30)
    t0 = time.monotonic()
    later = me.read(local, 0, remote, 0, 4096, 99)
    for st in inflight + [later]:
        code = st.WaitFor(20000)
        assert code != StatusCode.IN_PROGRESS
    assert time.monotonic() - t0 < 20
    assert later.Failed() and desc.key in later.Message()


@pytest.mark.parametrize("variant", ["tcp", "ucx-tcp"])
def test_stopped_peer_times_out(monkeypatch, variant):
    """A SIGSTOPped peer: transfers fail after MORI_IO_TIMEOUT_MS, naming the peer."""
    ucx = variant in ucx_variants.VARIANTS
    if ucx:
        ucx_variants.use(monkeypatch, variant)
    monkeypatch.setenv("MORI_IO_TIMEOUT_MS", "1500")
    peer, desc = start_target(ucx_variants.env(variant) if ucx else None, backend="rdma" if ucx else "tcp")
    try:
        r = peer.ask("alloc", size=64 << 20, seed=11)
        me = make_initiator(desc, ucx)
        buf = rng_bytes(64 << 20, 12)
        local = me.register_memory(buf.ctypes.data, buf.nbytes, -1, MemoryLocationType.CPU)
        remote = MemoryDesc.unpack(unb64(r["mem"]))
        assert me.read(local, 0, remote, 0, 4096, 1).WaitFor(30000) == StatusCode.SUCCESS
        os.kill(peer.proc.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        w = me.write(local, 0, remote, 0, 64 << 20, 2)
        rd = me.read(local, 0, remote, 0, 4096, 3)
        assert w.WaitFor(15000) != StatusCode.IN_PROGRESS and rd.WaitFor(15000) != StatusCode.IN_PROGRESS
        assert w.Failed() and rd.Failed()
        assert time.monotonic() - t0 < 12
        assert desc.key in rd.Message() or desc.key in w.Message()
    finally:
        os.kill(peer.proc.pid, signal.SIGCONT)
        peer.kill()


@pytest.mark.netns
@pytest.mark.parametrize("variant", ["tcp", "ucx-tcp"])
def test_downed_link_between_hosts(variant):
    """Two namespaces ("hosts"): a transfer works over the veth link; with the link down,
    one posted with the link down fails within the timeout (no RST ever arrives)."""
    from mori.apps.netns import VethHosts, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    ucx = variant in ucx_variants.VARIANTS
    if ucx and ucx_variants.unavailable():
        pytest.skip(ucx_variants.unavailable())
    extra = ucx_variants.env(variant) if ucx else {}
    backend = "rdma" if ucx else "tcp"
    with VethHosts(subnet="10.207.0") as hosts:
        a, b = hosts.hosts
        # UCX pinned to the veth (its lo would be the other namespace's loopback).
        pin = (lambda h: {"UCX_NET_DEVICES": h.ifname}) if ucx else (lambda h: {})
        target = RemotePeer(env={"MORI_NODE_ID": "host-b", **extra, **pin(b)}, prefix=["ip", "netns", "exec", b.name])
        init = RemotePeer(
            env={"MORI_NODE_ID": "host-a", "MORI_IO_TIMEOUT_MS": "2000", **extra, **pin(a)},
            prefix=["ip", "netns", "exec", a.name],
        )
        try:
            tdesc = target.ask("engine", key="target-b", host=b.ip, backend=backend)["engine"]
            idesc = init.ask("engine", key="init-a", host=a.ip, backend=backend)["engine"]
            init.ask("peer", engine=tdesc)
            target.ask("peer", engine=idesc)
            r = target.ask("alloc", size=32 << 20, seed=1)
            l = init.ask("alloc", size=32 << 20, seed=2)
            out = init.ask(
                "transfer", op="write", local=l["index"], remote=r["mem"], loffs=[0], roffs=[0], sizes=[1 << 20]
            )
            assert out["code"] == int(StatusCode.SUCCESS), out["message"]
            # Down first, then post: a fast machine finished the write before a later link_down.
            # The target's reply cannot cross a downed link, so this post must time out.
            hosts.link_down(1)
            t0 = time.monotonic()
            posted = init.ask("post", op="write", local=l["index"], remote=r["mem"], size=32 << 20)
            res = init.ask("wait", index=posted["index"], timeout_ms=20000, timeout=40)
            assert res["code"] > 10, res
            assert time.monotonic() - t0 < 15
            assert "target-b" in res["message"]
        finally:
            init.kill()
            target.kill()
