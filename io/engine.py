# SPDX-License-Identifier: MIT
"""MORI-IO's engine and session, with MORI's Python signatures (``mori.io.IOEngine``).

The native engine does the work (C++, GIL released); this wrapper keeps MORI's calling
conventions: positional-only transfer calls, ``register_torch_tensor``, ``create_backend``
with a default configuration, ``create_session`` returning ``None`` when no backend fits.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from mori._C import io as _io

BackendType = _io.BackendType
MemoryLocationType = _io.MemoryLocationType
StatusCode = _io.StatusCode
TransferStatus = _io.TransferStatus
MemoryDesc = _io.MemoryDesc
EngineDesc = _io.EngineDesc

TORCH_DEVICE_TYPE_MAP = {"cpu": MemoryLocationType.CPU, "cuda": MemoryLocationType.GPU}


class IOEngineSession:
    """A pre-resolved (local, remote) memory pair; MORI's ``IOEngineSession``."""

    def __init__(self, native: Any) -> None:
        self._sess = native

    def allocate_transfer_uid(self) -> int:
        """A fresh transfer id (the engine's counter)."""
        return self._sess.allocate_transfer_uid()

    def read(self, *args: int) -> TransferStatus:
        """``read(local_offset, remote_offset, size, uid)``: remote -> local."""
        return self._sess.read(*args)

    def write(self, *args: int) -> TransferStatus:
        """``write(local_offset, remote_offset, size, uid)``: local -> remote."""
        return self._sess.write(*args)

    def batch_read(self, *args: Any) -> TransferStatus:
        """``batch_read(local_offsets, remote_offsets, sizes, uid)``: one status for the list."""
        return self._sess.batch_read(*args)

    def batch_write(self, *args: Any) -> TransferStatus:
        """``batch_write(local_offsets, remote_offsets, sizes, uid)``: one status for the list."""
        return self._sess.batch_write(*args)

    def alive(self) -> bool:
        """False once the local or the remote region was deregistered."""
        return self._sess.alive()


class IOEngine:
    """MORI's transfer engine: ``IOEngine(key, IOEngineConfig(host, port))``.

    ``key`` names the engine among its peers (it must be unique). Backends:
    ``BackendType.TCP`` (ours), ``BackendType.RDMA`` (UCX when it reports an RDMA transport,
    or when ``MORI_IO_RDMA_TRANSPORT=ucx`` forces it; otherwise the tcp backend, with
    same-host CPU memory moved directly; an info log line says which) and
    ``BackendType.XGMI`` (CUDA IPC + copy engines for GPU memory of one node).
    """

    def __init__(self, key: str, config: Any) -> None:
        self._engine = _io.IOEngine(key, config)

    # -- identity and backends ---------------------------------------------------------------
    def get_engine_desc(self) -> EngineDesc:
        """This engine's descriptor (pack() it and hand it to peers)."""
        return self._engine.get_engine_desc()

    def create_backend(self, type: BackendType, config: Any = None) -> None:
        """Creates a backend (idempotent: a second call for a type only logs)."""
        if type == BackendType.RDMA:
            self._engine.create_rdma_backend(config if config is not None else _io.RdmaBackendConfig())
        elif type == BackendType.TCP:
            self._engine.create_tcp_backend(config if config is not None else _io.TcpBackendConfig())
        elif type == BackendType.XGMI:
            self._engine.create_xgmi_backend(config if config is not None else _io.XgmiBackendConfig())
        else:
            raise NotImplementedError(f"create_backend: backend {type} is not available on this platform")

    def remove_backend(self, type: BackendType) -> None:
        """Drops a backend; transfers already posted complete."""
        self._engine.remove_backend(type)

    def register_remote_engine(self, engine_desc: EngineDesc) -> None:
        """Makes a peer known (no traffic until the first transfer or session)."""
        self._engine.register_remote_engine(engine_desc)

    def deregister_remote_engine(self, engine_desc: EngineDesc) -> None:
        """Forgets a peer; its transfers in flight fail."""
        self._engine.deregister_remote_engine(engine_desc)

    # -- memory ------------------------------------------------------------------------------
    def register_memory(self, ptr: int, size: int, device_id: int, mem_loc: MemoryLocationType) -> MemoryDesc:
        """Registers ``size`` bytes at address ``ptr`` (CPU, or GPU ``device_id``)."""
        return self._engine.register_memory(ptr, size, device_id, mem_loc)

    def register_torch_tensor(self, tensor: Any) -> MemoryDesc:
        """Registers a contiguous torch tensor's storage."""
        if not tensor.is_contiguous():
            raise RuntimeError("register_torch_tensor: the tensor must be contiguous")
        loc = TORCH_DEVICE_TYPE_MAP[tensor.device.type]
        device = tensor.device.index if tensor.device.index is not None else -1
        if loc == MemoryLocationType.GPU and device < 0:
            device = 0
        return self._engine.register_memory(tensor.data_ptr(), tensor.numel() * tensor.element_size(), device, loc)

    def deregister_memory(self, mem_desc: MemoryDesc) -> None:
        """Deregisters a region once no transfer uses it; peers' sessions on it turn dead."""
        self._engine.deregister_memory(mem_desc)

    def allocate_transfer_uid(self) -> int:
        """A fresh transfer id."""
        return self._engine.allocate_transfer_uid()

    # -- transfers ---------------------------------------------------------------------------
    def read(self, *args: Any) -> TransferStatus:
        """``read(local_mem, local_offset, remote_mem, remote_offset, size, uid)``."""
        return self._engine.transfer(True, *args)

    def write(self, *args: Any) -> TransferStatus:
        """``write(local_mem, local_offset, remote_mem, remote_offset, size, uid)``."""
        return self._engine.transfer(False, *args)

    def batch_read(self, *args: Any) -> list:
        """``batch_read(local_mems, local_offsets, remote_mems, remote_offsets, sizes, uids)``:
        one list entry per memory pair, one status per pair."""
        return self._engine.batch(True, *args)

    def batch_write(self, *args: Any) -> list:
        """``batch_write(local_mems, local_offsets, remote_mems, remote_offsets, sizes, uids)``."""
        return self._engine.batch(False, *args)

    def create_session(self, local_mem: MemoryDesc, remote_mem: MemoryDesc) -> Optional[IOEngineSession]:
        """A session for the pair, or None when no backend can take it."""
        native = self._engine.create_session(local_mem, remote_mem)
        return IOEngineSession(native) if native is not None else None

    def backend_for(self, local_mem: MemoryDesc, remote_mem: MemoryDesc) -> str:
        """The backend a transfer between the two would use: "tcp", "cma" (same host,
        process_vm_readv/writev), "cuda_ipc", "ucx (tcp/lo, ...)" (UCX, with the
        transports/devices of its endpoint's lanes), or "" (none)."""
        return self._engine.backend_for(local_mem, remote_mem)

    def pop_inbound_transfer_status(
        self, remote_key: str, transfer_uid: Optional[int] = None, *, uid: Optional[int] = None
    ) -> Optional[TransferStatus]:
        """Target side: SUCCESS once transfer ``transfer_uid`` of engine ``remote_key`` arrived
        (erased by the pop); None before. ``transfer_uid`` is MORI's keyword, ``uid`` ours.

        Only notifications whose sender proved its identity count: register the initiator's
        ``EngineDesc`` here (``register_remote_engine``) before it connects."""
        if (transfer_uid is None) == (uid is None):
            raise TypeError("pop_inbound_transfer_status: give the transfer's id once, as transfer_uid (or uid)")
        return self._engine.pop_inbound_transfer_status(remote_key, transfer_uid if uid is None else uid)

    def dropped_notifications(self) -> int:
        """Inbound notifications dropped unpopped (beyond ``MORI_IO_MAX_NOTIFICATIONS``, oldest first)."""
        return self._engine.dropped_notifications()

    def wait_all(self, statuses: Sequence[Optional[TransferStatus]], timeout_ms: int = -1) -> StatusCode:
        """MORI's wait_all: failure wins; ``timeout_ms`` 0 polls, < 0 waits, > 0 bounds the wait."""
        return _io.wait_all(list(statuses), timeout_ms)


