# SPDX-License-Identifier: MIT
"""Which gRPC server a UMBP service runs, and the servicers behind the grpc++ one.

The master and every distributed worker's UMBPPeer service serve gRPC from a grpc++ server in
C++ (``mori.umbp._master_server.MasterGrpcServer``: a generic service, the calls taken as bytes)
where the build has grpc++, else from grpcio's Python server, whose completion-queue thread and
thread pool cost a call several times the CPU (docs/umbp-master.md). ``server_kind`` picks
(UMBP_MASTER_SERVER, UMBP_PEER_SERVER).

The C++ server checks a signed call itself (``MasterGrpcServer.verify_calls``, the same
``CallVerifier`` as grpcio's ``VerifyingInterceptor``) and hands each call it does not answer
natively over as bytes: ``GrpcDispatcher`` finds the servicer method of the call's RPC, parses the
request with the generated message class, runs the handler with a ``CallContext`` (the part of
grpcio's ``ServicerContext`` the handlers use), and answers the serialized reply or the status
the handler set. So the handlers are the same code under either server, with the same codes and
details.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Optional

import grpc

log = logging.getLogger("mori.umbp")

_OK = grpc.StatusCode.OK

SERVER_NAMES = {"cpp": "grpc++ (C++, mori.umbp._master_server)", "python": "grpcio (Python)"}


def cpp_server():
    """The grpc++ server's module (``mori.umbp._master_server``), or None when this build has no
    grpc++. Its own module, imported only by the services' servers, so ``import mori`` never
    loads grpc++."""
    try:
        from mori.umbp import _master_server
    except ImportError:
        return None
    return _master_server


def server_kind(requested: Optional[str] = None, setting_name: str = "UMBP_MASTER_SERVER") -> str:
    """``cpp`` or ``python``: the gRPC server a service runs, from ``requested`` or the setting
    ``setting_name`` (``auto``: cpp when this build has grpc++)."""
    from mori.core.env import setting

    kind = (requested or str(setting(setting_name)) or "auto").lower()
    if kind not in ("auto", "cpp", "python"):
        raise ValueError(f"{setting_name} must be auto, cpp or python, got {kind!r}")
    if kind == "auto":
        return "cpp" if cpp_server() is not None else "python"
    if kind == "cpp" and cpp_server() is None:
        raise RuntimeError(
            f"{setting_name}=cpp but this build of mori has no grpc++ "
            f"(apt install libgrpc++-dev and rebuild, or use {setting_name}=python)"
        )
    return kind


class _Aborted(Exception):
    """What ``CallContext.abort`` raises, as grpcio's does: the handler stops there."""


class CallContext:
    """grpcio's ``ServicerContext`` as far as the services' handlers use it."""

    __slots__ = ("_metadata", "_peer", "_deadline", "_code", "_details")

    def __init__(self, metadata: list, peer: str, time_remaining: Optional[float]) -> None:
        self._metadata = metadata
        self._peer = peer
        self._deadline = None if time_remaining is None else time.monotonic() + time_remaining
        self._code: Optional[grpc.StatusCode] = None
        self._details = ""

    def abort(self, code: grpc.StatusCode, details: str):
        if code is _OK:  # grpcio refuses it too: an abort must fail the call
            raise ValueError("abort() needs a status code other than OK")
        self._code, self._details = code, details
        raise _Aborted(details)

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self._details = details

    def code(self) -> Optional[grpc.StatusCode]:
        return self._code

    def details(self) -> str:
        return self._details

    def invocation_metadata(self) -> tuple:
        return tuple(self._metadata)

    def peer(self) -> str:
        return self._peer

    def time_remaining(self) -> Optional[float]:
        return None if self._deadline is None else max(self._deadline - time.monotonic(), 0.0)

    def is_active(self) -> bool:
        return self._deadline is None or time.monotonic() < self._deadline


class GrpcDispatcher:
    """``handler(method, request, metadata, peer, time_remaining) -> (code, details, reply)`` for
    ``MasterGrpcServer``, over grpcio-style servicers (``add(servicer, service_descriptor, pb)``)."""

    def __init__(self, name: str = "umbp master") -> None:
        """``name``: what the log calls the service when a handler fails."""
        self._name = name
        self._methods: dict[str, tuple[Callable, Callable]] = {}

    @property
    def methods(self) -> list[str]:
        """The full names of the methods served ("/umbp.UMBPMaster/BatchRouteGet", ...)."""
        return list(self._methods)

    def add(self, servicer, service, pb) -> None:
        """Serve every RPC of ``service`` (a ServiceDescriptor of module ``pb``) with the
        servicer's method of the same name."""
        for m in service.methods:
            self._methods[f"/{service.full_name}/{m.name}"] = (
                getattr(pb, m.input_type.name).FromString,
                getattr(servicer, m.name),
            )

    def __call__(self, method: str, request: bytes, metadata: list, peer: str, time_remaining):
        entry = self._methods.get(method)
        if entry is None:
            return grpc.StatusCode.UNIMPLEMENTED.value[0], "Method not found!", b""
        parse, behavior = entry
        try:
            message = parse(request)
        except Exception:  # noqa: BLE001 - grpcio's answer to an unparsable request
            return grpc.StatusCode.INTERNAL.value[0], "Exception deserializing request!", b""
        context = CallContext(metadata, peer, time_remaining)
        try:
            reply = behavior(message, context)
        except _Aborted:
            return context._code.value[0], context._details, b""
        except Exception as exc:  # noqa: BLE001 - answered as grpcio answers it, and logged
            log.exception("%s: %s failed", self._name, method)
            return grpc.StatusCode.UNKNOWN.value[0], f"Exception calling application: {exc}", b""
        code = context._code
        if code is not None and code is not _OK:
            return code.value[0], context._details, b""
        return 0, "", reply.SerializeToString()
