# SPDX-License-Identifier: MIT
"""The baselines of ``mori bench io``, each behind the driver interface of io_driver.py:

- ``socket``: one plain TCP connection between the same two endpoints, the ceiling for a
  TCP engine. A write sends the batch with one ``sendmsg`` (scatter-gather straight from the
  buffer) and the target, which receives with ``recvmsg_into`` straight into its buffer,
  acknowledges with one byte; a read sends one request byte and receives the batch. Python
  adds ~2 syscalls of overhead per transfer; a copy per byte would be the kernel's either way.
- ``socket-serial``: the same connection sending a batch one message at a time (a request
  and its acknowledgement or reply per message), what a program without a batch API does:
  the baseline a batch of small messages has to beat.
- ``memcpy``: numpy copies between two buffers of one process, the same-host ceiling.
- ``mooncake``: Mooncake Transfer Engine (PyPI mooncake-transfer-engine-non-cuda) over its tcp
  transport, no metadata server (P2PHANDSHAKE), ``transfer_sync_*`` / ``batch_transfer_sync_*``.
- ``nixl``: NIXL's UCX backend on DRAM (PyPI nixl or nixl-cu12); the UCX transports come from
  the process environment (UCX_TLS, UCX_NET_DEVICES), set by the benchmark per run.

A missing package is reported by ``unavailable`` and the benchmark skips that baseline.
"""

from __future__ import annotations

import importlib
import importlib.util
import socket
import struct
import sys
import threading
from typing import Optional, Sequence

import numpy as np

from mori.apps.bench.io_driver import Driver, Transfer, address
from mori.apps.bench.wire import recv_exact

_IOV_MAX = 1024


def _advance(views: list, n: int) -> list:
    """Drop the first ``n`` bytes from a list of memoryviews (after a partial sendmsg/recvmsg)."""
    i = 0
    while i < len(views) and n >= len(views[i]):
        n -= len(views[i])
        i += 1
    views = views[i:]
    if n:
        views[0] = views[0][n:]
    return views


def _sendv(sock: socket.socket, views: list) -> None:
    if len(views) == 1:
        sock.sendall(views[0])
        return
    while views:
        views = _advance(views, sock.sendmsg(views[:_IOV_MAX]))


def _recvv(sock: socket.socket, views: list) -> None:
    while views:
        n = sock.recvmsg_into(views[:_IOV_MAX])[0] if len(views) > 1 else sock.recv_into(views[0])
        if n == 0:
            raise ConnectionError("socket baseline: peer closed the connection")
        views = _advance(views, n)


_ROW = struct.Struct("<QQ")  # messages in the batch, message size; then the offsets as uint64
_ONE = struct.Struct("<I")  # which message of the batch (socket-serial)


class SocketDriver(Driver):
    name = "socket"

    def __init__(self) -> None:
        self.sock: Optional[socket.socket] = None
        self.listener: Optional[socket.socket] = None
        self.thread: Optional[threading.Thread] = None
        self.error: Optional[BaseException] = None

    def target_open(self, buf: np.ndarray, host: str) -> dict:
        self.buf = memoryview(buf).cast("B")
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind((host, 0))
        self.listener.listen(1)
        self.thread = threading.Thread(target=self._serve, name="socket-baseline", daemon=True)
        self.thread.start()
        return {"port": self.listener.getsockname()[1]}

    def _serve(self) -> None:
        try:
            conn, _ = self.listener.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            views: list = []
            while True:
                head = conn.recv(1)
                if head in (b"", b"q"):
                    break
                if head == b"R":
                    count, size = _ROW.unpack(recv_exact(conn, _ROW.size))
                    offsets = np.frombuffer(recv_exact(conn, 8 * count), dtype=np.uint64)
                    views = [self.buf[int(o) : int(o) + size] for o in offsets]
                elif head == b"w":
                    _recvv(conn, list(views))
                    conn.sendall(b"k")
                elif head == b"r":
                    _sendv(conn, list(views))
                elif head == b"W":  # one message of the batch, acknowledged
                    (i,) = _ONE.unpack(recv_exact(conn, _ONE.size))
                    _recvv(conn, [views[i]])
                    conn.sendall(b"k")
                elif head == b"Q":  # one message of the batch, sent back
                    (i,) = _ONE.unpack(recv_exact(conn, _ONE.size))
                    _sendv(conn, [views[i]])
                else:
                    raise ConnectionError(f"socket baseline: unknown request {head!r}")
            conn.close()
        except BaseException as exc:  # reported by close(); the initiator sees the dropped link
            self.error = exc

    def initiator_open(self, buf: np.ndarray, host: str, peer: dict) -> dict:
        self.buf = memoryview(buf).cast("B")
        self.sock = socket.create_connection((peer["host"], peer["port"]), timeout=120)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return {}

    def prepare(self, op: str, api: str, offsets: Sequence[int], size: int) -> Transfer:
        sock = self.sock
        sock.sendall(b"R" + _ROW.pack(len(offsets), size) + np.asarray(offsets, dtype=np.uint64).tobytes())
        views = [self.buf[o : o + size] for o in offsets]
        ack = memoryview(bytearray(1))
        if op == "write":
            first = [memoryview(b"w"), *views]

            def write() -> None:
                _sendv(sock, list(first))
                if sock.recv_into(ack) != 1:
                    raise ConnectionError("socket baseline: target closed the connection")

            return write

        def read() -> None:
            sock.sendall(b"r")
            _recvv(sock, list(views))

        return read

    def close(self) -> None:
        if self.sock is not None:
            self.sock.sendall(b"q")
            self.sock.close()
        if self.thread is not None:
            self.thread.join(timeout=30)
            if self.error is not None:
                raise RuntimeError(f"socket baseline target failed: {self.error!r}")


