# SPDX-License-Identifier: MIT
"""Signed control-plane RPCs: a job secret the master and its clients share, never sent.

Every call carries, in gRPC metadata, a timestamp, a random nonce and
HMAC-SHA256(secret, method | timestamp | nonce | SHA-256 of the request bytes) (core/auth's MAC).
The server interceptor refuses with UNAUTHENTICATED, before any handler runs, a call that is
unsigned, signed with another secret, outside the replay window (UMBP_AUTH_WINDOW_MS), a replay
of a nonce already seen, or whose body differs from what was signed. The check itself is
``mori._C.umbp.CallVerifier`` (umbp/src/master_grpc_auth.h), the one implementation of these
rules: grpcio's interceptor here and the master's grpc++ server both use it.
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Callable, Optional

import grpc

from mori import _C

TS_KEY = "x-umbp-ts"
NONCE_KEY = "x-umbp-nonce"
SIG_KEY = "x-umbp-sig"


def secret_from_hex(secret_hex: str) -> bytes:
    """The raw job secret from its hex form (MORI_JOB_SECRET)."""
    try:
        return _C.core.secret_from_hex(secret_hex)
    except Exception as exc:  # noqa: BLE001 - the binding raises mori's error with the reason
        raise ValueError(f"secret_hex: not a job secret in hex ({exc})") from None


def _mac(secret: bytes, method: str, ts: str, nonce: str, body: bytes) -> str:
    digest = hashlib.sha256(body).hexdigest()
    msg = f"{method}\n{ts}\n{nonce}\n{digest}".encode()
    return _C.core.hmac_sha256(secret, msg).hex()


def sign(secret: bytes, method: str, body: bytes) -> list[tuple[str, str]]:
    """Metadata that proves ``secret`` for one call of ``method`` with request bytes ``body``."""
    ts = str(int(time.time() * 1000))
    nonce = os.urandom(16).hex()
    return [(TS_KEY, ts), (NONCE_KEY, nonce), (SIG_KEY, _mac(secret, method, ts, nonce, body))]


class _CallDetails(grpc.ClientCallDetails):
    def __init__(self, base, metadata):
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = metadata
        self.credentials = base.credentials
        self.wait_for_ready = base.wait_for_ready
        self.compression = base.compression


class SigningInterceptor(grpc.UnaryUnaryClientInterceptor):
    """Client side: signs every unary call of a channel (``grpc.intercept_channel``)."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def intercept_unary_unary(self, continuation, client_call_details, request):
        metadata = list(client_call_details.metadata or [])
        metadata += sign(self._secret, client_call_details.method, request.SerializeToString())
        return continuation(_CallDetails(client_call_details, metadata), request)


class VerifyingInterceptor(grpc.ServerInterceptor):
    """Server side: checks each call's signature before its handler runs (the master's, and
    any other UMBP gRPC server of the job, e.g. a peer's UMBPPeer service)."""

    def __init__(
        self,
        secret: bytes,
        window_s: float = 30.0,
        on_refused: Optional[Callable[[str], None]] = None,
        name: str = "umbp master",
    ) -> None:
        """``name`` is what refusals call this server (the master, or a peer reusing this)."""
        # The rules and the nonce cache; the master's grpc++ server checks calls with this same
        # object (``verifier``), so a nonce seen by either is a replay for both.
        self.verifier = _C.umbp.CallVerifier(secret, window_s, name)
        self.on_refused = on_refused

    def _refused(self, why: str) -> None:
        if self.on_refused is not None:
            self.on_refused(why)

    def _refuse(self, handler, reason: str, details: str):
        self._refused(reason)

        def deny(request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, details)

        return grpc.unary_unary_rpc_method_handler(
            deny, request_deserializer=lambda raw: raw, response_serializer=handler.response_serializer
        )

    def check(self, method: str, md: dict, body: bytes) -> Optional[str]:
        """The whole check for a server that holds the request bytes: None to serve the call,
        else the UNAUTHENTICATED details to answer (counted)."""
        refusal = self.verifier.check(
            method, md.get(TS_KEY) or "", md.get(NONCE_KEY) or "", md.get(SIG_KEY) or "", body, time.time()
        )
        if refusal is None:
            return None
        self._refused(refusal[0])
        return refusal[1]

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        md = dict(handler_call_details.invocation_metadata or ())
        now = time.time()
        ts, nonce, sig = md.get(TS_KEY) or "", md.get(NONCE_KEY) or "", md.get(SIG_KEY) or ""
        refusal = self.verifier.header_refusal(ts, nonce, sig, now)
        if refusal is not None:  # refused before the body is read
            return self._refuse(handler, *refusal)
        method = handler_call_details.method
        verifier = self.verifier
        checked = {}

        def deserialize(raw: bytes):
            checked["ok"] = verifier.signature_ok(method, ts, nonce, sig, raw)
            return handler.request_deserializer(raw)

        behavior = handler.unary_unary

        def guarded(request, context):
            if not checked.get("ok"):
                self._refused("bad signature")
                context.abort(grpc.StatusCode.UNAUTHENTICATED, f"{verifier.name}: bad signature")
            if not verifier.fresh_nonce(nonce, now):
                self._refused("replayed nonce")
                context.abort(grpc.StatusCode.UNAUTHENTICATED, f"{verifier.name}: replayed call")
            return behavior(request, context)

        return grpc.unary_unary_rpc_method_handler(
            guarded, request_deserializer=deserialize, response_serializer=handler.response_serializer
        )
