# SPDX-License-Identifier: MIT
"""The master's servicers behind its grpc++ server (``mori.umbp._master_server.MasterGrpcServer``).

The C++ server checks a signed call itself (``MasterGrpcServer.verify_calls``, the same
``CallVerifier`` as grpcio's ``VerifyingInterceptor``) and hands each call it does not answer
natively over as bytes: ``GrpcDispatcher`` finds the servicer method of the call's RPC, parses the
request with the generated message class, runs the
handler with a ``CallContext`` (the part of grpcio's ``ServicerContext`` the handlers use), and
answers the serialized reply or the status the handler set. So the handlers are the same code
under either server, with the same codes and details.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Optional

import grpc

log = logging.getLogger("mori.umbp.master")

_OK = grpc.StatusCode.OK


class _Aborted(Exception):
    """What ``CallContext.abort`` raises, as grpcio's does: the handler stops there."""


class CallContext:
    """grpcio's ``ServicerContext`` as far as the master's handlers use it."""

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

    def __init__(self) -> None:
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
            log.exception("umbp master: %s failed", method)
            return grpc.StatusCode.UNKNOWN.value[0], f"Exception calling application: {exc}", b""
        code = context._code
        if code is not None and code is not _OK:
            return code.value[0], context._details, b""
        return 0, "", reply.SerializeToString()
