# SPDX-License-Identifier: MIT
"""MORI-IO's names, enum values, positional signatures and defaults (reference/mori-io.md §1),
and lifetime safety: memory deregistered while a transfer uses it."""

from __future__ import annotations

import numpy as np
import pytest

import mori.cpp
import mori.io as io

pytestmark = pytest.mark.timeout(120)


def test_names_and_enum_values():
    for name in [
        "IOEngine",
        "IOEngineConfig",
        "IOEngineSession",
        "BackendType",
        "MemoryLocationType",
        "StatusCode",
        "PollCqMode",
        "RdmaBackendConfig",
        "XgmiBackendConfig",
        "EngineDesc",
        "MemoryDesc",
        "set_log_level",
    ]:
        assert hasattr(io, name), name
    assert mori.cpp.TransferStatus is io.TransferStatus
    B, M, S = io.BackendType, io.MemoryLocationType, io.StatusCode
    assert [int(B.Unknown), int(B.XGMI), int(B.RDMA), int(B.TCP), int(B.FABRIC)] == [0, 1, 2, 3, 4]
    assert [int(M.Unknown), int(M.CPU), int(M.GPU)] == [0, 1, 2]
    assert [
        int(S.SUCCESS),
        int(S.INIT),
        int(S.IN_PROGRESS),
        int(S.ERR_INVALID_ARGS),
        int(S.ERR_NOT_FOUND),
        int(S.ERR_RDMA_OP),
        int(S.ERR_BAD_STATE),
        int(S.ERR_GPU_OP),
    ] == [0, 1, 2, 11, 12, 13, 14, 15]
    assert [int(io.PollCqMode.POLLING), int(io.PollCqMode.EVENT)] == [0, 1]


def test_config_signatures_and_defaults():
    c = io.IOEngineConfig()
    assert (c.host, c.port) == ("", 0)
    c = io.IOEngineConfig("10.0.0.1", 1234)
    assert (c.host, c.port) == ("10.0.0.1", 1234)
    r = io.RdmaBackendConfig()
    assert (
        r.qp_per_transfer,
        r.post_batch_size,
        r.num_worker_threads,
        r.poll_cq_mode,
        r.enable_notification,
        r.notif_per_qp,
        r.enable_transfer_chunking,
        r.chunk_bytes,
        r.max_chunks_per_transfer,
        r.num_nics_per_transfer,
    ) == (1, -1, -1, io.PollCqMode.POLLING, True, 1024, False, 65536, 64, 1)
    r = io.RdmaBackendConfig(4, 8, 2, io.PollCqMode.EVENT, False, 16, True, 8192, 3, 2)  # all ten positionally
    assert (
        r.qp_per_transfer,
        r.post_batch_size,
        r.num_worker_threads,
        r.poll_cq_mode,
        r.enable_notification,
        r.notif_per_qp,
        r.enable_transfer_chunking,
        r.chunk_bytes,
        r.max_chunks_per_transfer,
        r.num_nics_per_transfer,
    ) == (4, 8, 2, io.PollCqMode.EVENT, False, 16, True, 8192, 3, 2)
    assert (r.max_send_wr, r.max_cqe_num, r.max_msg_sge) == (0, 0, 0)
    x = io.XgmiBackendConfig()
    assert (x.num_streams, x.num_events) == (64, 64)
    e = io.IOEngine("sig", io.IOEngineConfig("127.0.0.1", 0))
    with pytest.raises(ValueError, match="chunk_bytes"):
        e.create_backend(
            io.BackendType.RDMA, io.RdmaBackendConfig(1, -1, 1, io.PollCqMode.POLLING, True, 1024, True, 100)
        )
    with pytest.raises(ValueError, match="mem_loc"):
        e.register_memory(1, 1, -1, io.MemoryLocationType.Unknown)
    io.set_log_level("info")
    io.set_log_level("warning")
    with pytest.raises(ValueError, match="level"):
        io.set_log_level("loud")


def test_deregister_while_in_flight_waits_for_the_transfer():
    """deregister_memory of a region a transfer still uses returns only after it finished:
    the transfer completes correctly and later ones fail instead of touching the memory."""
    a = io.IOEngine("life-a", io.IOEngineConfig("127.0.0.1", 0))
    b = io.IOEngine("life-b", io.IOEngineConfig("127.0.0.1", 0))
    for e in (a, b):
        e.create_backend(io.BackendType.TCP, io.TcpBackendConfig(2, False))
    a.register_remote_engine(b.get_engine_desc())
    n = 64 << 20
    src = np.random.default_rng(1).integers(0, 256, n, dtype=np.uint8)
    dst = np.zeros(n, dtype=np.uint8)
    ls = a.register_memory(src.ctypes.data, n, -1, io.MemoryLocationType.CPU)
    rd = b.register_memory(dst.ctypes.data, n, -1, io.MemoryLocationType.CPU)
    orig = src.copy()
    st = a.write(ls, 0, rd, 0, n, 1)
    a.deregister_memory(ls)  # blocks until the write no longer reads src
    src[:] = 0  # the caller may reuse its memory now: the transfer must not see this
    assert st.WaitFor(60000) == io.StatusCode.SUCCESS, st.Message()
    assert np.array_equal(orig, dst)
    late = a.write(ls, 0, rd, 0, 8, 2)
    assert late.Code() == io.StatusCode.ERR_INVALID_ARGS
