# SPDX-License-Identifier: MIT
"""The per-host server's frames as a hostile or hand-rolled worker writes them
(umbp/src/standalone_wire.h), for the server tests."""

from __future__ import annotations

import socket
import struct
from typing import Optional

FRAME = struct.Struct("<IHHQII")  # magic, version, op, id, status, length
MAGIC, VERSION = 0x50424D55, 1
OP_PING, OP_REGISTER, OP_BATCH_PUT, OP_BATCH_EXISTS, OP_DIRECT_READS = 1, 2, 4, 6, 17


def frame(op: int, payload: bytes = b"", req: int = 1, *, length: Optional[int] = None, magic: int = MAGIC) -> bytes:
    """A request frame: header and payload (`length` overrides the payload's length)."""
    return FRAME.pack(magic, VERSION, op, req, 0, len(payload) if length is None else length) + payload


def read_reply(s: socket.socket) -> tuple[int, int, bytes]:
    """The next reply on `s`: (request id, status, payload)."""
    head = b""
    while len(head) < FRAME.size:
        chunk = s.recv(FRAME.size - len(head))
        if not chunk:
            raise EOFError("server closed the connection")
        head += chunk
    _, _, _, req, status, length = FRAME.unpack(head)
    body = b""
    while len(body) < length:
        body += s.recv(length - len(body))
    return req, status, body
