# SPDX-License-Identifier: MIT
"""The stubs UMBP's clients call the master's and the peers' services with.

Where the build has grpc++ (``UMBP_GRPC_CLIENT``: ``auto``, ``cpp`` or ``python``), a stub's
methods call through ``mori.umbp._master_server.GrpcChannel``: the request serialized here, the
call signed and run to its end in C++ on the calling thread without the interpreter lock (as a
message of a long-lived call stream where the server answers those, ``UMBP_GRPC_STREAMS``), the
reply parsed here. Otherwise they are grpcio's stubs over a channel with the signing interceptor.
Both raise ``grpc.RpcError`` with ``code()`` and ``details()`` for a failed call and have a
``future()`` form, so the callers are the same code under either.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from typing import Callable, Optional

import grpc

from mori.umbp.distributed.grpc_servers import cpp_server, server_kind

_CODES = {c.value[0]: c for c in grpc.StatusCode}

# The future() calls (fire-and-forget releases) run here: a few threads, started on first use.
_futures_lock = threading.Lock()
_futures: Optional[concurrent.futures.ThreadPoolExecutor] = None


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _futures
    with _futures_lock:
        if _futures is None:
            _futures = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="umbp-rpc")
        return _futures


class CallFailed(grpc.RpcError):
    """A failed call through the native channel, as grpcio reports one."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


# Forks this process's lineage went through: a channel made before a fork must not be used
# after it (grpc++'s threads and connections do not survive one), and comparing this counter
# costs less than os.getpid(), a system call, on every RPC.
_forks = 0


def _count_fork() -> None:
    global _forks
    _forks += 1


os.register_at_fork(after_in_child=_count_fork)


class _NativeMethod:
    """One RPC of a native stub: ``method(request, timeout=None)`` and ``method.future(...)``."""

    __slots__ = ("_channel", "_name", "_parse", "_pid", "_forks")

    def __init__(self, channel, name: str, parse: Callable[[bytes], object]) -> None:
        self._channel = channel
        self._name = name
        self._parse = parse
        self._pid = os.getpid()
        self._forks = _forks

    def __call__(self, request, timeout: Optional[float] = None):
        if _forks != self._forks:
            # grpc++'s threads and connections do not survive fork(): a call here would hang.
            raise RuntimeError(
                f"umbp: a gRPC channel to {self._channel.target} made in process {self._pid} used in a forked "
                f"child ({os.getpid()}): make the UMBP client in the child (or start it with spawn)"
            )
        code, details, body = self._channel.call(self._name, request.SerializeToString(), timeout or 0.0)
        if code:
            raise CallFailed(_CODES.get(code, grpc.StatusCode.UNKNOWN), details)
        return self._parse(body)

    def future(self, request, timeout: Optional[float] = None) -> concurrent.futures.Future:
        return _executor().submit(self, request, timeout)


class NativeStub:
    """The methods of one service (a ServiceDescriptor of module ``pb``) over a GrpcChannel."""

    def __init__(self, channel, service, pb) -> None:
        for m in service.methods:
            parse = getattr(pb, m.output_type.name).FromString
            setattr(self, m.name, _NativeMethod(channel, f"/{service.full_name}/{m.name}", parse))


class Channel:
    """A client's connection to one UMBP server (``host:port``) and its stubs, one per service
    given as ``(grpcio stub class, ServiceDescriptor, pb module)``. ``kind``: ``cpp``, ``python``
    or None (UMBP_GRPC_CLIENT)."""

    def __init__(
        self,
        address: str,
        services: list,
        secret: Optional[bytes] = None,
        options: Optional[list] = None,
        kind: Optional[str] = None,
    ) -> None:
        self.address = address
        self.kind = server_kind(kind, "UMBP_GRPC_CLIENT")
        opts = [("grpc.max_receive_message_length", 256 << 20), ("grpc.max_send_message_length", 256 << 20)]
        opts += options or []
        if self.kind == "cpp":
            from mori.core.env import setting

            streams = bool(setting("UMBP_GRPC_STREAMS"))
            self._channel = cpp_server().GrpcChannel(address, 256 << 20, secret or b"", streams)
            self.stubs = [NativeStub(self._channel, service, pb) for _cls, service, pb in services]
        else:
            channel = grpc.insecure_channel(address, options=opts)
            if secret is not None:
                from mori.umbp.distributed.master_auth import SigningInterceptor

                channel = grpc.intercept_channel(channel, SigningInterceptor(secret))
            self._channel = channel
            self.stubs = [cls(channel) for cls, _service, _pb in services]

    def close(self) -> None:
        """Ends the connection (a native channel's ends when the last reference goes)."""
        if self.kind == "python":
            self._channel.close()
        self._channel = None
