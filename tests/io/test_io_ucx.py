# SPDX-License-Identifier: MIT
"""MORI-IO's RDMA backend on UCX: what the descriptors carry, how BackendType.RDMA picks
UCX or tcp (MORI_IO_RDMA_TRANSPORT, UCX absent), lifetime across a deregistration, and
the lane parser behind backend_for. The data-path matrix, faults and serving sequences
run over UCX in test_io_engine.py, test_io_two_process.py, test_io_faults.py and
test_io_serving.py (their ucx-* parameters)."""

from __future__ import annotations

import json
import subprocess
import sys

import msgpack
import numpy as np
import pytest

import ucx_variants
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
CPU = MemoryLocationType.CPU
_seq = iter(range(1 << 30))


def engine(backend: BackendType = BackendType.RDMA) -> IOEngine:
    e = IOEngine(f"ucx-{next(_seq)}", IOEngineConfig("127.0.0.1", 0))
    e.create_backend(backend, TcpBackendConfig(2, False) if backend == BackendType.TCP else None)
    return e


def region(e: IOEngine, size: int, seed: int):
    buf = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)
    return buf, e.register_memory(buf.ctypes.data, buf.nbytes, -1, CPU)


def connect(a: IOEngine, b: IOEngine) -> None:
    a.register_remote_engine(EngineDesc.unpack(b.get_engine_desc().pack()))
    b.register_remote_engine(EngineDesc.unpack(a.get_engine_desc().pack()))


def test_descriptors_carry_worker_address_and_rkey(monkeypatch):
    """The EngineDesc carries the UCX worker address, the MemoryDesc the packed rkey
    (appended after MORI's fields and ours; a tcp engine's descriptors are unchanged)."""
    ucx_variants.use(monkeypatch, "ucx-tcp")
    e = engine()
    d = e.get_engine_desc()
    assert len(d.ucx_address) > 16
    fields = msgpack.unpackb(d.pack(), raw=False)
    assert (
        len(fields) == 8
        and fields[7] == d.ucx_address
        and fields[:6] == [d.key, d.node_id, d.hostname, d.host, d.port, d.pid]
    )
    again = EngineDesc.unpack(d.pack())
    assert again == d and again.ucx_address == d.ucx_address
    _, m = region(e, 4096, 1)
    mf = msgpack.unpackb(m.pack(), raw=False)
    assert len(mf) == 17 and mf[16] == m.ucx_rkey and len(m.ucx_rkey) > 0
    assert MemoryDesc.unpack(m.pack()).ucx_rkey == m.ucx_rkey
    monkeypatch.setenv("MORI_IO_RDMA_TRANSPORT", "tcp")
    t = engine()
    assert t.get_engine_desc().ucx_address == b"" and len(msgpack.unpackb(t.get_engine_desc().pack())) == 7
    _, tm = region(t, 64, 2)
    assert tm.ucx_rkey == b"" and len(msgpack.unpackb(tm.pack())) == 16


def test_ucx_engine_talks_tcp_to_a_tcp_engine(monkeypatch):
    """A region without an rkey (its engine runs the tcp backend) goes over tcp, both ways."""
    ucx_variants.use(monkeypatch, "ucx-tcp")
    u = engine()
    monkeypatch.setenv("MORI_IO_RDMA_TRANSPORT", "tcp")
    t = engine()
    connect(u, t)
    src_buf, src = region(u, 1 << 16, 3)
    dst_buf, dst = region(t, 1 << 16, 4)
    assert u.backend_for(src, dst) == "tcp"
    assert u.write(src, 0, dst, 0, 1 << 16, 1).WaitFor(30000) == StatusCode.SUCCESS
    assert np.array_equal(dst_buf, src_buf)
    back_buf, back = region(t, 1 << 16, 5)
    assert t.backend_for(back, src) == "tcp"
    assert t.write(back, 0, src, 0, 1 << 16, 2).WaitFor(30000) == StatusCode.SUCCESS
    assert np.array_equal(src_buf, back_buf)


def test_deregistration_waits_for_inflight_ucx_operations(monkeypatch):
    """The target deregisters a region while a large UCX write into it is in flight: the
    initiator finishes its operations on it before the target unmaps, and later ones fail."""
    ucx_variants.use(monkeypatch, "ucx-tcp")
    a, b = engine(), engine()
    connect(a, b)
    size = 32 << 20
    src_buf, src = region(a, size, 6)
    dst_buf, dst = region(b, size, 7)
    sess = a.create_session(src, MemoryDesc.unpack(dst.pack()))
    assert sess.write(0, 0, 4096, 1).WaitFor(30000) == StatusCode.SUCCESS
    st = sess.write(0, 0, size, 2)
    b.deregister_memory(dst)
    assert st.Code() != StatusCode.IN_PROGRESS  # done before the deregistration returned
    assert st.Succeeded(), st.Message()
    assert np.array_equal(dst_buf, src_buf)
    assert not sess.alive()
    late = sess.write(0, 0, 8, 3)
    late.WaitFor(30000)
    assert late.Failed() and "deregistered" in late.Message()


