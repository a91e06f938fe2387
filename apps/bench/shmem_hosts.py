# SPDX-License-Identifier: MIT
"""``mori bench shmem --hosts 2``: shmem between two hosts over the tcp transport,
against a plain TCP socket between the same two hosts in the same run.

The two "hosts" are network namespaces joined by a veth link (needs root), or,
with ``--loopback``, two node ids on this machine's loopback. Measured, from
Python on both sides:

- latency of 8-byte put+quiet, get, fetch_add, and a put/wait_until ping-pong,
  against a socket ping-pong of 8 bytes (one round trip);
- bandwidth of put (stream of puts, then quiet) and get (blocking gets) per
  message size, against a socket stream of the same message size (sender
  streams, receiver acknowledges the total).

- the rate of non-fetching 8-byte atomic adds (a stream, then quiet) and the
  latency of barrier_all over the two PEs.

``--transport ucx`` runs the same job twice in the same run, over MORI's tcp
transport and over the ucx transport (``MORI_NET_TRANSPORT=ucx``, UCX's transports
from ``--ucx-tls``, default tcp), and shows them side by side.

Targets (issue 4): put bandwidth >= 0.8 x socket at >= 1 MiB; small-put latency
(put + quiet) <= 2 x socket round trip. Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Optional, Sequence

from mori.apps.bench.launch import worker_command
from mori.apps.bench.processes import stop as stop_processes
from mori.apps.bench.sizes import human_size, parse_list
from mori.apps.bench.wire import recv_into_exact

SIZES = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]
LAT_ITERS = 3000  # per latency figure, split into LAT_SLICES alternating samples
LAT_SLICES = 10  # fine interleaving: baseline and MORI see the same machine load
WARMUP = 30  # untimed operations before each latency sample
REPEATS = 3  # bandwidth samples per size (alternating baseline / put / get)
PORT = 29700


def _stream_total(size: int) -> int:
    """Bytes moved per bandwidth sample: enough to dwarf start-up, bounded for small sizes."""
    return max(64 * size, 128 << 20)


# ---------------------------------------------------------------- the plain-socket baseline

_CMD = struct.Struct("<cQQ")  # command ('p' ping-pong, 's' stream, 'q' quit), count, size


def _socket_echo(ls: socket.socket, max_size: int) -> None:
    """Runs on PE 1 in a thread: answers the baseline's ping-pongs and streams."""
    conn, _ = ls.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    cmd = bytearray(_CMD.size)
    small = bytearray(8)
    big = bytearray(max_size)
    while True:
        recv_into_exact(conn, memoryview(cmd))
        op, count, size = _CMD.unpack(cmd)
        if op == b"q":
            break
        if op == b"p":
            sv = memoryview(small)
            for _ in range(count):
                recv_into_exact(conn, sv)
                conn.sendall(small)
        else:
            view = memoryview(big)[:size]
            for _ in range(count):
                recv_into_exact(conn, view)
            conn.sendall(b"k")
    conn.close()
    ls.close()


class SocketBaseline:
    """PE 0's end of a plain TCP connection to PE 1, between the same two hosts."""

    def __init__(self, host: str, port: int) -> None:
        self.conn = socket.create_connection((host, port), timeout=60)
        self.conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def rtt_us(self, iters: int) -> float:
        msg = bytearray(8)
        mv = memoryview(msg)
        self.conn.sendall(_CMD.pack(b"p", iters + WARMUP, 8))
        for _ in range(WARMUP):
            self.conn.sendall(msg)
            recv_into_exact(self.conn, mv)
        t = time.perf_counter()
        for _ in range(iters):
            self.conn.sendall(msg)
            recv_into_exact(self.conn, mv)
        return (time.perf_counter() - t) / iters * 1e6

    def stream_gbps(self, payload: memoryview, count: int) -> float:
        ack = bytearray(1)
        self.conn.sendall(_CMD.pack(b"s", count, len(payload)))
        t = time.perf_counter()
        for _ in range(count):
            self.conn.sendall(payload)
        recv_into_exact(self.conn, memoryview(ack))
        return count * len(payload) / (time.perf_counter() - t) / 1e9

    def close(self) -> None:
        self.conn.sendall(_CMD.pack(b"q", 0, 0))
        self.conn.close()


# ---------------------------------------------------------------- the MORI worker (one PE per host)


