# SPDX-License-Identifier: MIT
"""The call sequences of vLLM's MoRIIOConnector and SGLang's mori disaggregation backend
(reference/mori-io.md §3), with their exact arguments, in two processes playing prefill
and decode, on KV caches shaped like a real model's; data checked on both sides."""

from __future__ import annotations

import hashlib
import os
import time
import uuid

import numpy as np
import pytest

import ucx_variants
from peer import RemotePeer, unb64

torch = pytest.importorskip("torch")
from mori.core.ports import free_port
from mori.io import (
    BackendType,
    EngineDesc,
    IOEngine,
    IOEngineConfig,
    MemoryDesc,
    MemoryLocationType,
    PollCqMode,
    RdmaBackendConfig,
    StatusCode,
)

pytestmark = pytest.mark.timeout(300)
LAYERS = 61
BLOCKS, BLOCK_TOKENS, HEADS, HEAD_DIM = 8, 64, 8, 128
KV_SHAPE = [2, BLOCKS, BLOCK_TOKENS, HEADS, HEAD_DIM]  # [K|V, blocks, tokens, heads, dim], bf16
BLOCK_LEN = BLOCK_TOKENS * HEADS * HEAD_DIM * 2


def kv_caches(seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*KV_SHAPE, generator=g).to(torch.bfloat16) for _ in range(LAYERS)]


def block_offsets(local_blocks: list, remote_blocks: list):
    """vLLM: byte offsets of each (local, remote) block pair, K and V halves separately,
    contiguous runs merged on the host."""
    lo, ro, sz = [], [], []
    half = BLOCKS * BLOCK_LEN
    for kv in range(2):
        for lb, rb in zip(local_blocks, remote_blocks):
            l, r = kv * half + lb * BLOCK_LEN, kv * half + rb * BLOCK_LEN
            if sz and lo[-1] + sz[-1] == l and ro[-1] + sz[-1] == r:
                sz[-1] += BLOCK_LEN
            else:
                lo.append(l), ro.append(r), sz.append(BLOCK_LEN)
    return lo, ro, sz


def remote_blocks_digest(peer: RemotePeer, index: int, blocks: list) -> str:
    """The peer's blocks, K then V, one digest each (read there, not here)."""
    parts = []
    for kv in range(2):
        for b in blocks:
            off = kv * BLOCKS * BLOCK_LEN + b * BLOCK_LEN
            parts.append(peer.ask("digest", index=index, offset=off, length=BLOCK_LEN)["sha"])
    return "".join(parts)


def per_block_digests(t, blocks: list) -> str:
    raw = t.view(torch.uint8).reshape(2, BLOCKS, BLOCK_LEN)
    return "".join(
        hashlib.sha256(raw[kv, b].contiguous().numpy().tobytes()).hexdigest() for kv in range(2) for b in blocks
    )


@pytest.fixture(params=["direct", "tcp", "ucx-tcp"])
def transport(request, monkeypatch):
    if request.param in ucx_variants.VARIANTS:  # BackendType.RDMA on UCX, in both processes
        if request.function.__name__ == "test_vllm_read_mode":
            pytest.skip("CI time: over UCX the read path is covered by the two-process and engine matrices")
        ucx_variants.use(monkeypatch, request.param)
        return ucx_variants.env(request.param)
    value = "1" if request.param == "direct" else "0"
    monkeypatch.setenv("MORI_IO_DIRECT", value)
    return {"MORI_IO_DIRECT": value}


def vllm_engine(role: str, ip: str) -> IOEngine:
    engine = IOEngine(f"{role}:{ip}:6301:tp0:dp0", IOEngineConfig(ip, free_port()))
    engine.create_backend(BackendType.RDMA, RdmaBackendConfig(1, -1, 1, PollCqMode.POLLING, enable_notification=False))
    return engine