def probe_backends() -> list[dict]:
    """Which backend each kind of memory pair gets on this machine (for ``mori info --io``):
    two engines of this process, RDMA backends (XGMI too when a GPU is visible), one small
    transfer per pair to prove it works."""
    import numpy as np

    rows = []
    engines = []
    for name in ("probe-a", "probe-b"):
        e = IOEngine(f"mori-info-{name}-{id(rows)}", _io.IOEngineConfig("127.0.0.1", 0))
        e.create_backend(BackendType.RDMA)
        engines.append(e)
    try:
        import torch

        gpu = torch.cuda.is_available()
    except ImportError:
        torch, gpu = None, False
    if gpu:
        for e in engines:
            e.create_backend(BackendType.XGMI)
    a, b = engines
    a.register_remote_engine(b.get_engine_desc())
    kinds = [("CPU", "CPU")] + ([("GPU", "GPU"), ("CPU", "GPU")] if gpu else [])
    for lk, rk in kinds:

        def alloc(engine, kind):
            if kind == "CPU":
                buf = np.arange(4096, dtype=np.uint8)
                return buf, engine.register_memory(buf.ctypes.data, buf.nbytes, -1, MemoryLocationType.CPU)
            t = torch.arange(4096, dtype=torch.uint8, device="cuda")
            return t, engine.register_torch_tensor(t)

        lb, ld = alloc(a, lk)
        rb, rd = alloc(b, rk)
        backend = a.backend_for(ld, rd)
        st = a.write(ld, 0, rd, 0, 4096, a.allocate_transfer_uid())
        code = st.WaitFor(10000)
        rows.append(
            {
                "pair": f"{lk} -> {rk} (this host)",
                "backend": backend or "none",
                "works": code == StatusCode.SUCCESS,
                "message": st.Message(),
            }
        )
    rows.append(_rdma_row(engines[0]))
    return rows


def _rdma_row(engine: IOEngine) -> dict:
    """What BackendType.RDMA runs on between hosts, and what UCX offers here."""
    report = _io.ucx_report()
    if not report["loaded"]:
        ucx = f"UCX not available ({report['why']})"
    else:
        ucx = (
            f"UCX {report['version']}: {', '.join(report['resources']) or 'no transports'}"
            f" ({'RDMA' if report['rdma'] else 'no RDMA transport'})"
        )
    on_ucx = bool(engine.get_engine_desc().ucx_address)
    return {
        "pair": "CPU -> another host",
        "backend": "ucx" if on_ucx else "tcp",
        "works": None,
        "message": (
            f"BackendType.RDMA runs on UCX; {ucx}"
            if on_ucx
            else f"BackendType.RDMA runs on the tcp backend; {ucx} (MORI_IO_RDMA_TRANSPORT=ucx forces UCX)"
        ),
    }
