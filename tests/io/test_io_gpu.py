# SPDX-License-Identifier: MIT
"""MORI-IO with GPU memory (skipped without CUDA): the CUDA IPC backend (BackendType.XGMI)
between engines in one process and in two processes on one GPU, sub-region registrations,
GPU memory over the tcp backend (staged through host memory), and the vLLM sequence on
CUDA KV caches."""

from __future__ import annotations

import hashlib
import time

import numpy as np
import pytest

from peer import RemotePeer, b64, unb64

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from mori.io import (
    BackendType,
    EngineDesc,
    IOEngine,
    IOEngineConfig,
    MemoryDesc,
    StatusCode,
    TcpBackendConfig,
    XgmiBackendConfig,
)

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]
_seq = iter(range(1 << 30))


def rng_bytes(size: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def gpu_bytes(size: int, seed: int, offset: int = 0):
    whole = torch.zeros(size + offset, dtype=torch.uint8, device="cuda:0")
    view = whole[offset:]
    view.copy_(torch.from_numpy(rng_bytes(size, seed)))
    return whole, view


def sha(a) -> str:
    return hashlib.sha256(a.tobytes() if isinstance(a, np.ndarray) else a.cpu().numpy().tobytes()).hexdigest()


@pytest.mark.parametrize("op", ["read", "write"])
@pytest.mark.parametrize("api", ["engine", "session"])
def test_cuda_ipc_same_process(op, api):
    a = IOEngine(f"ga-{next(_seq)}", IOEngineConfig("127.0.0.1", 0))
    b = IOEngine(f"gb-{next(_seq)}", IOEngineConfig("127.0.0.1", 0))
    for e in (a, b):
        e.create_backend(BackendType.XGMI, XgmiBackendConfig())
    a.register_remote_engine(b.get_engine_desc())
    for size, batch in [(256, 16), (4 << 20, 1)]:
        _, src = gpu_bytes(size * batch, 1)
        _, dst = gpu_bytes(size * batch, 2)
        before_src, before_dst = src.clone(), dst.clone()
        ls, rs = a.register_torch_tensor(src), MemoryDesc.unpack(b.register_torch_tensor(dst).pack())
        assert a.backend_for(ls, rs) == "cuda_ipc"
        perm = np.random.default_rng(size).permutation(batch)
        lo = [int(p) * size for p in perm]
        ro = [i * size for i in range(batch)]
        uid = a.allocate_transfer_uid()
        if api == "session":
            s = a.create_session(ls, rs)
            st = (s.batch_read if op == "read" else s.batch_write)(lo, ro, [size] * batch, uid)
        else:
            st = (a.batch_read if op == "read" else a.batch_write)([ls], [lo], [rs], [ro], [[size] * batch], [uid])[0]
        assert st.WaitFor(30000) == StatusCode.SUCCESS, st.Message()
        for l, r in zip(lo, ro):
            if op == "write":
                assert torch.equal(dst[r : r + size], before_src[l : l + size])
            else:
                assert torch.equal(src[l : l + size], before_dst[r : r + size])


def test_status_completes_without_wait():
    a = IOEngine(f"gw-{next(_seq)}", IOEngineConfig("127.0.0.1", 0))
    a.create_backend(BackendType.XGMI)
    _, src = gpu_bytes(1 << 20, 3)
    _, dst = gpu_bytes(1 << 20, 4)
    st = a.write(a.register_torch_tensor(src), 0, a.register_torch_tensor(dst), 0, 1 << 20, 1)
    import time

    deadline = time.monotonic() + 5
    while st.InProgress():
        assert time.monotonic() < deadline
    assert st.Succeeded() and torch.equal(src, dst)


def test_cuda_ipc_small_copies_every_way_of_waiting():
    """Small CUDA IPC copies complete on the thread that waits for them (it synchronizes the
    copy's event itself) and on the copier's thread when nobody waits: Wait, WaitFor, polling,
    wait_all and a dropped status, and two threads waiting at once; fresh random bytes, each
    range checked exactly."""
    import threading

    a = IOEngine(f"gs-{next(_seq)}", IOEngineConfig("127.0.0.1", 0))
    b = IOEngine(f"gt-{next(_seq)}", IOEngineConfig("127.0.0.1", 0))
    for e in (a, b):
        e.create_backend(BackendType.XGMI, XgmiBackendConfig())
    a.register_remote_engine(b.get_engine_desc())
    size, n = 64 << 10, 80
    _, src = gpu_bytes(size * n, 11)
    _, dst = gpu_bytes(size * n, 12)
    expect = src.clone()
    sess = a.create_session(a.register_torch_tensor(src), MemoryDesc.unpack(b.register_torch_tensor(dst).pack()))
    later = []
    for i in range(n // 2):
        st = sess.write(i * size, i * size, size, a.allocate_transfer_uid())
        way = i % 5
        if way == 0:
            st.Wait()
        elif way == 1:
            assert st.WaitFor(30000) == StatusCode.SUCCESS, st.Message()
        elif way == 2:
            deadline = time.monotonic() + 30
            while st.InProgress():
                assert time.monotonic() < deadline
        elif way == 3:
            later.append(st)
        # way 4: dropped unwaited; the next status of this pair completes after it
        assert way in (3, 4) or st.Succeeded(), st.Message()
    assert a.wait_all(later, 30000) == StatusCode.SUCCESS
    errors = []

    def waiter(first: int) -> None:
        for i in range(first, n, 2):
            st = sess.write(i * size, i * size, size, a.allocate_transfer_uid())
            if st.WaitFor(30000) != StatusCode.SUCCESS:
                errors.append(st.Message())

    threads = [threading.Thread(target=waiter, args=(n // 2 + k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and not any(t.is_alive() for t in threads)
    torch.cuda.synchronize()
    for i in range(n):
        assert torch.equal(dst[i * size : (i + 1) * size], expect[i * size : (i + 1) * size]), f"range {i}"


@pytest.fixture(params=["cuda_ipc", "tcp"])
def gpu_two(request):
    """Two processes on one GPU: XGMI engines (CUDA IPC) or tcp engines (GPU memory staged)."""
    backend = "xgmi" if request.param == "cuda_ipc" else "tcp"
    peer = RemotePeer(env={"MORI_IO_DIRECT": "0"})
    n = next(_seq)
    remote = EngineDesc.unpack(unb64(peer.ask("engine", key=f"gt-{n}", backend=backend)["engine"]))
    me = IOEngine(f"gi-{n}", IOEngineConfig("127.0.0.1", 0))
    if backend == "xgmi":
        me.create_backend(BackendType.XGMI, XgmiBackendConfig())
    else:
        me.create_backend(BackendType.TCP, TcpBackendConfig(2, False))
    me.register_remote_engine(remote)
    peer.ask("peer", engine=b64(me.get_engine_desc().pack()))
    yield request.param, me, peer
    peer.close()


@pytest.mark.parametrize("op", ["read", "write"])
def test_two_processes_one_gpu(gpu_two, op):
    backend, me, peer = gpu_two
    for size, batch, sub in [(8, 1, 0), (4096, 64, 0), (8 << 20, 1, 64 << 20)]:
        total = size * batch
        _, local = gpu_bytes(total, 10 + size)
        r = peer.ask("alloc", size=total, seed=20 + size, device="cuda:0", sub_offset=sub)
        remote = MemoryDesc.unpack(unb64(r["mem"]))
        ld = me.register_torch_tensor(local)
        assert me.backend_for(ld, remote) == backend
        if sub and backend == "cuda_ipc":
            assert remote.ipc_handle != bytes(64)
        before_local = local.clone()
        perm = np.random.default_rng(size).permutation(batch)
        lo = [int(p) * size for p in perm]
        ro = [i * size for i in range(batch)]
        s = me.create_session(ld, remote)
        st_uid = me.allocate_transfer_uid()
        st = (s.batch_read if op == "read" else s.batch_write)(lo, ro, [size] * batch, st_uid)
        assert st.WaitFor(60000) == StatusCode.SUCCESS, st.Message()
        deadline = time.monotonic() + 10  # the notification follows the data, on every backend
        while not peer.ask("pop", key=me.get_engine_desc().key, uid=st_uid)["found"]:
            assert time.monotonic() < deadline, "no inbound notification"
            time.sleep(0.01)
        remote_before = rng_bytes(total, 20 + size)
        if op == "write":
            expect = torch.cat([before_local[l : l + size] for l in lo])
            assert peer.ask("digest", index=r["index"])["sha"] == sha(expect)
        else:
            for l, o in zip(lo, ro):
                assert np.array_equal(local[l : l + size].cpu().numpy(), remote_before[o : o + size])


def test_vllm_write_mode_cuda_kv():
    """vLLM's WRITE mode with `backend: xgmi` on CUDA KV caches, prefill and decode in two
    processes sharing the GPU."""
    shape = [2, 8, 64, 8, 128]
    layers = 8
    decode = RemotePeer()
    try:
        ddesc = unb64(decode.ask("engine", key="consumer:127.0.0.1:6301:tp0:dp0", backend="xgmi")["engine"])
        kv = decode.ask("kv", layers=layers, shape=shape, device="cuda:0", seed=2)
        prefill = IOEngine("producer:127.0.0.1:6301:tp0:dp0", IOEngineConfig("127.0.0.1", 0))
        prefill.create_backend(BackendType.XGMI, XgmiBackendConfig())
        g = torch.Generator().manual_seed(1)
        caches = [torch.randn(*shape, generator=g).to(torch.bfloat16).cuda() for _ in range(layers)]
        packed = [prefill.register_torch_tensor(t).pack() for t in caches]
        prefill.register_remote_engine(EngineDesc.unpack(ddesc))
        sessions = [
            prefill.create_session(MemoryDesc.unpack(l), MemoryDesc.unpack(unb64(r)))
            for l, r in zip(packed, kv["mems"])
        ]
        block = 64 * 8 * 128 * 2
        half = 8 * block
        lo = [0, half]
        ro = [3 * block, half + 3 * block]
        sz = [2 * block, 2 * block]  # blocks 0-1 -> 3-4, K and V
        torch.cuda.synchronize()
        sts = [s.batch_write(lo, ro, sz, prefill.allocate_transfer_uid()) for s in sessions]
        assert prefill.wait_all(sts, 30000) == StatusCode.SUCCESS
        for layer in (0, layers - 1):
            raw = caches[layer].view(torch.uint8).reshape(-1)
            for l, r, n in zip(lo, ro, sz):
                got = decode.ask("digest", index=kv["first"] + layer, offset=r, length=n)["sha"]
                assert got == sha(raw[l : l + n])
    finally:
        decode.close()
