# SPDX-License-Identifier: MIT
"""An independent client of the tcp transport's wire format (transports/tcp/tcp_protocol.h),
written from the spec in that header with nothing but ``socket`` and ``struct``.

Tests use it to talk to a PE's target engine the way a hostile or broken peer
would: wrong secrets, out-of-bounds addresses, malformed requests.
"""
from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Optional

MAGIC = b"MORITCP1"
VERSION = 1
HELLO = struct.Struct("<8s32siiIIQ")
HELLO_REPLY = struct.Struct("<B3xiQ")
REQUEST = struct.Struct("<BBBBIQQQQIIQQ")
REPLY = struct.Struct("<BB2xIQQ")
assert HELLO.size == 64 and HELLO_REPLY.size == 16 and REQUEST.size == 64 and REPLY.size == 24

# HelloStatus
H_OK, H_REFUSED, H_WRONG_PE, H_DUPLICATE, H_BAD_VERSION, H_BUSY = range(6)
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


class WireClient:
    """One raw connection to a PE's tcp listener."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.seq = 0

    def close(self) -> None:
        self.sock.close()

    def hello(self, secret: bytes, from_pe: int, to_pe: int, flags: int = 0, version: int = VERSION,
              magic: bytes = MAGIC) -> int:
        """Sends a hello; returns the HelloStatus."""
        self.sock.sendall(HELLO.pack(magic, secret, from_pe, to_pe, flags, version, 0))
        status, _pe, _chunk = HELLO_REPLY.unpack(recv_exact(self.sock, HELLO_REPLY.size))
        return status

    def send(self, op: int, region: int = 0, offset: int = 0, length: int = 0, payload: bytes = b"", aux: int = 0,
             width: int = 0, flags: int = 0, operand: int = 0, compare: int = 0, signal_region: int = 0,
             signal_offset: int = 0) -> int:
        self.seq += 1
        header = REQUEST.pack(op, aux, width, flags, region, offset, length, operand, compare, signal_region, 0,
                              signal_offset, self.seq)
        self.sock.sendall(header + payload)
        return self.seq

    def reply(self) -> Reply:
        status, op, length, seq, value = REPLY.unpack(recv_exact(self.sock, REPLY.size))
        data = recv_exact(self.sock, length) if length else b""
        return Reply(status, op, seq, value, data)

    def put(self, region: int, offset: int, payload: bytes, ack: bool = True, length: Optional[int] = None) -> int:
        return self.send(PUT, region, offset, len(payload) if length is None else length, payload,
                         flags=FLAG_ACK if ack else 0)

    def get(self, region: int, offset: int, length: int) -> int:
        return self.send(GET, region, offset, length)

    def flush(self) -> Reply:
        self.send(FLUSH)
        return self.reply()

    def bye(self) -> None:
        self.send(BYE)
