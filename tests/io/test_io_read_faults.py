# SPDX-License-Identifier: MIT
"""A large batch read in flight when the target dies (SIGKILL) or goes silent (SIGSTOP), on
every backend: the status turns into an error naming the target within MORI_IO_TIMEOUT_MS,
and the engine keeps working, with other engines at once and with the target once it is
back (issue 29, item 1)."""

from __future__ import annotations

import os
import signal
import time

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

pytestmark = pytest.mark.timeout(120)
_seq = iter(range(1 << 30))

TIMEOUT_MS = 3000
TOTAL = 128 << 20
ENTRY = 1 << 20


def rng_bytes(size: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def backend_env(variant: str) -> dict:
    if variant in ucx_variants.VARIANTS:
        return ucx_variants.env(variant)
    return {"MORI_IO_DIRECT": "1" if variant == "cma" else "0"}


def start_target(variant: str, key: str, seed: int):
    peer = RemotePeer(env={**backend_env(variant), "MORI_IO_TIMEOUT_MS": str(TIMEOUT_MS)})
    backend = "rdma" if variant in ucx_variants.VARIANTS else "tcp"
    desc = EngineDesc.unpack(unb64(peer.ask("engine", key=key, backend=backend)["engine"]))
    r = peer.ask("alloc", size=TOTAL, seed=seed)
    return peer, desc, MemoryDesc.unpack(unb64(r["mem"]))


def make_engine(variant: str) -> IOEngine:
    me = IOEngine(f"reader-{os.getpid()}-{next(_seq)}", IOEngineConfig("127.0.0.1", 0))
    if variant in ucx_variants.VARIANTS:
        me.create_backend(BackendType.RDMA)
    else:
        me.create_backend(BackendType.TCP, TcpBackendConfig(2, variant == "cma"))
    return me


def batch_read(me: IOEngine, local, remote, n: int = TOTAL // ENTRY):
    offs = [i * ENTRY for i in range(n)]
    return me.batch_read([local], [offs], [remote], [offs], [[ENTRY] * n], [me.allocate_transfer_uid()])[0]


def read_ok(me: IOEngine, local, remote, expect: np.ndarray, buf: np.ndarray) -> None:
    buf[:] = 0
    st = batch_read(me, local, remote, 8)
    assert st.WaitFor(30000) == StatusCode.SUCCESS, st.Message()
    assert np.array_equal(buf[: 8 * ENTRY], expect[: 8 * ENTRY])


@pytest.mark.parametrize("fault", ["kill", "stop"])
@pytest.mark.parametrize("variant", ["tcp", "cma", "ucx-tcp"])
def test_read_in_flight_when_target_fails(monkeypatch, variant, fault):
    if variant in ucx_variants.VARIANTS:
        ucx_variants.use(monkeypatch, variant)
    for k, v in backend_env(variant).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("MORI_IO_TIMEOUT_MS", str(TIMEOUT_MS))
    key = f"target-{os.getpid()}-{next(_seq)}"
    peer, desc, remote = start_target(variant, key, seed=21)
    # Another engine (in this process) the reader also talks to: it must keep working.
    other = make_engine(variant)
    other_buf = rng_bytes(8 * ENTRY, 22)
    other_mem = other.register_memory(other_buf.ctypes.data, other_buf.nbytes, -1, MemoryLocationType.CPU)
    try:
        me = make_engine(variant)
        me.register_remote_engine(desc)
        me.register_remote_engine(other.get_engine_desc())
        buf = np.zeros(TOTAL, dtype=np.uint8)
        local = me.register_memory(buf.ctypes.data, buf.nbytes, -1, MemoryLocationType.CPU)
        expect = rng_bytes(TOTAL, 21)
        read_ok(me, local, remote, expect, buf)  # connections (and grants) are up
        buf[:] = 0
        st = batch_read(me, local, remote)
        # Strike once the first bytes have arrived: the read is in flight.
        deadline = time.monotonic() + 10
        while not buf[:ENTRY].any() and st.InProgress() and time.monotonic() < deadline:
            pass
        os.kill(peer.proc.pid, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
        t0 = time.monotonic()
        code = st.WaitFor(TIMEOUT_MS + 5000)
        took = time.monotonic() - t0
        assert code != StatusCode.IN_PROGRESS, f"the read still runs {took:.1f} s after the {fault} of the target"
        if code == StatusCode.SUCCESS:
            # Finished before the fault struck (possible on the direct path, which a stopped
            # process does not block): then every byte must be right.
            assert np.array_equal(buf, expect)
        else:
            assert key in st.Message(), st.Message()
            assert took < TIMEOUT_MS / 1000 + 3, took
        # Other engines at once.
        t0 = time.monotonic()
        read_ok(me, local, other_mem, other_buf, buf)
        assert time.monotonic() - t0 < 2
        if fault == "kill":
            peer.proc.wait(30)
            later = batch_read(me, local, remote, 4)
            assert later.WaitFor(TIMEOUT_MS + 5000) != StatusCode.IN_PROGRESS
            assert later.Failed() and key in later.Message(), later.Message()
            # The target comes back (a new process, the same key): re-registered, it works.
            peer.kill()
            peer, desc, remote = start_target(variant, key, seed=23)
            me.register_remote_engine(desc)
            read_ok(me, local, remote, rng_bytes(TOTAL, 23), buf)
        else:
            os.kill(peer.proc.pid, signal.SIGCONT)
            me.register_remote_engine(desc)
            read_ok(me, local, remote, expect, buf)
    finally:
        try:
            os.kill(peer.proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        peer.kill()