def test_vllm_write_mode(transport):
    """Prefill (this process) pushes: per-layer sessions, one batch_write per layer."""
    ip = "127.0.0.1"
    decode = RemotePeer(env=transport)
    try:
        decode_desc = unb64(
            decode.ask("engine", key=f"consumer:{ip}:6301:tp0:dp0", backend="rdma", notify=False, port=free_port())[
                "engine"
            ]
        )
        kv = decode.ask("kv", layers=LAYERS, shape=KV_SHAPE, seed=2)
        prefill = vllm_engine("producer", ip)
        caches = kv_caches(seed=1)
        local_packed = [prefill.register_torch_tensor(t).pack() for t in caches]
        agent_metadata = prefill.get_engine_desc().pack()  # what vLLM ships to the peer
        assert EngineDesc.unpack(agent_metadata).key == f"producer:{ip}:6301:tp0:dp0"
        assert MemoryDesc.unpack(local_packed[0]).data == caches[0].data_ptr()
        # Handshake: only the initiator registers the peer.
        prefill.register_remote_engine(EngineDesc.unpack(decode_desc))
        sessions = [
            prefill.create_session(MemoryDesc.unpack(l), MemoryDesc.unpack(unb64(r)))
            for l, r in zip(local_packed, kv["mems"])
        ]
        assert all(s is not None for s in sessions)
        local_blocks, remote_blocks = [0, 1, 2, 5], [3, 4, 5, 0]  # 3->4->5 runs merge on both sides
        lo, ro, sz = block_offsets(local_blocks, remote_blocks)
        statuses = [s.batch_write(lo, ro, sz, prefill.allocate_transfer_uid()) for s in sessions]
        deadline = time.monotonic() + 30  # transfer_timeout
        while not all(s.Succeeded() or s.Failed() for s in statuses):
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert all(s.Succeeded() for s in statuses), [s.Message() for s in statuses if s.Failed()]
        assert prefill.wait_all(statuses, 1000) == StatusCode.SUCCESS
        for layer in (0, 30, 60):
            assert remote_blocks_digest(decode, kv["first"] + layer, remote_blocks) == per_block_digests(
                caches[layer], local_blocks
            )
        # A single-write path too.
        one = sessions[7].write(0, BLOCK_LEN * 7, BLOCK_LEN, prefill.allocate_transfer_uid())
        one.Wait()
        assert one.Succeeded()
    finally:
        decode.close()


def test_vllm_read_mode(transport):
    """Decode (this process) pulls: per-layer batch_read; a request is done when its last
    status succeeded, so that must imply all earlier ones did."""
    ip = "127.0.0.1"
    prefill = RemotePeer(env=transport)
    try:
        prefill_desc = unb64(
            prefill.ask("engine", key=f"producer:{ip}:6301:tp0:dp0", backend="rdma", notify=False, port=free_port())[
                "engine"
            ]
        )
        kv = prefill.ask("kv", layers=LAYERS, shape=KV_SHAPE, seed=3)
        decode = vllm_engine("consumer", ip)
        caches = [torch.zeros(*KV_SHAPE, dtype=torch.bfloat16) for _ in range(LAYERS)]
        local_packed = [decode.register_torch_tensor(t).pack() for t in caches]
        decode.register_remote_engine(EngineDesc.unpack(prefill_desc))
        sessions = [
            decode.create_session(MemoryDesc.unpack(l), MemoryDesc.unpack(unb64(r)))
            for l, r in zip(local_packed, kv["mems"])
        ]
        remote_blocks, local_blocks = [6, 7, 1], [0, 1, 4]
        lo, ro, sz = block_offsets(local_blocks, remote_blocks)
        statuses = [s.batch_read(lo, ro, sz, decode.allocate_transfer_uid()) for s in sessions]
        deadline = time.monotonic() + 30
        while not statuses[-1].Succeeded():
            assert not statuses[-1].Failed(), statuses[-1].Message()
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert all(s.Succeeded() for s in statuses)  # completions in submission order
        expect = kv_caches(seed=3)
        for layer in range(LAYERS):
            got = caches[layer].view(torch.uint8).reshape(2, BLOCKS, BLOCK_LEN)
            want = expect[layer].view(torch.uint8).reshape(2, BLOCKS, BLOCK_LEN)
            assert torch.equal(got[:, local_blocks], want[:, remote_blocks])
            assert not got[:, 2].any()  # untouched blocks stay zero
    finally:
        prefill.close()


