# SPDX-License-Identifier: MIT
"""One process of a ``mori bench io`` pair: the target (serves its buffer) or the initiator
(moves data and times it). Started by apps/bench/io.py, never by hand.

The two meet over a control connection (length-prefixed JSON) that carries the engines'
descriptors and, between rows, the verification requests; it is idle while a row is timed.
Per row: the destination regions are overwritten with a fill byte, the row is timed (one
warm-up transfer, then ``iters`` transfers, each posted and waited for), and both sides hash
the regions: the row counts only if the hashes agree (the data arrived and is the source's).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import socket
import statistics
import struct
import sys
import time
import traceback
from typing import Optional, Sequence

import numpy as np

from mori.apps.bench.io_driver import Driver
from mori.apps.bench.wire import recv_exact

_LEN = struct.Struct("<I")


def _send(conn: socket.socket, obj: dict) -> None:
    raw = json.dumps(obj).encode()
    conn.sendall(_LEN.pack(len(raw)) + raw)


def _recv(conn: socket.socket) -> dict:
    return json.loads(recv_exact(conn, _LEN.unpack(recv_exact(conn, _LEN.size))[0]))


def make_driver(engine: str) -> Driver:
    if engine.startswith("mori"):
        from mori.apps.bench.io_mori import MoriDriver

        # As MORI's own benchmark and vLLM/SGLang: BackendType.RDMA with notifications off.
        return MoriDriver("rdma")
    from mori.apps.bench.io_baselines import BASELINES

    return BASELINES[engine]()


def fill_random(buf: np.ndarray, seed: int) -> None:
    rng = np.random.default_rng(seed)
    step = 16 << 20
    for o in range(0, buf.nbytes, step):
        n = min(step, buf.nbytes - o)
        buf[o : o + n] = np.frombuffer(rng.bytes(n), dtype=np.uint8)


def layout(batch: int, size: int, contiguous: bool) -> list[int]:
    """Offsets of a batch: strided by twice the size (nothing merges), or back to back."""
    stride = size if contiguous or batch == 1 else 2 * size
    return [i * stride for i in range(batch)]


def digest(buf: np.ndarray, offsets: Sequence[int], size: int) -> str:
    h = hashlib.blake2b(digest_size=16)
    for o in offsets:
        h.update(memoryview(buf[o : o + size]))
    return h.hexdigest()


def fill(buf: np.ndarray, offsets: Sequence[int], size: int, byte: int) -> None:
    for o in offsets:
        buf[o : o + size] = byte


def _target(args: argparse.Namespace) -> int:
    buf = np.empty(args.buf_bytes, dtype=np.uint8)
    fill_random(buf, seed=2)
    drv = make_driver(args.engine)
    info = drv.target_open(buf, args.host)
    info["host"] = args.host
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((args.host, 0))
    listener.listen(1)
    tmp = args.ready_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(listener.getsockname()[1]))
    os.replace(tmp, args.ready_file)  # whole or absent: the launcher polls for it
    listener.settimeout(args.timeout)
    conn, _ = listener.accept()
    conn.settimeout(None)
    _send(conn, {"info": info})
    while True:
        msg = _recv(conn)
        cmd = msg["cmd"]
        if cmd == "peer":
            drv.target_accept(msg["info"])
            _send(conn, {})
        elif cmd == "fill":
            fill(buf, msg["offsets"], msg["size"], msg["byte"])
            _send(conn, {})
        elif cmd == "digest":
            _send(conn, {"digest": digest(buf, msg["offsets"], msg["size"])})
        elif cmd == "quit":
            drv.close()
            _send(conn, {})
            return 0
        else:
            raise ValueError(f"unknown control command {cmd!r}")


class _Remote:
    """The destination side of verification: the target process, or (memcpy) a local buffer."""

    def __init__(self, conn: Optional[socket.socket], local: Optional[np.ndarray]) -> None:
        self.conn, self.local = conn, local

    def fill(self, offsets: list[int], size: int, byte: int) -> None:
        if self.conn is None:
            fill(self.local, offsets, size, byte)
        else:
            _send(self.conn, {"cmd": "fill", "offsets": offsets, "size": size, "byte": byte})
            _recv(self.conn)

    def digest(self, offsets: list[int], size: int) -> str:
        if self.conn is None:
            return digest(self.local, offsets, size)
        _send(self.conn, {"cmd": "digest", "offsets": offsets, "size": size})
        return _recv(self.conn)["digest"]


def _timed(fn, iters: int, budget: float) -> list[float]:
    """Per-transfer seconds: one warm-up, a probe that sizes the run to ``budget``, then the run."""
    fn()
    t0 = time.perf_counter()
    fn()
    probe = time.perf_counter() - t0
    n = max(3, min(iters, int(budget / max(probe, 1e-7))))
    for _ in range(min(10, n // 10)):
        fn()
    out = []
    gc.disable()
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    finally:
        gc.enable()
    return out


def _row(
    engine: str, backend: Optional[str], op: str, api: str, batch: int, size: int, lat: list[float], verified: bool
) -> dict:
    total = size * batch
    best, mean = min(lat), statistics.fmean(lat)
    return {
        "engine": engine,
        "backend": backend,
        "op": op,
        "api": api,
        "MsgSize (B)": size,
        "BatchSize": batch,
        "TotalSize (MB)": total / 1e6,
        "Max BW (GB/s)": total / best / 1e9,
        "Avg BW (GB/s)": total / mean / 1e9,
        "Min Lat (us)": best * 1e6,
        "Avg Lat (us)": mean * 1e6,
        "iters": len(lat),
        "verified": verified,
    }


def _percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _initiator(args: argparse.Namespace) -> int:
    with open(args.plan) as f:
        plan = json.load(f)
    buf = np.empty(args.buf_bytes, dtype=np.uint8)
    fill_random(buf, seed=1)
    drv = make_driver(args.engine)
    conn = None
    peer: dict = {}
    if drv.needs_target:
        host, port = args.connect.rsplit(":", 1)
        conn = socket.create_connection((host, int(port)), timeout=args.timeout)
        conn.settimeout(None)
        peer = _recv(conn)["info"]
    mine = drv.initiator_open(buf, args.host, peer)
    if conn is not None:
        _send(conn, {"cmd": "peer", "info": mine})
        _recv(conn)
    remote = _Remote(conn, getattr(drv, "remote", None) if conn is None else None)
    backend = drv.backend()
    apis = [a for a in drv.apis if a == "-" or a in plan["apis"]]
    result: dict = {"engine": args.engine, "backend": backend, "rows": [], "latency": []}
    fill_byte = 0
    if plan["bandwidth"]:
        for op in plan["ops"]:
            for api in apis:
                for batch in plan["batches"]:
                    for size in plan["sizes"]:
                        offsets = layout(batch, size, plan["contiguous"])
                        if offsets[-1] + size > buf.nbytes:
                            continue
                        fill_byte = (fill_byte + 1) % 251 + 1
                        if op == "write":
                            remote.fill(offsets, size, fill_byte)
                        else:
                            fill(buf, offsets, size, fill_byte)
                        fn = drv.prepare(op, api, offsets, size)
                        lat = _timed(fn, plan["iters"], plan["budget"])
                        drv.release()
                        ok = digest(buf, offsets, size) == remote.digest(offsets, size)
                        if not ok:
                            raise AssertionError(
                                f"{args.engine} {op} ({api}, batch {batch}, {size} B): the "
                                "destination does not hold the source's bytes"
                            )
                        result["rows"].append(_row(args.engine, backend, op, api, batch, size, lat, ok))
    if plan["latency"]:
        for op in plan["ops"]:
            fn = drv.prepare(op, apis[0], [0], 8)
            for _ in range(50):
                fn()
            lat = []
            gc.disable()
            for _ in range(plan["lat_iters"]):
                t0 = time.perf_counter()
                fn()
                lat.append(time.perf_counter() - t0)
            gc.enable()
            drv.release()
            lat.sort()
            result["latency"].append(
                {
                    "engine": args.engine,
                    "backend": backend,
                    "op": op,
                    "api": apis[0],
                    "size": 8,
                    "n": len(lat),
                    "p50_us": _percentile(lat, 0.5) * 1e6,
                    "p99_us": _percentile(lat, 0.99) * 1e6,
                    "max_us": lat[-1] * 1e6,
                    "mean_us": statistics.fmean(lat) * 1e6,
                }
            )
    drv.close()
    if conn is not None:
        _send(conn, {"cmd": "quit"})
        _recv(conn)
    with open(args.out, "w") as f:
        json.dump(result, f)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mori.apps.bench.io_peer", description=__doc__.split("\n\n")[0])
    p.add_argument("--role", choices=["target", "initiator"], required=True)
    p.add_argument("--engine", required=True)
    p.add_argument("--host", required=True, help="this process's address")
    p.add_argument("--buf-bytes", type=int, required=True)
    p.add_argument("--connect", default="", help="target's control address host:port (initiator)")
    p.add_argument("--plan", default="", help="JSON file with the rows to measure (initiator)")
    p.add_argument("--out", default="", help="where the initiator writes its results")
    p.add_argument("--ready-file", default="", help="where the target writes its control port once ready")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the other process")
    args = p.parse_args(argv)
    try:
        rc = _target(args) if args.role == "target" else _initiator(args)
    except Exception as exc:
        traceback.print_exc()
        if args.role == "initiator" and args.out:
            with open(args.out, "w") as f:
                json.dump({"engine": args.engine, "error": f"{type(exc).__name__}: {exc}"}, f)
        rc = 1
    if args.engine == "nixl":
        # NIXL 1.5.1's wheel bundles a libnl-route whose exit-time destructor (rtnl_tc_unregister)
        # crashes in every process that created a UCX backend; our work is done and written.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    return rc


if __name__ == "__main__":
    sys.exit(main())