class SerialSocketDriver(SocketDriver):
    """The socket baseline moving a batch one message at a time, each a round trip."""

    name = "socket-serial"

    def prepare(self, op: str, api: str, offsets: Sequence[int], size: int) -> Transfer:
        sock = self.sock
        sock.sendall(b"R" + _ROW.pack(len(offsets), size) + np.asarray(offsets, dtype=np.uint64).tobytes())
        views = [self.buf[o : o + size] for o in offsets]
        ack = memoryview(bytearray(1))
        if op == "write":
            heads = [memoryview(b"W" + _ONE.pack(i)) for i in range(len(views))]

            def write() -> None:
                for head, view in zip(heads, views):
                    _sendv(sock, [head, view])
                    if sock.recv_into(ack) != 1:
                        raise ConnectionError("socket baseline: target closed the connection")

            return write
        heads = [b"Q" + _ONE.pack(i) for i in range(len(views))]

        def read() -> None:
            for head, view in zip(heads, views):
                sock.sendall(head)
                _recvv(sock, [view])

        return read


class MemcpyDriver(Driver):
    """numpy copies between the initiator's buffer and a second buffer of the same process."""

    name = "memcpy"
    needs_target = False

    def initiator_open(self, buf: np.ndarray, host: str, peer: dict) -> dict:
        self.local = buf
        self.remote = np.empty_like(buf)
        self.remote[:] = buf[::-1]
        return {}

    def prepare(self, op: str, api: str, offsets: Sequence[int], size: int) -> Transfer:
        pairs = [(self.local[o : o + size], self.remote[o : o + size]) for o in offsets]
        if op == "write":
            pairs = [(r, l) for l, r in pairs]

        def copy() -> None:
            for dst, src in pairs:
                np.copyto(dst, src)

        return copy


class MooncakeDriver(Driver):
    name = "mooncake"

    def _open(self, buf: np.ndarray, host: str) -> None:
        from mooncake.engine import TransferEngine

        self.te = TransferEngine()
        rc = self.te.initialize(host, "P2PHANDSHAKE", "tcp", "")
        if rc != 0:
            raise RuntimeError(f"Mooncake TransferEngine.initialize({host!r}, 'P2PHANDSHAKE', 'tcp') returned {rc}")
        self.addr = address(buf)
        rc = self.te.register_memory(self.addr, buf.nbytes)
        if rc != 0:
            raise RuntimeError(f"Mooncake register_memory returned {rc}")

    def target_open(self, buf: np.ndarray, host: str) -> dict:
        self._open(buf, host)
        return {"segment": f"{host}:{self.te.get_rpc_port()}", "addr": self.addr}

    def initiator_open(self, buf: np.ndarray, host: str, peer: dict) -> dict:
        self._open(buf, host)
        self.segment, self.remote = peer["segment"], int(peer["addr"])
        return {}

    def prepare(self, op: str, api: str, offsets: Sequence[int], size: int) -> Transfer:
        te, seg = self.te, self.segment
        if len(offsets) == 1:
            call = te.transfer_sync_write if op == "write" else te.transfer_sync_read
            local, remote = self.addr + offsets[0], self.remote + offsets[0]

            def one() -> None:
                rc = call(seg, local, remote, size)
                if rc != 0:
                    raise RuntimeError(f"Mooncake transfer_sync_{op} returned {rc}")

            return one
        call = te.batch_transfer_sync_write if op == "write" else te.batch_transfer_sync_read
        local = [self.addr + o for o in offsets]
        remote = [self.remote + o for o in offsets]
        sizes = [size] * len(offsets)

        def batch() -> None:
            rc = call(seg, local, remote, sizes)
            if rc != 0:
                raise RuntimeError(f"Mooncake batch_transfer_sync_{op} returned {rc}")

        return batch


