# SPDX-License-Identifier: MIT
"""MORI-IO's settings are read per engine, and MORI's Python names (issue 29, items 14, 15)."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import mori.cpp
import mori.io
from mori.io import BackendType, IOEngine, IOEngineConfig, MemoryLocationType, StatusCode

pytestmark = pytest.mark.timeout(60)


def make(key: str, backend: BackendType = BackendType.TCP) -> IOEngine:
    e = IOEngine(f"{key}-{os.getpid()}", IOEngineConfig("127.0.0.1", 0))
    e.create_backend(backend)
    return e


def test_settings_are_read_per_engine(monkeypatch):
    monkeypatch.setenv("MORI_NODE_ID", "node-x")
    assert make("a").get_engine_desc().node_id == "node-x"
    monkeypatch.setenv("MORI_NODE_ID", "node-y")
    assert make("b").get_engine_desc().node_id == "node-y"
    monkeypatch.delenv("MORI_NODE_ID")
    assert make("c").get_engine_desc().node_id not in ("node-x", "node-y", "")
    monkeypatch.setenv("MORI_IO_RDMA_TRANSPORT", "carrier-pigeon")
    with pytest.raises(ValueError, match="MORI_IO_RDMA_TRANSPORT"):
        IOEngine(f"d-{os.getpid()}", IOEngineConfig("127.0.0.1", 0))
    monkeypatch.setenv("MORI_IO_RDMA_TRANSPORT", "tcp")
    # Same-host CPU memory: direct or tcp as MORI_IO_DIRECT said when each engine was made.
    bufs = [np.random.default_rng(i).integers(0, 256, 4096, dtype=np.uint8) for i in range(2)]
    for direct, want in (("0", "tcp"), ("1", "cma")):
        monkeypatch.setenv("MORI_IO_DIRECT", direct)
        x, y = make(f"x{direct}", BackendType.RDMA), make(f"y{direct}", BackendType.RDMA)
        x.register_remote_engine(y.get_engine_desc())
        mx, my = (e.register_memory(b.ctypes.data, b.nbytes, -1, MemoryLocationType.CPU) for e, b in zip((x, y), bufs))
        assert x.backend_for(mx, my) == want


def test_pop_inbound_keywords(monkeypatch):
    monkeypatch.setenv("MORI_IO_DIRECT", "0")
    target, init = make("t"), make("i")
    target.register_remote_engine(init.get_engine_desc())
    init.register_remote_engine(target.get_engine_desc())
    src = np.random.default_rng(3).integers(0, 256, 256, dtype=np.uint8)
    dst = np.zeros(256, dtype=np.uint8)
    lm = init.register_memory(src.ctypes.data, src.nbytes, -1, MemoryLocationType.CPU)
    rm = target.register_memory(dst.ctypes.data, dst.nbytes, -1, MemoryLocationType.CPU)
    key = init.get_engine_desc().key
    for uid in (5, 6):
        assert init.write(lm, 0, rm, 0, 256, uid).WaitFor(30000) == StatusCode.SUCCESS
    assert np.array_equal(dst, src)
    deadline = time.monotonic() + 10
    while (st := target.pop_inbound_transfer_status(key, transfer_uid=5)) is None:  # MORI's keyword
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert st.Code() == StatusCode.SUCCESS
    while target.pop_inbound_transfer_status(key, uid=6) is None:  # ours
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert target.pop_inbound_transfer_status(key, 6) is None  # positional, erased by the pop
    with pytest.raises(TypeError, match="transfer_uid"):
        target.pop_inbound_transfer_status(key)
    with pytest.raises(TypeError, match="transfer_uid"):
        target.pop_inbound_transfer_status(key, 5, uid=5)


def test_mori_cpp_has_moris_native_io_names():
    for name in (
        "IOEngine",
        "IOEngineSession",
        "EngineDesc",
        "MemoryDesc",
        "BackendType",
        "MemoryLocationType",
        "StatusCode",
        "PollCqMode",
        "IOEngineConfig",
        "RdmaBackendConfig",
        "XgmiBackendConfig",
        "TransferStatus",
        "set_log_level",
    ):
        assert hasattr(mori.cpp, name), name
    assert mori.cpp.EngineDesc is mori.io.EngineDesc and mori.cpp.StatusCode is mori.io.StatusCode
    assert mori.cpp.StatusCode.ERR_BAD_STATE.value == 14 and mori.cpp.BackendType.RDMA.value == 2
    native = mori.cpp.IOEngine(f"native-{os.getpid()}", mori.cpp.IOEngineConfig("127.0.0.1", 0))
    assert native.get_engine_desc().key == f"native-{os.getpid()}"
    mori.cpp.set_log_level("warning")
    with pytest.raises(ValueError, match="level"):
        mori.cpp.set_log_level("loud")
