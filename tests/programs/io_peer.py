# SPDX-License-Identifier: MIT
"""A MORI-IO engine in its own process, driven by JSON lines on stdin (tests/io/peer.py).

Every command gets one JSON line back on stdout. Memory is numpy (CPU) or torch (CPU or
CUDA) buffers filled with random bytes from a seed the test knows, so the test can check
the bytes on this side by digest.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys

import numpy as np

from mori.io import (
    BackendType,
    EngineDesc,
    IOEngine,
    IOEngineConfig,
    MemoryDesc,
    MemoryLocationType,
    RdmaBackendConfig,
    TcpBackendConfig,
    XgmiBackendConfig,
)


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def unb64(s: str) -> bytes:
    return base64.b64decode(s)


class Peer:
    def __init__(self) -> None:
        self.engine: IOEngine | None = None
        self.bufs: list = []  # numpy arrays or torch tensors
        self.descs: list = []
        self.statuses: list = []

    def view(self, i: int) -> np.ndarray:
        t = self.bufs[i]
        if isinstance(t, np.ndarray):
            return t
        return t.view(-1).view(__import__("torch").uint8).cpu().numpy()

    def cmd_engine(
        self,
        key: str,
        host: str = "127.0.0.1",
        port: int = 0,
        backend: str = "tcp",
        lanes: int = 0,
        qp: int = 1,
        notify: bool = True,
    ) -> dict:
        self.engine = IOEngine(key, IOEngineConfig(host, port))
        if backend == "tcp":
            self.engine.create_backend(BackendType.TCP, TcpBackendConfig(lanes))
        elif backend == "rdma":
            from mori.io import PollCqMode

            self.engine.create_backend(BackendType.RDMA, RdmaBackendConfig(qp, -1, 1, PollCqMode.POLLING, notify))
        elif backend == "xgmi":
            self.engine.create_backend(BackendType.XGMI, XgmiBackendConfig())
        return {"engine": b64(self.engine.get_engine_desc().pack())}

    def cmd_alloc(self, size: int, seed: int, device: str = "numpy", sub_offset: int = 0) -> dict:
        """`size` random bytes; with sub_offset, a view that far into a larger allocation
        (a sub-region registration, MORI issue #415)."""
        data = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)
        if device == "numpy":
            buf = data
            desc = self.engine.register_memory(buf.ctypes.data, buf.nbytes, -1, MemoryLocationType.CPU)
        else:
            import torch

            whole = torch.zeros(size + sub_offset, dtype=torch.uint8, device=device)
            buf = whole[sub_offset:]
            buf.copy_(torch.from_numpy(data))
            self.keep = getattr(self, "keep", []) + [whole]
            desc = self.engine.register_torch_tensor(buf)
        self.bufs.append(buf)
        self.descs.append(desc)
        return {"index": len(self.descs) - 1, "mem": b64(desc.pack())}

    def cmd_kv(self, layers: int, shape: list, dtype: str = "bfloat16", device: str = "cpu", seed: int = 0) -> dict:
        """vLLM-style KV caches: one tensor per layer, registered whole."""
        import torch

        g = torch.Generator().manual_seed(seed)
        out = []
        for _ in range(layers):
            t = torch.randn(*shape, generator=g).to(getattr(torch, dtype)).to(device)
            self.bufs.append(t)
            d = self.engine.register_torch_tensor(t)
            self.descs.append(d)
            out.append(b64(d.pack()))
        return {"first": len(self.descs) - layers, "mems": out}

    def cmd_peer(self, engine: str) -> dict:
        self.engine.register_remote_engine(EngineDesc.unpack(unb64(engine)))
        return {}

    def cmd_digest(self, index: int, offset: int = 0, length: int = -1) -> dict:
        v = self.view(index)
        end = len(v) if length < 0 else offset + length
        return {"sha": hashlib.sha256(v[offset:end].tobytes()).hexdigest()}

    def cmd_pop(self, key: str, uid: int) -> dict:
        return {"found": self.engine.pop_inbound_transfer_status(key, uid) is not None}

    def cmd_deregister(self, index: int) -> dict:
        self.engine.deregister_memory(self.descs[index])
        return {}

    def cmd_transfer(
        self, op: str, local: int, remote: str, loffs: list, roffs: list, sizes: list, session: bool = False
    ) -> dict:
        """This process as initiator: one (batched) transfer, waited for."""
        rdesc = MemoryDesc.unpack(unb64(remote))
        uid = self.engine.allocate_transfer_uid()
        if session:
            s = self.engine.create_session(self.descs[local], rdesc)
            st = (s.batch_read if op == "read" else s.batch_write)(loffs, roffs, sizes, uid)
        else:
            st = (self.engine.batch_read if op == "read" else self.engine.batch_write)(
                [self.descs[local]], [loffs], [rdesc], [roffs], [sizes], [uid]
            )[0]
        st.Wait()
        return {"code": int(st.Code()), "message": st.Message(), "uid": uid}

    def cmd_post(self, op: str, local: int, remote: str, size: int) -> dict:
        """Posts one transfer without waiting (fault tests wait with `wait`)."""
        rdesc = MemoryDesc.unpack(unb64(remote))
        fn = self.engine.read if op == "read" else self.engine.write
        self.statuses.append(fn(self.descs[local], 0, rdesc, 0, size, self.engine.allocate_transfer_uid()))
        return {"index": len(self.statuses) - 1}

    def cmd_wait(self, index: int, timeout_ms: int) -> dict:
        st = self.statuses[index]
        code = st.WaitFor(timeout_ms)
        return {"code": int(code), "message": st.Message()}


def main() -> None:
    peer = Peer()
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        name = req.pop("cmd")
        if name == "quit":
            print(json.dumps({}), flush=True)
            break
        try:
            out = getattr(peer, "cmd_" + name)(**req)
        except Exception as exc:  # reported to the test, which decides
            out = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(out), flush=True)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
