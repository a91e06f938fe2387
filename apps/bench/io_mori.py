# SPDX-License-Identifier: MIT
"""MORI-IO behind the driver interface of ``mori bench io``, through MORI's documented Python
API only (mori.io): one IOEngine per process, the buffer registered as CPU memory, descriptors
packed and unpacked, one session per pair, ``read/write/batch_read/batch_write`` on the session
(api "session") or on the engine with one memory pair (api "engine"), each status waited for."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from mori.apps.bench.io_driver import Driver, Transfer, address


def unavailable() -> Optional[str]:
    """Why MORI-IO cannot be measured in this build (None when it can)."""
    try:
        import mori.io as mio
    except ImportError as exc:
        return f"mori.io cannot be imported ({exc})"
    if not hasattr(mio, "IOEngine"):
        return "mori.io has no IOEngine in this build"
    return None


def _wait(status, what: str) -> None:
    status.Wait()
    if not status.Succeeded():
        raise RuntimeError(f"MORI-IO {what} failed: {status.Code()} {status.Message()}")


class MoriDriver(Driver):
    name = "mori"
    apis = ("session", "engine")

    def __init__(self, backend: str = "tcp") -> None:
        self.backend_type = backend

    def _open(self, buf: np.ndarray, host: str, role: str) -> None:
        from mori.io import BackendType, IOEngine, IOEngineConfig, MemoryLocationType

        self.engine = IOEngine(f"mori-bench-io-{role}", IOEngineConfig(host, 0))
        if self.backend_type == "rdma":
            from mori.io import PollCqMode, RdmaBackendConfig

            # vLLM's and SGLang's settings: notifications off, they signal completion themselves
            self.engine.create_backend(BackendType.RDMA, RdmaBackendConfig(1, -1, -1, PollCqMode.POLLING, False))
        else:
            self.engine.create_backend(BackendType.TCP)
        self.mem = self.engine.register_memory(address(buf), buf.nbytes, -1, MemoryLocationType.CPU)

    def _describe(self) -> dict:
        return {"engine": self.engine.get_engine_desc().pack().hex(), "mem": self.mem.pack().hex()}

    def target_open(self, buf: np.ndarray, host: str) -> dict:
        self._open(buf, host, "target")
        return self._describe()

    def target_accept(self, peer: dict) -> None:
        from mori.io import EngineDesc

        self.engine.register_remote_engine(EngineDesc.unpack(bytes.fromhex(peer["engine"])))

    def initiator_open(self, buf: np.ndarray, host: str, peer: dict) -> dict:
        from mori.io import EngineDesc, MemoryDesc

        self._open(buf, host, "initiator")
        self.engine.register_remote_engine(EngineDesc.unpack(bytes.fromhex(peer["engine"])))
        self.remote = MemoryDesc.unpack(bytes.fromhex(peer["mem"]))
        self.session = self.engine.create_session(self.mem, self.remote)
        if self.session is None:
            raise RuntimeError("MORI-IO create_session returned None: no backend can reach the target's memory")
        return self._describe()

    def backend(self) -> Optional[str]:
        query = getattr(self.engine, "backend_for", None)
        return str(query(self.mem, self.remote)) if query is not None else None

    def prepare(self, op: str, api: str, offsets: Sequence[int], size: int) -> Transfer:
        engine, sess, mem, remote = self.engine, self.session, self.mem, self.remote
        uid = engine.allocate_transfer_uid
        offs = [int(o) for o in offsets]
        sizes = [size] * len(offs)
        if api == "session" and len(offs) == 1:
            call, o = getattr(sess, op), offs[0]
            return lambda: _wait(call(o, o, size, uid()), f"session.{op}")
        if api == "session":
            call = getattr(sess, f"batch_{op}")
            return lambda: _wait(call(offs, offs, sizes, uid()), f"session.batch_{op}")
        if len(offs) == 1:
            call, o = getattr(engine, op), offs[0]
            return lambda: _wait(call(mem, o, remote, o, size, uid()), f"engine.{op}")
        call = getattr(engine, f"batch_{op}")

        def engine_batch() -> None:
            for st in call([mem], [offs], [remote], [offs], [sizes], [uid()]):
                _wait(st, f"engine.batch_{op}")

        return engine_batch

    def close(self) -> None:
        self.engine.deregister_memory(self.mem)