def _nixl_api():
    """NIXL's Python API: the ``nixl`` meta package, or ``nixl_cu12`` installed alone."""
    for name in ("nixl._api", "nixl_cu12._api", "nixl_cu13._api"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("NIXL is not installed (pip install nixl-cu12; see scripts/bench-io-setup.sh)")


class NixlDriver(Driver):
    name = "nixl"

    def _open(self, buf: np.ndarray, role: str) -> None:
        api = _nixl_api()
        # The target needs NIXL's progress thread (UCX's tcp transport emulates RMA with messages the
        # target must progress); the initiator makes progress itself while it polls its transfer,
        # and a second busy thread there would only compete for the cores.
        config = api.nixl_agent_config(enable_prog_thread=role == "target", backends=["UCX"])
        self.agent = api.nixl_agent(f"mori-bench-io-{role}", config)
        self.addr = address(buf)
        self.reg = self.agent.register_memory(self.agent.get_reg_descs([(self.addr, buf.nbytes, 0, "")], "DRAM"))
        self.handle = None

    def target_open(self, buf: np.ndarray, host: str) -> dict:
        self._open(buf, "target")
        return {"meta": self.agent.get_agent_metadata().hex(), "addr": self.addr}

    def target_accept(self, peer: dict) -> None:
        self.agent.add_remote_agent(bytes.fromhex(peer["meta"]))

    def initiator_open(self, buf: np.ndarray, host: str, peer: dict) -> dict:
        self._open(buf, "initiator")
        self.peer_name = self.agent.add_remote_agent(bytes.fromhex(peer["meta"]))
        self.remote = int(peer["addr"])
        return {"meta": self.agent.get_agent_metadata().hex()}

    def prepare(self, op: str, api: str, offsets: Sequence[int], size: int) -> Transfer:
        agent = self.agent
        local = agent.get_xfer_descs([(self.addr + o, size, 0) for o in offsets], "DRAM")
        remote = agent.get_xfer_descs([(self.remote + o, size, 0) for o in offsets], "DRAM")
        handle = agent.initialize_xfer(op.upper(), local, remote, self.peer_name)
        self.handle = handle

        def xfer() -> None:
            state = agent.transfer(handle)
            while state == "PROC":
                state = agent.check_xfer_state(handle)
            if state != "DONE":
                raise RuntimeError(f"NIXL {op} ended in state {state}")

        return xfer

    def release(self) -> None:
        if self.handle is not None:
            self.agent.release_xfer_handle(self.handle)
            self.handle = None

    def close(self) -> None:
        self.release()
        self.agent.deregister_memory(self.reg)
        del self.agent


BASELINES = {
    "socket": SocketDriver,
    "socket-serial": SerialSocketDriver,
    "memcpy": MemcpyDriver,
    "mooncake": MooncakeDriver,
    "nixl": NixlDriver,
}


def _mooncake_unavailable() -> Optional[str]:
    """Why ``mooncake.engine`` does not import in this interpreter (which is the one both benchmark
    processes run): a wheel installed by another interpreter's pip (``pip`` of the system Python
    while the benchmark runs in a venv, or the reverse) is not on this one's path, and a wheel
    whose shared libraries do not load is installed but unusable; both used to read "not
    installed"."""
    if importlib.util.find_spec("mooncake") is None:
        return (
            f"no mooncake package on the path of {sys.executable} (install it with that interpreter: "
            f"PYTHON={sys.executable} scripts/bench-io-setup.sh)"
        )
    try:
        importlib.import_module("mooncake.engine")
    except Exception as exc:  # ImportError, or a shared library that does not load
        return f"mooncake is installed but mooncake.engine does not import: {exc!r}"
    return None


def unavailable(name: str) -> Optional[str]:
    """Why baseline ``name`` cannot run here (None when it can)."""
    if name == "mooncake":
        return _mooncake_unavailable()
    if name == "nixl" and not any(importlib.util.find_spec(m) for m in ("nixl", "nixl_cu12", "nixl_cu13")):
        return "nixl is not installed (scripts/bench-io-setup.sh)"
    return None
