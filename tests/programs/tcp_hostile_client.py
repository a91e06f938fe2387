# SPDX-License-Identifier: MIT
"""A hostile/broken client against PE 0's tcp target (see tcp_guard_target.py).

    python tcp_hostile_client.py WORKDIR SECRET_HEX

Every attempt must be refused with the documented status; one valid put (with
fresh random bytes) must land. Writes WORKDIR/client.json either way so the PEs
never wait in vain; exits non-zero listing what went wrong.
"""
from __future__ import annotations

import json
import os
import secrets
import sys
import time
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tcp_wire as w  # noqa: E402


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
        expect(c.hello(bytes(bad), 1, 0) == w.H_REFUSED, "a wrong secret was not refused")
        expect(w.closed_by_peer(c.sock), "the connection stayed open after a refused hello")
        c.close()

    def garbage_hello() -> None:
        c = w.WireClient(host, port)
        c.sock.sendall(os.urandom(64))
        status = w.HELLO_REPLY.unpack(w.recv_exact(c.sock, w.HELLO_REPLY.size))[0]
        expect(status == w.H_REFUSED, f"random bytes as a hello got status {status}")
        expect(w.closed_by_peer(c.sock), "the connection stayed open after garbage")
        c.close()

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
            ("unaligned atomic", lambda: c.send(w.AMO, 0, off + 3, aux=w.AMO_FETCH_ADD, width=8, operand=1),
             w.BAD_REQUEST),
            ("3-byte atomic", lambda: c.send(w.AMO, 0, off, aux=w.AMO_ADD, width=3, operand=1), w.BAD_REQUEST),
            ("unknown atomic op", lambda: c.send(w.AMO, 0, off, aux=200, width=8), w.BAD_REQUEST),
            ("atomic past the heap end", lambda: c.send(w.AMO, 0, heap, aux=w.AMO_FETCH, width=8), w.OUT_OF_BOUNDS),
            ("put_signal with its signal outside", lambda: c.send(w.PUT_SIGNAL, 0, off, 8, b"\xee" * 8,
                                                                 signal_region=0, signal_offset=heap, operand=1),
             w.OUT_OF_BOUNDS),
        ]
        for what, send, status in cases:
            seq = send()
            r = c.reply()
            expect(r.seq == seq and r.status == status,
                   f"{what}: got status {r.status} seq {r.seq} ({r.text!r}), expected {status}")
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

    for name, fn in [("wrong secret", wrong_secret), ("garbage hello", garbage_hello),
                     ("wrong target/duplicate", wrong_target_and_duplicate), ("refused requests", refused_requests),
                     ("unknown op", unknown_op)]:
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
