# SPDX-License-Identifier: MIT
"""A hostile/broken client against PE 0's tcp target (see tcp_guard_target.py).

    python tcp_hostile_client.py WORKDIR SECRET_HEX

Every attempt must be refused with the documented status; one valid put (with
fresh random bytes) must land. The attacks: a wrong secret, garbage before and
after authentication, a replay of a session recorded from MORI's own client
(whose put must not land again), 1,100 idle connections, then the refused
requests of an authenticated but broken peer. Writes WORKDIR/client.json either
way so the PEs never wait in vain; exits non-zero listing what went wrong.
"""

from __future__ import annotations

import json
import os
import resource
import secrets
import select
import socket
import sys
import threading
import time
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tcp_wire as w  # noqa: E402

IDLE_CONNECTIONS = 1100


def recorded_real_session(host: str, port: int, secret: bytes) -> tuple[socket.socket, bytearray]:
    """Authenticates with MORI's own client (core/auth through mori._C) over a relay that
    records every byte the client sends. Returns the authenticated connection and the record."""
    from mori import _C

    target = socket.create_connection((host, port), timeout=10)
    inner, outer = socket.socketpair()
    sent = bytearray()
    errors: list[BaseException] = []

    def client() -> None:
        try:
            _C.core.auth_client_handshake(inner.fileno(), secret, w.TCP_LABEL.decode(), 10.0)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    t = threading.Thread(target=client)
    t.start()
    while t.is_alive():
        ready, _, _ = select.select([outer, target], [], [], 0.05)
        if outer in ready:
            data = outer.recv(65536)
            sent += data
            target.sendall(data)
        if target in ready:
            outer.sendall(target.recv(65536))
    t.join()
    inner.close()
    outer.close()
    if errors:
        raise errors[0]
    return target, sent