def shmem_worker(sizes: Sequence[int], out: str) -> None:
    """Both PEs run this. Baseline and MORI samples alternate, so both see the same machine load."""
    import numpy as np

    import mori.shmem as sh
    from mori import _C

    sh.init()
    me, n = sh.my_pe(), sh.n_pes()
    if n != 2:
        raise SystemExit("the hosts benchmark runs one PE per host, two hosts")
    peer = 1 - me
    c = _C.shmem
    transport = sh.transport_name(peer)
    buf = sh.zeros(max(sizes), np.uint8)
    flag = sh.zeros(1, np.uint64)
    word = sh.zeros(1, np.uint64)
    port = sh.zeros(1, np.int64)
    local = np.ones(max(sizes), np.uint8)
    one = np.ones(1, np.uint64)
    b_addr, f_addr, w_addr = (a.__array_interface__["data"][0] for a in (buf, flag, word))
    l_addr, o_addr = local.__array_interface__["data"][0], one.__array_interface__["data"][0]

    # The baseline socket: PE 1 listens on the address its tcp transport publishes.
    echo = None
    if me == 1:
        ls = socket.socket()
        ls.bind((sh.topology()["pes"][1]["ip"], 0))
        ls.listen(1)
        sh.p(port, ls.getsockname()[1], pe=0)
        echo = threading.Thread(target=_socket_echo, args=(ls, max(sizes)), daemon=True)
        echo.start()
    sh.barrier_all()

    def timed(fn, iters: int) -> float:
        for _ in range(WARMUP):
            fn()
        t = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t) / iters * 1e6

    result: dict = {"transport": transport, "latency_us": {}, "put_gbps": {}, "get_gbps": {}, "socket": {}}
    if me == 0:
        base = SocketBaseline(sh.topology()["pes"][1]["ip"], int(port[0]))

        def put_quiet():
            c.put(b_addr, l_addr, 8, peer, False)
            c.quiet()

        ops = {
            "put8+quiet": put_quiet,
            "get8": lambda: c.get(l_addr, b_addr, 8, peer, False),
            "fetch_add8": lambda: c.atomic(w_addr, 5, 8, 1, 0, peer),
        }  # 5: fetch_add (AmoOp order)
        samples: dict[str, list[float]] = {k: [] for k in ["socket rtt", *ops]}
        for _ in range(LAT_SLICES):
            samples["socket rtt"].append(base.rtt_us(LAT_ITERS // LAT_SLICES))
            for name, fn in ops.items():
                samples[name].append(timed(fn, LAT_ITERS // LAT_SLICES))
        rtt = statistics.median(samples.pop("socket rtt"))
        result["socket"]["rtt_us"] = rtt
        result["latency_us"] = {k: statistics.median(v) for k, v in samples.items()}
        result["socket"]["stream_gbps"] = {}
        for size in sizes:
            count = _stream_total(size) // size
            sock_s, put_s, get_s = [], [], []
            payload = memoryview(local)[:size]
            for _ in range(REPEATS):
                sock_s.append(base.stream_gbps(payload, count))
                t = time.perf_counter()
                for _ in range(count):
                    c.put(b_addr, l_addr, size, peer, False)
                c.quiet()
                put_s.append(count * size / (time.perf_counter() - t) / 1e9)
                t = time.perf_counter()
                for _ in range(count):
                    c.get(l_addr, b_addr, size, peer, False)
                get_s.append(count * size / (time.perf_counter() - t) / 1e9)
            result["socket"]["stream_gbps"][str(size)] = statistics.median(sock_s)
            result["put_gbps"][str(size)] = statistics.median(put_s)
            result["get_gbps"][str(size)] = statistics.median(get_s)
        base.close()
    sh.barrier_all()
    # Ping-pong through memory: PE 0 puts i into PE 1's flag; PE 1 waits for it and puts it back.
    pp = []
    for rep in range(REPEATS):
        flag[0] = 0
        sh.barrier_all()
        t = time.perf_counter()
        for i in range(1, LAT_ITERS + 1):
            one[0] = i
            if me == 0:
                c.put(f_addr, o_addr, 8, peer, False)
            c.wait_until(f_addr, 5, i, 8, 1)  # CMP_GE, unsigned 8-byte
            if me == 1:
                c.put(f_addr, o_addr, 8, peer, False)
        pp.append((time.perf_counter() - t) / LAT_ITERS * 1e6)
        sh.barrier_all()
    # Barrier latency (both PEs) and the rate of non-fetching atomic adds (PE 0 streams, then quiet).
    bar = []
    for rep in range(REPEATS):
        sh.barrier_all()
        t = time.perf_counter()
        for _ in range(LAT_ITERS // 3):
            c.barrier_all()
        bar.append((time.perf_counter() - t) / (LAT_ITERS // 3) * 1e6)
    if me == 0:
        rates = []
        for rep in range(REPEATS):
            t = time.perf_counter()
            for _ in range(LAT_ITERS):
                c.atomic(w_addr, 4, 8, 1, 0, peer)  # 4: add (AmoOp order)
            c.quiet()
            rates.append(LAT_ITERS / (time.perf_counter() - t) / 1e6)
        result["amo_add_mops"] = statistics.median(rates)
    sh.barrier_all()
    if me == 0:
        result["latency_us"]["put8 ping-pong"] = statistics.median(pp)
        result["latency_us"]["barrier_all"] = statistics.median(bar)
        with open(out, "w") as f:
            json.dump(result, f)
    if echo is not None:
        echo.join(timeout=30)
    sh.barrier_all()
    sh.finalize()


# ---------------------------------------------------------------- orchestration


@dataclass
class _Loopback:
    """Two 'hosts' on this machine's loopback, told apart by MORI_NODE_ID."""

    name: str
    ip: str = "127.0.0.1"

    def command(self, cmd: Sequence[str]) -> list[str]:
        return [str(c) for c in cmd]

    def popen(self, cmd: Sequence[str], env: Optional[dict] = None, **kwargs) -> subprocess.Popen:
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.Popen(self.command(cmd), env=env, **kwargs)


def _wait_all(procs: list[subprocess.Popen], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        stop_processes(procs)
        raise RuntimeError(f"{what} did not finish within {timeout:.0f} s")
    bad = [p.returncode for p in procs if p.returncode != 0]
    if bad:
        raise RuntimeError(f"{what} failed (exit codes {[p.returncode for p in procs]})")


def _run_pair(hosts, sizes: Sequence[int], workdir: str, extra_env: Optional[dict] = None) -> dict:
    py = sys.executable
    size_arg = ",".join(map(str, sizes))
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(extra_env or {}))
    # One PE per host, one `mori run` per host; the socket baseline runs inside the same PEs.
    mori_out = os.path.join(workdir, "mori.json")
    secret = os.urandom(32).hex()
    heap = max(256 << 20, 2 * max(sizes) + (64 << 20))
    procs = []
    for rank, h in enumerate(hosts):
        henv = dict(env, MORI_NODE_ID=f"bench-host-{rank}", MORI_JOB_SECRET=secret, MORI_SHMEM_HEAP_SIZE=str(heap))
        cmd = [
            py,
            "-m",
            "mori.apps.cli",
            "run",
            "--nnodes",
            "2",
            "--node-rank",
            str(rank),
            "--master-addr",
            hosts[0].ip,
            "--master-port",
            str(PORT + 10),
            "-n",
            "1",
            "--",
            *worker_command("mori.apps.bench.shmem_hosts", ["shmem", "--sizes", size_arg, "--out", mori_out]),
        ]
        procs.append(h.popen(cmd, env=henv))
    _wait_all(procs, 600, "MORI shmem job")
    with open(mori_out) as f:
        ours = json.load(f)
    return ours


def build_report(runs: dict[str, dict], sizes: Sequence[int], link: str, rate: str):
    """One row per measurement, one column set per transport run (``runs``: label -> results);
    mori/socket is the first run over the socket baseline of the same job."""
    from mori.apps.bench.report import Report

    labels = list(runs)
    first = runs[labels[0]]
    base = first["socket"]
    rtt = base["rtt_us"]
    cols = [
        "op",
        "size",
        *[f"{k}_us" for k in labels],
        "socket_rtt_us",
        "mori/socket",
        *[f"{k}_GBps" for k in labels],
        "socket_GBps",
    ]
    if len(labels) == 2:
        cols.insert(cols.index("mori/socket") + 1, f"{labels[1]}/{labels[0]}")
    report = Report("shmem_hosts", cols)
    ratio = f"{labels[1]}/{labels[0]}" if len(labels) == 2 else None
    for name, us in first["latency_us"].items():
        row = {f"{k}_us": runs[k]["latency_us"][name] for k in labels}
        if ratio:
            row[ratio] = runs[labels[1]]["latency_us"][name] / us
        report.add(op=name, size="8 B", socket_rtt_us=rtt, **{"mori/socket": us / rtt}, **row)
    if "amo_add_mops" in first:
        row = {f"{k}_us": 1.0 / runs[k]["amo_add_mops"] for k in labels}
        if ratio:
            row[ratio] = row[f"{labels[1]}_us"] / row[f"{labels[0]}_us"]
        report.add(op="amo add (1/rate)", size="8 B", **row)
    for op in ("put", "get"):
        for s in sizes:
            ours_bw, sock_bw = first[f"{op}_gbps"][str(s)], base["stream_gbps"][str(s)]
            row = {f"{k}_GBps": runs[k][f"{op}_gbps"][str(s)] for k in labels}
            if ratio:
                row[ratio] = runs[labels[1]][f"{op}_gbps"][str(s)] / ours_bw
            report.add(
                op=f"{op} bandwidth",
                size=human_size(s),
                socket_GBps=sock_bw,
                **{"mori/socket": ours_bw / sock_bw},
                **row,
            )
    big = [s for s in sizes if s >= 1 << 20]
    report.meta = {
        "transports": {k: runs[k]["transport"] for k in labels},
        "transport": first["transport"],
        "link": link,
        "rate": rate or None,
        "socket_rtt_us": rtt,
        "amo_add_mops": {k: runs[k].get("amo_add_mops") for k in labels},
        "ucx_tls": os.environ.get("UCX_TLS"),
        "targets": {
            "put8+quiet <= 2 x socket rtt": first["latency_us"]["put8+quiet"] <= 2 * rtt,
            "put bandwidth >= 0.8 x socket at >= 1 MiB": all(
                first["put_gbps"][str(s)] >= 0.8 * base["stream_gbps"][str(s)] for s in big
            )
            if big
            else None,
        },
    }
    return report


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point of ``mori bench shmem --hosts 2`` (argv without the program name)."""
    p = argparse.ArgumentParser(prog="mori bench shmem --hosts 2", description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=2, help="number of hosts (only 2 is supported)")
    p.add_argument(
        "--loopback",
        action="store_true",
        help="no namespaces: two node ids on this machine's loopback (no root needed)",
    )
    p.add_argument("--rate", default="", help="shape the veth link with tc tbf, e.g. 1gbit")
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="bandwidth message sizes (e.g. 64K,1M)")
    p.add_argument(
        "--transport",
        choices=["tcp", "ucx"],
        default="tcp",
        help="ucx: also run over the ucx transport, beside tcp in the same run",
    )
    p.add_argument("--ucx-tls", default="tcp", help="UCX_TLS of the ucx run (default tcp)")
    p.add_argument("--json", default="bench-results/shmem_hosts.json", help="where to write the JSON report")
    p.add_argument("--worker", choices=["shmem"], help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    try:
        sizes = parse_list(args.sizes, "--sizes")
    except ValueError as exc:
        p.error(str(exc))
    if args.worker == "shmem":
        shmem_worker(sizes, args.out)
        return 0
    if args.hosts != 2:
        print("mori bench shmem: --hosts must be 2", file=sys.stderr)
        return 2
    plan = {"tcp": {"MORI_NET_TRANSPORT": "tcp"}}
    if args.transport == "ucx":
        plan["ucx"] = {"MORI_NET_TRANSPORT": "ucx", "UCX_TLS": args.ucx_tls}
    runs: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="mori-bench-") as workdir:
        if args.loopback:
            link = "loopback (two node ids, one machine)"
            for label, env in plan.items():
                runs[label] = _run_pair([_Loopback("a"), _Loopback("b")], sizes, workdir, env)
        else:
            from mori.apps.netns import VethHosts, unavailable_reason

            reason = unavailable_reason()
            if reason:
                print(f"mori bench shmem --hosts 2: {reason}; run as root or pass --loopback", file=sys.stderr)
                return 2
            link = "veth between two network namespaces" + (f", tbf {args.rate}" if args.rate else "")
            with VethHosts(subnet="10.204.0") as veth:
                if args.rate:
                    veth.limit_rate(args.rate)
                for label, env in plan.items():
                    runs[label] = _run_pair(veth.hosts, sizes, workdir, env)
    for label, ours in runs.items():
        if ours["transport"] != label:
            raise RuntimeError(f"the {label} run went over {ours['transport']}")
    report = build_report(runs, sizes, link, args.rate)
    if args.transport == "ucx":
        report.meta["ucx_tls"] = args.ucx_tls
    report.show(
        f"mori bench shmem --hosts 2: {link}, transports {', '.join(runs)}"
        + (f" (UCX_TLS={args.ucx_tls})" if args.transport == "ucx" else "")
        + " (latency: lower is better; bandwidth: higher)"
    )
    for name, ok in report.meta["targets"].items():
        print(f"target {name}: {'n/a' if ok is None else 'met' if ok else 'MISSED'}")
    print("wrote", report.save(args.json))
    return 0


if __name__ == "__main__":
    sys.exit(main())
