# SPDX-License-Identifier: MIT
"""MORI-IO's target under careless or hostile initiators (issue 29, items 4-8): forged
notifications, unpopped notifications, connection floods by descriptor holders, peers that
stop reading during a deregistration, and wrong region keys on the same-host direct path."""

from __future__ import annotations

import os
import signal
import threading
import time

import msgpack
import numpy as np
import pytest

import ucx_variants
from peer import RemotePeer, b64

from mori.io import BackendType, IOEngine, IOEngineConfig, MemoryDesc, MemoryLocationType, StatusCode, TcpBackendConfig

pytestmark = pytest.mark.timeout(120)
_seq = iter(range(1 << 30))


def rng_bytes(size: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def engine(key: str | None = None, lanes: int = 1, direct: bool = False, rdma: bool = False) -> IOEngine:
    e = IOEngine(key or f"e-{os.getpid()}-{next(_seq)}", IOEngineConfig("127.0.0.1", 0))
    if rdma:
        e.create_backend(BackendType.RDMA)
    else:
        e.create_backend(BackendType.TCP, TcpBackendConfig(lanes, direct))
    return e


def cpu(e: IOEngine, buf: np.ndarray) -> MemoryDesc:
    return e.register_memory(buf.ctypes.data, buf.nbytes, -1, MemoryLocationType.CPU)


def wait_for(cond, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.005)
    return cond()


# -- item 4: notifications carry the authenticated sender ---------------------------------------


@pytest.mark.parametrize("variant", ["tcp", "ucx-tcp"])
def test_notification_in_another_engines_name_is_not_credited(monkeypatch, variant):
    rdma = variant in ucx_variants.VARIANTS
    if rdma:
        ucx_variants.use(monkeypatch, variant)
    else:
        monkeypatch.setenv("MORI_IO_DIRECT", "0")
    target = engine(rdma=rdma)
    tbuf = rng_bytes(1 << 16, 1)
    tmem = cpu(target, tbuf)
    honest = engine(rdma=rdma)
    target.register_remote_engine(honest.get_engine_desc())  # the target knows who "honest" is
    honest.register_remote_engine(target.get_engine_desc())
    src = rng_bytes(4096, 2)
    st = honest.write(cpu(honest, src), 0, tmem, 0, 4096, 41)
    assert st.WaitFor(30000) == StatusCode.SUCCESS, st.Message()
    assert wait_for(lambda: target.pop_inbound_transfer_status(honest.get_engine_desc().key, 41) is not None)
    # A forger holding the target's descriptors names itself after "honest".
    forger = engine(key=honest.get_engine_desc().key, rdma=rdma)
    forger.register_remote_engine(target.get_engine_desc())
    fbuf = rng_bytes(4096, 3)
    st = forger.write(cpu(forger, fbuf), 0, tmem, 8192, 4096, 42)
    assert st.WaitFor(30000) != StatusCode.IN_PROGRESS
    assert st.Failed() and "proof" in st.Message(), st.Message()
    assert np.array_equal(tbuf[8192:12288], rng_bytes(1 << 16, 1)[8192:12288])  # nothing written
    # Naming an engine the target does not know: served, but its notifications count for nobody.
    stranger = engine(key=f"unknown-{next(_seq)}", rdma=rdma)
    stranger.register_remote_engine(target.get_engine_desc())
    st = stranger.write(cpu(stranger, fbuf), 0, tmem, 0, 4096, 43)
    assert st.WaitFor(30000) == StatusCode.SUCCESS, st.Message()
    time.sleep(0.3)  # the notice follows the data at once when it is sent at all
    assert target.pop_inbound_transfer_status(stranger.get_engine_desc().key, 43) is None
    assert target.pop_inbound_transfer_status(honest.get_engine_desc().key, 42) is None
    assert target.pop_inbound_transfer_status(honest.get_engine_desc().key, 43) is None


# -- item 5: a bounded notification queue; MORI_IO_ENABLE_NOTIFICATION=0 everywhere ---------------


def test_unpopped_notifications_are_bounded(monkeypatch):
    monkeypatch.setenv("MORI_IO_DIRECT", "0")
    monkeypatch.setenv("MORI_IO_MAX_NOTIFICATIONS", "100")
    target = engine()
    tbuf = np.zeros(1 << 16, dtype=np.uint8)
    tmem = cpu(target, tbuf)
    init = engine()
    target.register_remote_engine(init.get_engine_desc())
    init.register_remote_engine(target.get_engine_desc())
    src = rng_bytes(64, 4)
    lmem = cpu(init, src)
    statuses = [init.write(lmem, 0, tmem, 64 * (i % 1000), 64, i) for i in range(150)]
    assert init.wait_all(statuses, 30000) == StatusCode.SUCCESS
    assert wait_for(lambda: target.dropped_notifications() == 50)
    key = init.get_engine_desc().key
    assert wait_for(lambda: target.pop_inbound_transfer_status(key, 149) is not None)
    assert [target.pop_inbound_transfer_status(key, i) is not None for i in range(149)] == [False] * 50 + [
        True
    ] * 99  # the oldest 50 went
    assert target.dropped_notifications() == 50
    assert np.array_equal(tbuf[:64], src)


@pytest.mark.parametrize("backend", ["tcp", "rdma"])
def test_enable_notification_0_is_honoured(monkeypatch, backend):
    monkeypatch.setenv("MORI_IO_DIRECT", "0")
    monkeypatch.setenv("MORI_IO_RDMA_TRANSPORT", "tcp")

    def one_write(uid: int) -> bool:
        target, init = engine(rdma=backend == "rdma"), engine(rdma=backend == "rdma")
        target.register_remote_engine(init.get_engine_desc())
        init.register_remote_engine(target.get_engine_desc())
        src, dst = rng_bytes(64, uid), np.zeros(64, dtype=np.uint8)
        st = init.write(cpu(init, src), 0, cpu(target, dst), 0, 64, uid)
        assert st.WaitFor(30000) == StatusCode.SUCCESS, st.Message()
        assert np.array_equal(dst, src)
        return wait_for(lambda: target.pop_inbound_transfer_status(init.get_engine_desc().key, uid) is not None, 0.5)

    assert one_write(7)  # on by default
    monkeypatch.setenv("MORI_IO_ENABLE_NOTIFICATION", "0")
    assert not one_write(8)


# -- item 6: connections per peer and in total are capped -----------------------------------------


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_connection_caps(monkeypatch):
    monkeypatch.setenv("MORI_IO_DIRECT", "0")
    monkeypatch.setenv("MORI_IO_MAX_CONNECTIONS_PER_PEER", "3")
    monkeypatch.setenv("MORI_IO_MAX_CONNECTIONS", "8")
    target = engine()
    tbuf = rng_bytes(1 << 16, 6)
    tmem = cpu(target, tbuf)

    def write_with(lanes: int):
        e = engine(lanes=lanes)
        e.register_remote_engine(target.get_engine_desc())
        src = rng_bytes(4096, lanes)
        st = e.write(cpu(e, src), 0, tmem, 0, 4096, 1)
        st.WaitFor(30000)
        return e, st, src

    a, st, src = write_with(4)  # the 4th lane is one too many for one peer
    assert st.Failed() and "MORI_IO_MAX_CONNECTIONS_PER_PEER" in st.Message() and "3" in st.Message(), st.Message()
    b, st, src = write_with(3)  # 3 + 3 = 6 connections
    assert st.Code() == StatusCode.SUCCESS, st.Message()
    assert np.array_equal(tbuf[:4096], src)
    before = threads()
    refused = []
    for _ in range(10):  # each would take the 9th connection
        e, st, _ = write_with(3)
        assert st.Failed() and "MORI_IO_MAX_CONNECTIONS" in st.Message() and "8" in st.Message(), st.Message()
        refused.append(e)
    # Refused connections cost no thread on the target (each kept its 2 lanes' threads here).
    assert wait_for(lambda: threads() <= before + 10 * 2 * 2 * 2, 5), (before, threads())
    del refused, e
    assert wait_for(lambda: threads() <= before, 5), (before, threads())


# -- item 7: deregistration does not wait on stalled peers beyond the timeout ---------------------


def test_deregister_with_stalled_readers(monkeypatch):
    timeout_ms = 3000
    monkeypatch.setenv("MORI_IO_DIRECT", "0")
    monkeypatch.setenv("MORI_IO_TIMEOUT_MS", str(timeout_ms))
    size = 32 << 20
    target = engine()
    tbuf = rng_bytes(size, 7)
    tmem = cpu(target, tbuf)
    readers = [RemotePeer(env={"MORI_IO_DIRECT": "0", "MORI_IO_TIMEOUT_MS": "60000"}) for _ in range(3)]
    try:
        for i, r in enumerate(readers):
            r.ask("engine", key=f"reader-{os.getpid()}-{next(_seq)}-{i}")
            r.ask("peer", engine=b64(target.get_engine_desc().pack()))
            local = r.ask("alloc", size=size, seed=8)["index"]
            for _ in range(6):  # 192 MiB in flight: the reader stops in the middle of them
                r.ask("post", op="read", local=local, remote=b64(tmem.pack()), size=size)
            os.kill(r.proc.pid, signal.SIGSTOP)
        time.sleep(0.2)
        other = engine()
        other.register_remote_engine(target.get_engine_desc())
        obuf = np.zeros(4096, dtype=np.uint8)
        omem = cpu(other, obuf)
        t0 = time.monotonic()
        done = threading.Event()
        threading.Thread(target=lambda: (target.deregister_memory(tmem), done.set()), daemon=True).start()
        time.sleep(0.1)
        st = other.read(omem, 0, tmem, 0, 4096, 1)  # during the deregistration: refused at once
        assert st.WaitFor(2000) == StatusCode.ERR_INVALID_ARGS and "not registered" in st.Message(), st.Message()
        assert done.wait(timeout_ms / 1000 + 10), "deregister_memory hangs"
        took = time.monotonic() - t0
        assert took < timeout_ms / 1000 + 1.0, f"deregister_memory took {took:.1f} s"
        st = other.read(omem, 0, tmem, 0, 4096, 2)  # and after it
        assert st.WaitFor(2000) == StatusCode.ERR_INVALID_ARGS and "not registered" in st.Message(), st.Message()
        assert not obuf.any()
    finally:
        for r in readers:
            try:
                os.kill(r.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            r.kill()


# -- item 8: the same-host direct path checks the region key on every request ---------------------


def with_region_key(desc: MemoryDesc, key: int) -> MemoryDesc:
    fields = msgpack.unpackb(desc.pack(), raw=False)
    fields[15] = key
    return MemoryDesc.unpack(msgpack.packb(fields, use_bin_type=True))


@pytest.mark.parametrize("direct", [False, True], ids=["tcp", "cma"])
def test_wrong_region_key_is_refused_on_every_request(monkeypatch, direct):
    monkeypatch.setenv("MORI_IO_DIRECT", "1" if direct else "0")
    target, init = engine(direct=direct), engine(direct=direct)
    init.register_remote_engine(target.get_engine_desc())
    tbuf = rng_bytes(1 << 16, 9)
    tmem = cpu(target, tbuf)
    src = rng_bytes(4096, 10)
    lmem = cpu(init, src)
    assert init.backend_for(lmem, tmem) == ("cma" if direct else "tcp")
    st = init.write(lmem, 0, tmem, 0, 4096, 1)  # the right key first (a direct grant is made)
    assert st.WaitFor(30000) == StatusCode.SUCCESS, st.Message()
    assert np.array_equal(tbuf[:4096], src)
    forged = with_region_key(tmem, (int(msgpack.unpackb(tmem.pack(), raw=False)[15]) + 1) % (1 << 64))
    before = tbuf.copy()
    for op in (init.write, init.read):
        st = op(lmem, 0, forged, 4096, 4096, 2)
        assert st.WaitFor(30000) == StatusCode.ERR_INVALID_ARGS, (st.Code(), st.Message())
        assert "wrong key" in st.Message() and str(tmem.id) in st.Message(), st.Message()
    assert np.array_equal(tbuf, before) and np.array_equal(src, rng_bytes(4096, 10))
