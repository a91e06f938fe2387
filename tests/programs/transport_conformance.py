# SPDX-License-Identifier: MIT
"""What every transport must do, run on every PE of one job (tests/transports/test_conformance.py,
test_between_hosts.py).

    mori run -n N transport_conformance.py TRANSPORT [--endpoint REGEX] [--stress ROUNDS] [--busy]
                                                     [--pes-per-host K --ips IP0,IP1,...]

TRANSPORT is the transport expected between distinct PEs (shm, tcp, ucx), or with K, between
PEs of different hosts (PE p is on host p // K; PEs of one host use shm); REGEX is what each
of those pairs' endpoint description must match, IPs the address each host's PEs publish.

One init runs every case, each reported as one JSON line per PE (cases.py): the pair matrix,
the endpoints, the addresses, MORI's thread names, the shmem matrix (rma, atomics, signal,
heap, errors), chunked transfers up to 3 MiB (stress), and one-sided operations served while
the target computes (busy).
"""

from __future__ import annotations

import argparse
import os
import re

import mori.shmem as sh
from busy_target import serve_while_computing
from cases import run_cases
from mori import _C
from shmem_suite import suite_cases
from tcp_stress import stress


def check_matrix(me: int, n: int, per_host: int, transport: str) -> None:
    got = [sh.transport_name(pe) for pe in range(n)]
    want = ["shm" if pe == me or (per_host < n and pe // per_host == me // per_host) else transport for pe in range(n)]
    assert got == want, f"PE {me} reaches PEs 0..{n - 1} over {got}, expected {want}"


def check_endpoints(me: int, n: int, per_host: int, pattern: str) -> None:
    for pe in range(n):
        if pe != me and (per_host == n or pe // per_host != me // per_host):
            ep = _C.shmem.transport_endpoint(pe)
            assert re.search(pattern, ep), f"PE {me}'s endpoint to PE {pe} is {ep!r}, expected /{pattern}/"


def check_addresses(me: int, per_host: int, ips: list[str]) -> None:
    """Each PE publishes its own host's address."""
    for p in sh.topology()["pes"]:
        assert p["ip"] == ips[p["pe"] // per_host], f"PE {me} sees PE {p['pe']} at {p['ip']}, expected {ips}"


def check_thread_names(me: int, transport: str) -> None:
    """A profile (perf sched, top -H) must tell MORI's threads from the application's."""
    names = sorted({open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")})
    if transport == "ucx":
        assert "mori-ucx" in names, f"PE {me} has no mori-ucx progress thread: {names}"
    # Every other thread is the interpreter's own, MORI's, or UCX's async thread.
    assert all(t.startswith(("mori-", "python")) or t == "async" for t in names), f"PE {me} threads: {names}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("transport", choices=["shm", "tcp", "ucx"])
    ap.add_argument("--endpoint", help="regex every remote pair's endpoint description must match")
    ap.add_argument("--stress", type=int, default=0, help="rounds of chunked transfers (0: none)")
    ap.add_argument("--busy", action="store_true", help="operations served while the target computes")
    ap.add_argument("--pes-per-host", type=int, default=0, help="PEs of each host (0: one host)")
    ap.add_argument("--ips", default="", help="the address of each host, comma-separated")
    args = ap.parse_args()
    sh.init()
    me, n = sh.my_pe(), sh.n_pes()
    per_host = args.pes_per_host or n
    cases = [("matrix", lambda: check_matrix(me, n, per_host, args.transport))]
    if args.endpoint is not None:
        cases.append(("endpoint", lambda: check_endpoints(me, n, per_host, args.endpoint)))
    if args.ips:
        cases.append(("addresses", lambda: check_addresses(me, per_host, args.ips.split(","))))
    cases.append(("threads", lambda: check_thread_names(me, args.transport)))
    cases += suite_cases(me, n, quick=True)
    if args.stress:
        cases.append(("stress", lambda: stress(args.stress, None)))  # the matrix case checked the transports
    if args.busy:
        cases.append(("busy", lambda: serve_while_computing(args.transport)))
    run_cases(me, cases)
    sh.finalize()


if __name__ == "__main__":
    main()
