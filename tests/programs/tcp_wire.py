# SPDX-License-Identifier: MIT
"""An independent client of the tcp transport's wire format (transports/tcp/tcp_protocol.h)
and of MORI's challenge-response authentication (core/include/mori/core/auth.h), written
from the spec in those headers with nothing but ``socket``, ``struct`` and ``hmac``.

Tests use it to talk to a PE's target engine (and to the bootstrap store, which
authenticates the same way) as a hostile or broken peer would: wrong secrets,
replayed sessions, out-of-bounds addresses, malformed requests.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
from dataclasses import dataclass
from typing import Optional

# Authentication (auth.h): client -> AUTH_MAGIC + client nonce; server -> server nonce +
# HMAC(secret, label 0 'S' cn sn); client -> HMAC(secret, label 0 'C' cn sn); server -> verdict.
AUTH_MAGIC = b"MORIAUTH"
NONCE = MAC = 32
TCP_LABEL = b"mori-tcp-v1"
STORE_LABEL = b"mori-store-v1"

MAGIC = b"MORITCP2"
VERSION = 2
HELLO = struct.Struct("<8siiIIQ")
HELLO_REPLY = struct.Struct("<B3xiQ")
REQUEST = struct.Struct("<BBBBIQQQQIIQQ")
REPLY = struct.Struct("<BB2xIQQ")
assert HELLO.size == 32 and HELLO_REPLY.size == 16 and REQUEST.size == 64 and REPLY.size == 24

# HelloStatus
H_OK, H_REFUSED, H_WRONG_PE, H_DUPLICATE, H_BAD_VERSION, H_BUSY = range(6)
H_AUTH_REFUSED = -1  # not a HelloStatus: the handshake before the hello failed
# Op
PUT, GET, AMO, PUT_SIGNAL, FLUSH, BYE = 1, 2, 3, 4, 5, 6
# ReplyStatus
OK, OUT_OF_BOUNDS, BAD_REGION, BAD_REQUEST, TOO_LARGE = range(5)
FLAG_ACK = 1
PRIMARY = 1
# AmoOp numbering (transport.h)
AMO_FETCH, AMO_SET, AMO_SWAP, AMO_CSWAP, AMO_ADD, AMO_FETCH_ADD = range(6)


@dataclass
class Reply:
    status: int
    op: int
    seq: int
    value: int
    data: bytes

    @property
    def text(self) -> str:
        return self.data.decode(errors="replace") if self.status != OK else ""


def recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def closed_by_peer(sock: socket.socket, timeout: float = 5.0) -> bool:
    """Whether the other side closes the connection (EOF or reset) within ``timeout``."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def proof(secret: bytes, label: bytes, role: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    return hmac.new(secret, label + b"\0" + role + client_nonce + server_nonce, hashlib.sha256).digest()


@dataclass
class AuthResult:
    server_proved: bool  # the server's proof matched our secret
    accepted: bool  # the server's verdict on our proof


def authenticate(sock: socket.socket, secret: bytes, label: bytes) -> AuthResult:
    """The client side of the handshake. Sends our proof even when the server's does not match
    (a hostile client would), so the caller sees the server's verdict on a wrong secret."""
    cn = os.urandom(NONCE)
    sock.sendall(AUTH_MAGIC + cn)
    reply = recv_exact(sock, NONCE + MAC)
    sn, server_mac = reply[:NONCE], reply[NONCE:]
    proved = hmac.compare_digest(server_mac, proof(secret, label, b"S", cn, sn))
    sock.sendall(proof(secret, label, b"C", cn, sn))
    verdict = recv_exact(sock, 1)
    return AuthResult(proved, verdict == b"\x01")


class WireClient:
    """One raw connection to a PE's tcp listener."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.seq = 0

    def close(self) -> None:
        self.sock.close()

    def authenticate(self, secret: bytes) -> AuthResult:
        return authenticate(self.sock, secret, TCP_LABEL)

    def hello(
        self, secret: bytes, from_pe: int, to_pe: int, flags: int = 0, version: int = VERSION, magic: bytes = MAGIC
    ) -> int:
        """Authenticates, then sends a hello; returns the HelloStatus (H_AUTH_REFUSED if the
        target refused our proof of the secret)."""
        if not self.authenticate(secret).accepted:
            return H_AUTH_REFUSED
        self.sock.sendall(HELLO.pack(magic, from_pe, to_pe, flags, version, 0))
        status, _pe, _chunk = HELLO_REPLY.unpack(recv_exact(self.sock, HELLO_REPLY.size))
        return status

    def send(
        self,
        op: int,
        region: int = 0,
        offset: int = 0,
        length: int = 0,
        payload: bytes = b"",
        aux: int = 0,
        width: int = 0,
        flags: int = 0,
        operand: int = 0,
        compare: int = 0,
        signal_region: int = 0,
        signal_offset: int = 0,
    ) -> int:
        self.seq += 1
        header = REQUEST.pack(
            op, aux, width, flags, region, offset, length, operand, compare, signal_region, 0, signal_offset, self.seq
        )
        self.sock.sendall(header + payload)
        return self.seq

    def reply(self) -> Reply:
        status, op, length, seq, value = REPLY.unpack(recv_exact(self.sock, REPLY.size))
        data = recv_exact(self.sock, length) if length else b""
        return Reply(status, op, seq, value, data)

    def put(self, region: int, offset: int, payload: bytes, ack: bool = True, length: Optional[int] = None) -> int:
        return self.send(
            PUT, region, offset, len(payload) if length is None else length, payload, flags=FLAG_ACK if ack else 0
        )

    def get(self, region: int, offset: int, length: int) -> int:
        return self.send(GET, region, offset, length)

    def flush(self) -> Reply:
        self.send(FLUSH)
        return self.reply()

    def bye(self) -> None:
        self.send(BYE)