def test_sglang_sequence(transport):
    """SGLang: engine-level multi-pair batch_write per layer (K and V registered separately
    with register_memory), aux buffer as CPU memory, wait_all loop until not IN_PROGRESS."""
    ip = "127.0.0.1"
    decode = RemotePeer(env=transport)
    try:
        engine = IOEngine(
            f"io-prefill-dp0-tp0-pid{os.getpid()}-{ip}-{uuid.uuid4().hex[:8]}", IOEngineConfig(host=ip, port=0)
        )
        engine.create_backend(BackendType.RDMA, RdmaBackendConfig(4, -1, 4, PollCqMode.POLLING, False))
        assert engine.get_engine_desc().port > 0
        decode_desc = unb64(
            decode.ask(
                "engine", key=f"io-decode-dp0-tp0-pid1-{ip}-{uuid.uuid4().hex[:8]}", backend="rdma", qp=4, notify=False
            )["engine"]
        )
        assert EngineDesc.unpack(decode_desc).port > 0
        engine.register_remote_engine(EngineDesc.unpack(decode_desc))
        layers, page, pages = 8, 4096, 32
        k = [np.random.default_rng(i).integers(0, 256, page * pages, dtype=np.uint8) for i in range(layers)]
        v = [np.random.default_rng(100 + i).integers(0, 256, page * pages, dtype=np.uint8) for i in range(layers)]
        src = [engine.register_memory(t.ctypes.data, t.nbytes, -1, MemoryLocationType.CPU) for t in k + v]
        dst = [decode.ask("alloc", size=page * pages, seed=500 + i) for i in range(2 * layers)]
        aux = np.random.default_rng(9).integers(0, 256, 256, dtype=np.uint8)
        aux_desc = engine.register_memory(aux.ctypes.data, aux.nbytes, -1, MemoryLocationType.CPU)
        aux_dst = decode.ask("alloc", size=256, seed=9999)
        # Destination page indices grouped into contiguous runs (x item length).
        src_pages, dst_pages = [0, 1, 2, 9, 10, 20], [4, 5, 6, 11, 12, 30]
        runs_l, runs_r, runs_s = [], [], []
        for s, d in zip(src_pages, dst_pages):
            if runs_s and runs_l[-1] + runs_s[-1] == s * page and runs_r[-1] + runs_s[-1] == d * page:
                runs_s[-1] += page
            else:
                runs_l.append(s * page), runs_r.append(d * page), runs_s.append(page)
        statuses = []
        for i in range(2 * layers):
            uid = engine.allocate_transfer_uid()
            statuses += engine.batch_write(
                [src[i]], [runs_l], [MemoryDesc.unpack(unb64(dst[i]["mem"]))], [runs_r], [runs_s], [uid]
            )
        statuses += engine.batch_write(
            [aux_desc],
            [[0]],
            [MemoryDesc.unpack(unb64(aux_dst["mem"]))],
            [[0]],
            [[256]],
            [engine.allocate_transfer_uid()],
        )
        while True:
            code = engine.wait_all(statuses, timeout_ms=1000)
            if code != StatusCode.IN_PROGRESS:
                break
        assert code == StatusCode.SUCCESS, next((s.Message() for s in statuses if s.Failed()), "")
        for i, t in enumerate(k + v):
            for s, d in zip(src_pages, dst_pages):
                want = hashlib.sha256(t[s * page : (s + 1) * page].tobytes()).hexdigest()
                assert decode.ask("digest", index=dst[i]["index"], offset=d * page, length=page)["sha"] == want
        assert decode.ask("digest", index=aux_dst["index"])["sha"] == hashlib.sha256(aux.tobytes()).hexdigest()
    finally:
        decode.close()