def test_lane_parser():
    """backend_for names the transports of the endpoint's lanes (ucp_ep_print_info text)."""
    from mori._C import io as _io

    text = """#
# UCP endpoint
#
#               peer: <no debug data>
#                 lane[0]:  1:tcp/lo.0 md[0]                -> md[0]/tcp/sysdev[255] am am_bw#0 keepalive wireup
#                 lane[1]:  3:rc_mlx5/mlx5_0:1.0 md[1]      -> md[1]/ib/sysdev[255] rma_bw#0
#                 lane[2]:  4:tcp/lo.1 md[0]                -> md[0]/tcp/sysdev[255] am_bw#1
#
#                 am_send: 0..<egr/short>..8185..<egr/zcopy>..20553..<rndv>..(inf)
"""
    assert _io.ucx_lane_transports(text) == ["tcp/lo", "rc_mlx5/mlx5_0:1"]
    assert _io.ucx_lane_transports("no lanes here") == []


SELECTION = r"""
import json, sys
import numpy as np
from mori.io import BackendType, EngineDesc, IOEngine, IOEngineConfig, MemoryLocationType, StatusCode
out = {}
try:
    a, b = (IOEngine(k, IOEngineConfig("127.0.0.1", 0)) for k in ("sel-a", "sel-b"))
    for e in (a, b):
        e.create_backend(BackendType.RDMA)
    a.register_remote_engine(EngineDesc.unpack(b.get_engine_desc().pack()))
    x = np.arange(4096, dtype=np.uint8)
    y = np.zeros(4096, dtype=np.uint8)
    mx = a.register_memory(x.ctypes.data, 4096, -1, MemoryLocationType.CPU)
    my = b.register_memory(y.ctypes.data, 4096, -1, MemoryLocationType.CPU)
    out["backend"] = a.backend_for(mx, my)
    out["code"] = int(a.write(mx, 0, my, 0, 4096, 1).WaitFor(30000))
    out["same"] = bool((x == y).all())
except Exception as exc:
    out["error"] = str(exc)
print(json.dumps(out))
"""


def select(env: dict) -> dict:
    """BackendType.RDMA in a fresh process (the loader runs once per process)."""
    import os

    full = {**os.environ, "MORI_IO_DIRECT": "0", **env}
    res = subprocess.run([sys.executable, "-c", SELECTION], env=full, capture_output=True, text=True, timeout=90)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_selection():
    """auto: UCX only with an RDMA transport (none here: tcp, as before); tcp: tcp; ucx:
    UCX, or a clear error when UCX cannot be loaded (MORI_UCX_LIBRARY=/nonexistent), in
    which case auto falls back to tcp."""
    gone = {"MORI_UCX_LIBRARY": "/nonexistent/libucp.so"}
    out = select({"MORI_IO_RDMA_TRANSPORT": "auto", **gone})
    assert out == {"backend": "tcp", "code": 0, "same": True}
    out = select({"MORI_IO_RDMA_TRANSPORT": "ucx", **gone})
    # The library named, or (a build without UCX's headers) that reason.
    why = ("/nonexistent/libucp.so", "built without UCX headers")
    assert "MORI_IO_RDMA_TRANSPORT=ucx" in out["error"] and any(w in out["error"] for w in why), out
    out = select({"MORI_IO_RDMA_TRANSPORT": "bogus"})
    assert "MORI_IO_RDMA_TRANSPORT must be auto, tcp or ucx" in out["error"], out
    if ucx_variants.unavailable():
        pytest.skip(ucx_variants.unavailable())
    from mori._C import io as _io

    if not _io.ucx_report()["rdma"]:
        assert select({"MORI_IO_RDMA_TRANSPORT": "auto"})["backend"] == "tcp"
    assert select({"MORI_IO_RDMA_TRANSPORT": "tcp"})["backend"] == "tcp"
    out = select({"MORI_IO_RDMA_TRANSPORT": "ucx", "UCX_TLS": "tcp"})
    assert out["code"] == 0 and out["same"] and ucx_variants.matches("ucx-tcp", out["backend"]), out