def main(workdir: str, secret_hex: str) -> int:
    target = os.path.join(workdir, "target.json")
    deadline = time.monotonic() + 90
    while not os.path.exists(target):
        if time.monotonic() > deadline:
            raise TimeoutError("the PEs never published their endpoint")
        time.sleep(0.05)
    with open(target) as f:
        info = json.load(f)
    host, port = info["endpoint"].rsplit(":", 1)
    port = int(port)
    secret = bytes.fromhex(secret_hex)
    heap, off = info["heap_size"], info["offset"]
    failures: list[str] = []

    def expect(cond: bool, what: str) -> None:
        if not cond:
            failures.append(what)

    def attempt(what: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - every failure is reported
            failures.append(f"{what}: {type(exc).__name__}: {exc}")

    def wrong_secret() -> None:
        c = w.WireClient(host, port)
        bad = bytearray(secret)
        bad[5] ^= 0x40
        result = c.authenticate(bytes(bad))
        expect(not result.server_proved, "the target proved a secret we do not hold")
        expect(not result.accepted, "a wrong secret was not refused")
        expect(w.closed_by_peer(c.sock), "the connection stayed open after a refused proof")
        c.close()

    def garbage_hello() -> None:
        c = w.WireClient(host, port)
        c.sock.sendall(os.urandom(64))
        expect(w.closed_by_peer(c.sock), "the connection stayed open after garbage")
        c.close()
        # Garbage once authenticated: a hello that is not a MORI tcp hello.
        c = w.WireClient(host, port)
        expect(c.authenticate(secret).accepted, "the right secret was refused")
        c.sock.sendall(os.urandom(w.HELLO.size))
        status = w.HELLO_REPLY.unpack(w.recv_exact(c.sock, w.HELLO_REPLY.size))[0]
        expect(status == w.H_REFUSED, f"random bytes as a hello got status {status}")
        expect(w.closed_by_peer(c.sock), "the connection stayed open after garbage")
        c.close()

    replay_payload = secrets.token_bytes(1024)
    recorded = bytearray()

    def record_session() -> None:
        # A real session: MORI's client authenticates, then a hello and a put of replay_payload.
        sock, sent = recorded_real_session(host, port, secret)
        c = w.WireClient.__new__(w.WireClient)
        c.sock, c.seq = sock, 0
        msg = w.HELLO.pack(w.MAGIC, 1, 0, 0, w.VERSION, 0)
        sock.sendall(msg)
        status = w.HELLO_REPLY.unpack(w.recv_exact(sock, w.HELLO_REPLY.size))[0]
        expect(status == w.H_OK, f"MORI's own client authenticated, then its hello got status {status}")
        header = w.REQUEST.pack(w.PUT, 0, 0, w.FLAG_ACK, 0, off, len(replay_payload), 0, 0, 0, 0, 0, 1)
        sock.sendall(header + replay_payload)
        r = c.reply()
        expect(r.status == w.OK, f"the recorded session's put got status {r.status} {r.text!r}")
        recorded.extend(sent + msg + header + replay_payload)
        c.close()

    def replay() -> None:
        # Every byte a real client sent, sent again: the target's fresh nonce makes it worthless.
        expect(len(recorded) > w.NONCE + w.MAC, "no session was recorded")
        c = w.WireClient(host, port)
        auth_part = len(w.AUTH_MAGIC) + w.NONCE + w.MAC  # the client's hello and proof
        c.sock.sendall(bytes(recorded[:auth_part]))
        w.recv_exact(c.sock, w.NONCE + w.MAC)  # the target's fresh nonce and its proof
        verdict = w.recv_exact(c.sock, 1)
        expect(verdict == b"\x00", f"a replayed session got verdict {verdict!r}, not a refusal")
        try:
            c.sock.sendall(bytes(recorded[auth_part:]))  # the hello and the put, for good measure
        except OSError:
            pass
        expect(w.closed_by_peer(c.sock), "the connection stayed open after a replayed proof")
        c.close()

    def idle_flood() -> None:
        # Strangers that connect and say nothing must not crowd out a real peer.
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, IDLE_CONNECTIONS + 200)), hard))
        idle = [socket.create_connection((host, port), timeout=10) for _ in range(IDLE_CONNECTIONS)]
        try:
            c = w.WireClient(host, port)
            expect(c.hello(secret, 1, 0) == w.H_OK, f"a real peer was refused after {IDLE_CONNECTIONS} idle strangers")
            expect(c.flush().status == w.OK, "flush after the idle flood")
            c.close()
        finally:
            for s in idle:
                s.close()

    def wrong_target_and_duplicate() -> None:
        c = w.WireClient(host, port)
        expect(c.hello(secret, 1, 5) == w.H_WRONG_PE, "a hello for another PE was accepted")
        c.close()
        c = w.WireClient(host, port)
        expect(c.hello(secret, 1, 0, flags=w.PRIMARY) == w.H_DUPLICATE, "a second primary connection was accepted")
        c.close()

    payload = secrets.token_bytes(1024)

    def refused_requests() -> None:
        c = w.WireClient(host, port)
        expect(c.hello(secret, 1, 0) == w.H_OK, "the right secret was refused")
        cases = [
            ("put past the heap end", lambda: c.put(0, heap - 8, b"\xee" * 64), w.OUT_OF_BOUNDS),
            ("put at offset 2**63", lambda: c.put(0, 1 << 63, b"\xee" * 16), w.OUT_OF_BOUNDS),
            ("put with a wrapping offset", lambda: c.put(0, (1 << 64) - 8, b"\xee" * 16), w.OUT_OF_BOUNDS),
            ("put into an unknown region", lambda: c.put(77, 0, b"\xee" * 16), w.BAD_REGION),
            ("get past the heap end", lambda: c.get(0, heap - 100, 4096), w.OUT_OF_BOUNDS),
            (
                "unaligned atomic",
                lambda: c.send(w.AMO, 0, off + 3, aux=w.AMO_FETCH_ADD, width=8, operand=1),
                w.BAD_REQUEST,
            ),
            ("3-byte atomic", lambda: c.send(w.AMO, 0, off, aux=w.AMO_ADD, width=3, operand=1), w.BAD_REQUEST),
            ("unknown atomic op", lambda: c.send(w.AMO, 0, off, aux=200, width=8), w.BAD_REQUEST),
            ("atomic past the heap end", lambda: c.send(w.AMO, 0, heap, aux=w.AMO_FETCH, width=8), w.OUT_OF_BOUNDS),
            (
                "put_signal with its signal outside",
                lambda: c.send(w.PUT_SIGNAL, 0, off, 8, b"\xee" * 8, signal_region=0, signal_offset=heap, operand=1),
                w.OUT_OF_BOUNDS,
            ),
        ]
        for what, send, status in cases:
            seq = send()
            r = c.reply()
            expect(
                r.seq == seq and r.status == status,
                f"{what}: got status {r.status} seq {r.seq} ({r.text!r}), expected {status}",
            )
            expect(r.status == w.OK or "refused" in r.text, f"{what}: error text {r.text!r} does not say refused")
        # The same connection still works: one valid put (acknowledged) and a get of it back.
        seq = c.put(0, off, payload, ack=True)
        r = c.reply()
        expect(r.seq == seq and r.status == w.OK, f"valid put after refusals: status {r.status} {r.text!r}")
        seq = c.get(0, off, len(payload))
        r = c.reply()
        expect(r.status == w.OK and r.data == payload, "get of the valid put returned other bytes")
        expect(c.flush().status == w.OK, "flush")
        # A length above the chunk limit cannot be drained safely: refused, then closed.
        c.send(w.PUT, 0, off, 1 << 40)
        r = c.reply()
        expect(r.status == w.TOO_LARGE, f"oversized put got status {r.status}")
        expect(w.closed_by_peer(c.sock), "the connection stayed open after an oversized request")
        c.close()

    def unknown_op() -> None:
        c = w.WireClient(host, port)
        expect(c.hello(secret, 1, 0) == w.H_OK, "the right secret was refused (second time)")
        c.send(99, 0, 0)
        r = c.reply()
        expect(r.status == w.BAD_REQUEST, f"unknown op got status {r.status}")
        expect(w.closed_by_peer(c.sock), "the connection stayed open after an unknown op")
        c.close()

    for name, fn in [
        ("record a real session", record_session),
        ("wrong secret", wrong_secret),
        ("garbage hello", garbage_hello),
        ("wrong target/duplicate", wrong_target_and_duplicate),
        ("idle flood", idle_flood),
        ("refused requests", refused_requests),
        ("replay", replay),
        ("unknown op", unknown_op),
    ]:
        attempt(name, fn)
    result = {"payload": payload.hex(), "seed": int.from_bytes(secrets.token_bytes(4), "little")}
    if failures:
        result = {"error": "; ".join(failures)}
    tmp = os.path.join(workdir, "client.json.tmp")
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.rename(tmp, os.path.join(workdir, "client.json"))
    for f in failures:
        print("FAILED:", f, file=sys.stderr)
    print(f"hostile client: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
