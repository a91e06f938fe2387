# SPDX-License-Identifier: MIT
"""Signed control-plane RPCs: a job secret the master and its clients share, never sent.

Every call carries, in gRPC metadata, a timestamp, a random nonce and
HMAC-SHA256(secret, method | timestamp | nonce | SHA-256 of the request bytes) (core/auth's MAC).
The server interceptor refuses with UNAUTHENTICATED, before any handler runs, a call that is
unsigned, signed with another secret, outside the replay window (UMBP_AUTH_WINDOW_MS), a replay
of a nonce already seen, or whose body differs from what was signed.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
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
        self._secret = secret
        self._name = name
        self._window = window_s
        self._on_refused = on_refused
        self._lock = threading.Lock()
        self._nonces: dict[str, float] = {}
        self._next_prune = 0.0

    def _fresh_nonce(self, nonce: str, now: float) -> bool:
        with self._lock:
            if now >= self._next_prune:
                self._nonces = {n: t for n, t in self._nonces.items() if t > now}
                self._next_prune = now + self._window
            if nonce in self._nonces:
                return False
            self._nonces[nonce] = now + 2 * self._window
            return True

    def _refuse(self, handler, why: str):
        if self._on_refused is not None:
            self._on_refused(why)

        def deny(request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, f"{self._name}: {why}")

        return grpc.unary_unary_rpc_method_handler(
            deny, request_deserializer=lambda raw: raw, response_serializer=handler.response_serializer
        )

    def _header_refusal(self, md: dict, now: float) -> Optional[str]:
        """What is wrong with a call's signing metadata before its body is read, or None."""
        ts, nonce, sig = md.get(TS_KEY), md.get(NONCE_KEY), md.get(SIG_KEY)
        if not (ts and nonce and sig):
            return "unsigned call (this master requires the job secret)"
        try:
            ts_s = int(ts) / 1000.0
        except ValueError:
            return "malformed timestamp"
        if abs(now - ts_s) > self._window:
            return "signature outside the replay window"
        return None

    def check(self, method: str, md: dict, body: bytes) -> Optional[str]:
        """The whole check for a server that holds the request bytes (the master's grpc++
        server): None to serve the call, else the UNAUTHENTICATED details to answer (counted)."""
        now = time.time()
        why = self._header_refusal(md, now)
        if why is None and not hmac.compare_digest(
            _mac(self._secret, method, md[TS_KEY], md[NONCE_KEY], body), md[SIG_KEY]
        ):
            why = "bad signature"
        if why is None and not self._fresh_nonce(md[NONCE_KEY], now):
            if self._on_refused is not None:
                self._on_refused("replayed nonce")
            return f"{self._name}: replayed call"
        if why is None:
            return None
        if self._on_refused is not None:
            self._on_refused(why)
        return f"{self._name}: {why}"

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        md = dict(handler_call_details.invocation_metadata or ())
        now = time.time()
        why = self._header_refusal(md, now)
        if why is not None:
            return self._refuse(handler, why)
        ts, nonce, sig = md[TS_KEY], md[NONCE_KEY], md[SIG_KEY]
        method = handler_call_details.method
        secret = self._secret
        checked = {}

        def deserialize(raw: bytes):
            checked["ok"] = hmac.compare_digest(_mac(secret, method, ts, nonce, raw), sig)
            return handler.request_deserializer(raw)

        behavior = handler.unary_unary

        def guarded(request, context):
            if not checked.get("ok"):
                if self._on_refused is not None:
                    self._on_refused("bad signature")
                context.abort(grpc.StatusCode.UNAUTHENTICATED, f"{self._name}: bad signature")
            if not self._fresh_nonce(nonce, now):
                if self._on_refused is not None:
                    self._on_refused("replayed nonce")
                context.abort(grpc.StatusCode.UNAUTHENTICATED, f"{self._name}: replayed call")
            return behavior(request, context)

        return grpc.unary_unary_rpc_method_handler(
            guarded, request_deserializer=deserialize, response_serializer=handler.response_serializer
        )
