# SPDX-License-Identifier: MIT
"""``mori bench io``: MORI-IO point-to-point transfers between two processes, against the
baselines measured in the same run with the same sizes and batches.

    mori bench io                      # two processes on this host
    mori bench io --hosts netns        # two network namespaces joined by veth (needs root)
    mori bench io --only-baselines     # the baselines alone (no MORI-IO rows)
    mori bench io --latency-only       # 8 B transfers, p50/p99 per engine

Rows use MORI's benchmark columns (MsgSize (B), BatchSize, TotalSize (MB), Max BW (GB/s),
Avg BW (GB/s), Min Lat (us), Avg Lat (us)), for read and write, MORI-IO's session and engine
API, and each batch size: one transfer of BatchSize messages (strided, so nothing merges) is
posted and waited for, ``iters`` times; Max BW comes from the fastest transfer, Avg from the
mean. Every row is verified (destination overwritten first, then hashed on both sides).

Engines, each in its own pair of processes, one after the other:
  mori              MORI-IO, the backend it picks itself (same host: its shared-memory path)
  mori-tcp          MORI-IO with its same-host path off (MORI_IO_DIRECT=0): tcp over loopback
                    (across namespaces "mori" is tcp: each namespace gets its own MORI_NODE_ID)
  mori-ucx-tcp      MORI-IO's RDMA backend on UCX, forced (MORI_IO_RDMA_TRANSPORT=ucx), UCX_TLS=tcp,self
  mori-ucx-sm       the same with UCX_TLS=sm,self (one host only)
  socket            one plain TCP connection, sendmsg/recvmsg_into on the buffers (the ceiling)
  socket-serial     the same connection moving a batch one message at a time (a round trip each)
  memcpy            numpy copies in one process (the same-host ceiling)
  mooncake-tcp      Mooncake Transfer Engine, tcp transport, P2PHANDSHAKE (its writes complete once
                    the initiator has sent the bytes, with no answer from the target: not a round
                    trip, unlike every other engine's write here)
  nixl-ucx-tcp      NIXL, UCX backend, UCX_TLS=tcp,self
  nixl-ucx-default  NIXL, UCX backend, UCX's own choice of transports
  nixl-ucx-sm       NIXL, UCX backend, UCX_TLS=sm,self (one host only)
UCX_NET_DEVICES is the interface under test (lo, or each namespace's veth end). Mooncake and
NIXL are optional: without them their rows are reported as skipped (scripts/bench-io-setup.sh
installs them). Ratios ("x socket", ...) are Max BW over the baseline's Max BW for the same
op, batch and size (the JSON also has the ratios of Avg BW).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from mori.apps.bench.processes import stop as stop_processes
from mori.apps.bench.sizes import human_size, parse_list, parse_size

MIB = 1 << 20
DEFAULT_SIZES = "8,4K,64K,1M,16M,64M"
ALL_BASELINES = ("socket", "socket-serial", "memcpy", "mooncake-tcp", "nixl-ucx-tcp", "nixl-ucx-default", "nixl-ucx-sm")
NETNS_BASELINES = (
    "socket",
    "socket-serial",
    "mooncake-tcp",
    "nixl-ucx-tcp",
    "nixl-ucx-default",
)  # memcpy, sm: same-host only
# ratio column -> the engine it compares against
RATIOS = {
    "x socket": "socket",
    "x sock-1by1": "socket-serial",
    "x mooncake": "mooncake-tcp",
    "x nixl-tcp": "nixl-ucx-tcp",
    "x nixl-dflt": "nixl-ucx-default",
    "x nixl-sm": "nixl-ucx-sm",
    "x memcpy": "memcpy",
}
MORI_KINDS = ("auto", "tcp", "ucx-tcp", "ucx-sm")
UCX_TLS = {"ucx-tcp": "tcp,self", "ucx-sm": "sm,self"}  # the same UCX_TLS as the NIXL rows
MORI_COLUMNS = [
    "MsgSize (B)",
    "BatchSize",
    "TotalSize (MB)",
    "Max BW (GB/s)",
    "Avg BW (GB/s)",
    "Min Lat (us)",
    "Avg Lat (us)",
]


@dataclass
class EngineRun:
    """One engine configuration: which driver, and the environment of its two processes."""

    name: str
    driver: str
    describe: str
    env: Callable[[object, str], dict] = lambda host, role: {}
    same_host_path: bool = False  # MORI-IO left to pick its own path on one host
    tcp: bool = False  # expected to run over tcp
    ucx: bool = False  # MORI-IO's RDMA backend on UCX (needs a loadable UCX)


@dataclass
class _LocalHost:
    """This machine, as one end of a pair (the same shape as apps/netns.Host)."""

    name: str
    ip: str = "127.0.0.1"
    ifname: str = "lo"

    def popen(self, cmd: Sequence[str], env: Optional[dict] = None, **kwargs) -> subprocess.Popen:
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.Popen(list(map(str, cmd)), env=env, **kwargs)


def engine_runs(args: argparse.Namespace) -> list[EngineRun]:
    runs = []
    if not args.only_baselines:
        for kind in args.mori:
            if kind == "auto":
                runs.append(EngineRun("mori", "mori", "MORI-IO, backend of its choice", same_host_path=True))
            elif kind in UCX_TLS:

                def ucx_env(host, role, tls=UCX_TLS[kind], netns=args.hosts != "local"):
                    env = {
                        "MORI_IO_RDMA_TRANSPORT": "ucx",
                        "UCX_TLS": tls,
                        "UCX_NET_DEVICES": host.ifname,
                        "MORI_IO_DIRECT": "0",
                    }
                    if netns:
                        env["MORI_NODE_ID"] = f"mori-bench-io-{host.name}"
                    return env

                runs.append(
                    EngineRun(
                        f"mori-{kind}",
                        "mori",
                        f"MORI-IO RDMA backend on UCX (forced), UCX_TLS={UCX_TLS[kind]}",
                        env=ucx_env,
                        ucx=True,
                    )
                )
            else:
                if args.hosts == "local":
                    runs.append(
                        EngineRun(
                            "mori-tcp",
                            "mori",
                            "MORI-IO, same-host path off (MORI_IO_DIRECT=0): tcp",
                            env=lambda host, role: {"MORI_IO_DIRECT": "0"},
                            tcp=True,
                        )
                    )
                else:  # the namespaces share one kernel: without their own node ids they are one node
                    runs.append(
                        EngineRun(
                            "mori",
                            "mori",
                            "MORI-IO, one node id per namespace (tcp)",
                            env=lambda host, role: {"MORI_NODE_ID": f"mori-bench-io-{host.name}"},
                            tcp=True,
                        )
                    )
    for name in args.baselines:
        if name == "socket":
            runs.append(EngineRun("socket", "socket", "plain TCP socket, sendmsg/recvmsg_into"))
        elif name == "socket-serial":
            runs.append(
                EngineRun(
                    "socket-serial",
                    "socket-serial",
                    "plain TCP socket, a batch sent one message at a time (a round trip each)",
                )
            )
        elif name == "memcpy":
            runs.append(EngineRun("memcpy", "memcpy", "numpy copyto in one process"))
        elif name == "mooncake-tcp":
            runs.append(
                EngineRun(
                    "mooncake-tcp",
                    "mooncake",
                    "Mooncake TE, tcp, P2PHANDSHAKE (writes complete on the local send, no answer from the target)",
                )
            )
        elif name == "nixl-ucx-tcp":
            runs.append(
                EngineRun(
                    "nixl-ucx-tcp",
                    "nixl",
                    "NIXL UCX, UCX_TLS=tcp,self",
                    env=lambda host, role: {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": host.ifname},
                )
            )
        elif name == "nixl-ucx-sm":
            runs.append(
                EngineRun(
                    "nixl-ucx-sm",
                    "nixl",
                    "NIXL UCX, UCX_TLS=sm,self",
                    env=lambda host, role: {"UCX_TLS": "sm,self", "UCX_NET_DEVICES": host.ifname},
                )
            )
        elif name == "nixl-ucx-default":
            runs.append(
                EngineRun(
                    "nixl-ucx-default",
                    "nixl",
                    "NIXL UCX, UCX default transports",
                    env=lambda host, role: {"UCX_NET_DEVICES": host.ifname},
                )
            )
    return runs


def unavailable(run: EngineRun) -> Optional[str]:
    if run.driver == "mori":
        from mori.apps.bench.io_mori import unavailable as mori_unavailable

        why = mori_unavailable()
        if why is None and run.ucx:
            from mori._C import io as _io

            report = _io.ucx_report()
            why = None if report["loaded"] else f"UCX is not available: {report['why']}"
        return why
    from mori.apps.bench.io_baselines import unavailable as baseline_unavailable

    return baseline_unavailable(run.driver)


def _tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def _wait_ready(proc: subprocess.Popen, path: str, timeout: float) -> int:
    """The control port the target writes to ``path`` once it is ready."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if proc.poll() is not None:
            raise RuntimeError(f"the target process exited with code {proc.returncode} before it was ready")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the target process was not ready within {timeout:.0f} s")
        time.sleep(0.02)
    with open(path) as f:
        return int(f.read())


def run_pair(run: EngineRun, hosts: Sequence, plan_path: str, workdir: str, buf_bytes: int, timeout: float) -> dict:
    """Start the target and the initiator of ``run``, wait for them, return the initiator's results
    (or ``{"error": ...}``)."""
    from mori.apps.bench.io_baselines import BASELINES

    target_host, init_host = hosts
    base_env = dict(os.environ, PYTHONUNBUFFERED="1")
    peer = [
        sys.executable,
        "-m",
        "mori.apps.bench.io_peer",
        "--engine",
        run.driver,
        "--buf-bytes",
        str(buf_bytes),
        "--timeout",
        str(min(timeout, 120)),
    ]
    out = os.path.join(workdir, f"{run.name}.json")
    if os.path.exists(out):
        os.remove(out)
    logs = {r: os.path.join(workdir, f"{run.name}-{r}.log") for r in ("target", "initiator")}
    procs: list[subprocess.Popen] = []
    needs_target = run.driver == "mori" or BASELINES[run.driver].needs_target
    try:
        connect = ""
        if needs_target:
            ready = os.path.join(workdir, f"{run.name}.port")
            if os.path.exists(ready):  # from an earlier pass
                os.remove(ready)
            with open(logs["target"], "wb") as log:
                tgt = target_host.popen(
                    [*peer, "--role", "target", "--host", target_host.ip, "--ready-file", ready],
                    env={**base_env, **run.env(target_host, "target")},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            procs.append(tgt)
            connect = f"{target_host.ip}:{_wait_ready(tgt, ready, min(timeout, 120))}"
        with open(logs["initiator"], "wb") as log:
            ini = init_host.popen(
                [
                    *peer,
                    "--role",
                    "initiator",
                    "--host",
                    init_host.ip,
                    "--connect",
                    connect,
                    "--plan",
                    plan_path,
                    "--out",
                    out,
                ],
                env={**base_env, **run.env(init_host, "initiator")},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        procs.append(ini)
        deadline = time.monotonic() + timeout
        for p in reversed(procs):
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        stop_processes(procs)
        return {"error": f"did not finish within {timeout:.0f} s", "log": _tail(logs["initiator"])}
    except RuntimeError as exc:
        stop_processes(procs)
        return {"error": str(exc), "log": _tail(logs["target"])}
    if os.path.exists(out):
        with open(out) as f:
            res = json.load(f)
    else:
        res = {"error": f"exit codes {[p.returncode for p in procs]}"}
    if "error" in res:
        res["log"] = _tail(logs["initiator"]) + _tail(logs["target"])
    elif any(p.returncode for p in procs):
        res = {
            "error": f"exit codes {[p.returncode for p in procs]}",
            "log": _tail(logs["initiator"]) + _tail(logs["target"]),
        }
    return res


def keep_best(best: dict, rows: list[dict], key: Sequence[str], score: Callable[[dict], float]) -> None:
    """Merge one pass's rows into ``best``: per key, the row of the pass that scored highest."""
    for r in rows:
        k = tuple(r[c] for c in key)
        r["passes"] = best[k]["passes"] + 1 if k in best else 1
        if k not in best or score(r) > score(best[k]):
            best[k] = r
        else:
            best[k]["passes"] = r["passes"]


def add_ratios(rows: list[dict], same_host: bool) -> None:
    """``x <baseline>`` = Max BW / the baseline's Max BW at the same op, batch and size (the fastest
    transfer of each: on a shared machine the best of N is the figure that repeats); the same
    ratio of Avg BW goes to ``x <baseline> avg``."""
    index: dict = {}
    for r in rows:
        index[(r["engine"], r["op"], r["BatchSize"], r["MsgSize (B)"])] = r
    for r in rows:
        for col, ref_name in RATIOS.items():
            if ref_name == "memcpy" and not same_host:
                continue
            ref = index.get((ref_name, r["op"], r["BatchSize"], r["MsgSize (B)"]))
            ok = ref is not None and r["engine"] != ref_name
            r[col] = r["Max BW (GB/s)"] / ref["Max BW (GB/s)"] if ok else None
            r[f"{col} avg"] = r["Avg BW (GB/s)"] / ref["Avg BW (GB/s)"] if ok else None


def latency_ratios(lat: list[dict]) -> None:
    sock = {r["op"]: r for r in lat if r["engine"] == "socket"}
    for r in lat:
        r["p99/p50"] = r["p99_us"] / r["p50_us"]
        ref = sock.get(r["op"])
        r["p50 x socket"] = r["p50_us"] / ref["p50_us"] if ref and r["engine"] != "socket" else None


def check_targets(rows: list[dict], lat: list[dict], runs: Sequence[EngineRun]) -> dict:
    """The targets of issue 32 that this run's rows can decide (session API)."""
    by_name = {r.name: r for r in runs}
    session = [r for r in rows if r["api"] in ("session", "-")]
    single = [r for r in session if r["BatchSize"] == 1]

    def verdict(sel: list[dict], col: str, bound: float) -> Optional[bool]:
        vals = [r[col] for r in sel if r.get(col) is not None]
        return all(v >= bound for v in vals) if vals else None

    def is_tcp(r: dict) -> bool:
        return bool(by_name.get(r["engine"])) and by_name[r["engine"]].tcp

    tcp = [r for r in single if is_tcp(r)]
    tcp_small_batches = [r for r in session if is_tcp(r) and r["BatchSize"] >= 128 and r["MsgSize (B)"] < 64 << 10]
    shm = [r for r in single if by_name.get(r["engine"]) and by_name[r["engine"]].same_host_path]
    out = {
        "tcp backend >= 0.9 x socket at every size (batch 1)": verdict(tcp, "x socket", 0.9),
        "tcp batch of >= 128 small messages >= 1.5 x the socket one by one": verdict(
            tcp_small_batches, "x sock-1by1", 1.5
        ),
        "tcp backend >= 2 x Mooncake TCP at >= 64 KiB": verdict(
            [r for r in tcp if r["MsgSize (B)"] >= 64 << 10], "x mooncake", 2.0
        ),
        "tcp backend >= 2 x NIXL UCX-tcp at >= 64 KiB": verdict(
            [r for r in tcp if r["MsgSize (B)"] >= 64 << 10], "x nixl-tcp", 2.0
        ),
        "same-host backend >= NIXL default at every size": verdict(shm, "x nixl-dflt", 1.0),
        "same-host backend >= 0.8 x memcpy at >= 1 MiB": verdict(
            [r for r in shm if r["MsgSize (B)"] >= MIB], "x memcpy", 0.8
        ),
    }
    tcp_write = [r for r in lat if by_name.get(r["engine"]) and by_name[r["engine"]].tcp and r["op"] == "write"]
    if tcp_write and tcp_write[0].get("p50 x socket") is not None:
        out["tcp 8 B write p50 <= 1.2 x socket round trip"] = tcp_write[0]["p50 x socket"] <= 1.2
    if tcp_write:
        out["tcp 8 B write p99 <= 3 x p50"] = tcp_write[0]["p99/p50"] <= 3.0
    return out


def _show(report_cls, name: str, columns: list[str], rows: list[dict], title: str) -> None:
    cols = [c for c in columns if any(r.get(c) is not None for r in rows)]
    rep = report_cls(name, cols)
    rep.rows = rows
    rep.show(title)


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="mori bench io", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--hosts",
        choices=["local", "netns"],
        default="local",
        help="two processes on this host, or in two network namespaces joined by veth (root)",
    )
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help=f"message sizes (default {DEFAULT_SIZES})")
    parser.add_argument("--batches", default="1,128", help="batch sizes (messages per transfer)")
    parser.add_argument("--ops", default="write,read", help="write (local to remote), read (remote to local)")
    parser.add_argument("--apis", default="session,engine", help="MORI-IO call styles to measure")
    parser.add_argument(
        "--mori",
        default=None,
        help="MORI-IO runs: auto (its own path choice), tcp (node ids apart), ucx-tcp and "
        "ucx-sm (the RDMA backend forced onto UCX over UCX_TLS=tcp,self / sm,self); "
        "default auto,tcp,ucx-tcp,ucx-sm on one host, tcp,ucx-tcp across namespaces",
    )
    parser.add_argument(
        "--baselines",
        default=None,
        help=f"comma list from {','.join(ALL_BASELINES)}, or none (default: all; across namespaces all but memcpy)",
    )
    parser.add_argument("--only-baselines", action="store_true", help="no MORI-IO rows")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="passes over all engines; each row keeps the pass with the best Max BW (8 B latency: "
        "the best p50), so a burst of load from elsewhere hits every engine alike",
    )
    parser.add_argument("--iters", type=int, default=128, help="most timed transfers per row")
    parser.add_argument("--budget", type=float, default=0.2, help="rough seconds per row")
    parser.add_argument(
        "--max-buffer", default="256M", help="registered buffer per process; rows whose batch does not fit are left out"
    )
    parser.add_argument("--contiguous", action="store_true", help="batch messages back to back (they may merge)")
    parser.add_argument("--no-latency", action="store_true", help="skip the 8 B latency table")
    parser.add_argument("--latency-only", action="store_true", help="only the 8 B latency table")
    parser.add_argument("--lat-iters", type=int, default=2000, help="8 B transfers per latency figure")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per engine before it counts as hung")
    parser.add_argument("--json", default=None, help="where to write the JSON (default bench-results/io-HOSTS.json)")
    args = parser.parse_args(argv)
    try:
        sizes = parse_list(args.sizes, "--sizes")
        batches = parse_list(args.batches, "--batches")
        max_buffer = parse_size(args.max_buffer, "--max-buffer")
    except ValueError as exc:
        parser.error(str(exc))
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if not sizes or not batches or min(batches) < 1:
        parser.error("--sizes and --batches need at least one positive value each")
    ops = [o for o in args.ops.split(",") if o]
    if not ops or set(ops) - {"read", "write"}:
        parser.error("--ops takes write and/or read")
    apis = [a for a in args.apis.split(",") if a]
    if not apis or set(apis) - {"session", "engine"}:
        parser.error("--apis takes session and/or engine")
    if args.baselines is None:
        args.baselines = ",".join(ALL_BASELINES if args.hosts == "local" else NETNS_BASELINES)
    args.baselines = [] if args.baselines == "none" else [b for b in args.baselines.split(",") if b]
    if set(args.baselines) - set(ALL_BASELINES):
        parser.error(
            f"--baselines: unknown {sorted(set(args.baselines) - set(ALL_BASELINES))}; "
            f"choose from {','.join(ALL_BASELINES)} or none"
        )
    if args.mori is None:
        args.mori = "auto,tcp,ucx-tcp,ucx-sm" if args.hosts == "local" else "tcp,ucx-tcp"
    args.mori = [m for m in args.mori.split(",") if m]
    if set(args.mori) - set(MORI_KINDS):
        parser.error(f"--mori takes {', '.join(MORI_KINDS)}")
    if args.hosts != "local" and "ucx-sm" in args.mori:
        parser.error("--mori ucx-sm: shared memory does not join two hosts (use ucx-tcp)")
    if args.json is None:
        args.json = f"bench-results/io-{args.hosts}.json"

    from mori.apps.bench.report import Report

    buf_bytes = max(max_buffer, max(sizes))
    plan = {
        "sizes": sizes,
        "batches": batches,
        "ops": ops,
        "apis": apis,
        "iters": args.iters,
        "budget": args.budget,
        "contiguous": args.contiguous,
        "bandwidth": not args.latency_only,
        "latency": not args.no_latency,
        "lat_iters": args.lat_iters,
    }
    runs = engine_runs(args)
    engines: dict = {}
    best_rows: dict = {}
    best_lat: dict = {}
    with tempfile.TemporaryDirectory(prefix="mori-bench-io-") as workdir:
        plan_path = os.path.join(workdir, "plan.json")
        with open(plan_path, "w") as f:
            json.dump(plan, f)
        veth = None
        if args.hosts == "netns":
            from mori.apps.netns import VethHosts, unavailable_reason

            reason = unavailable_reason()
            if reason:
                print(f"mori bench io --hosts netns: {reason}", file=sys.stderr)
                return 2
            veth = VethHosts(subnet="10.205.0").__enter__()
            hosts = veth.hosts
            link = f"veth between two network namespaces ({hosts[0].ip} target, {hosts[1].ip} initiator)"
        else:
            hosts = [_LocalHost("target"), _LocalHost("initiator")]
            link = "loopback, two processes on one host"
        try:
            for rnd in range(args.repeats):
                for run in runs:
                    if engines.get(run.name, {}).get("status") in ("skipped", "failed"):
                        continue
                    reason = unavailable(run)
                    if reason:
                        engines[run.name] = {"status": "skipped", "reason": reason, "describe": run.describe}
                        print(f"{run.name}: skipped ({reason})", flush=True)
                        continue
                    print(f"{run.name}: {run.describe} (pass {rnd + 1} of {args.repeats}) ...", flush=True)
                    t0 = time.monotonic()
                    res = run_pair(run, hosts, plan_path, workdir, buf_bytes, args.timeout)
                    if "error" in res:
                        engines[run.name] = {"status": "failed", "reason": res["error"], "describe": run.describe}
                        print(f"{run.name}: FAILED: {res['error']}\n{res.get('log', '')}", file=sys.stderr, flush=True)
                        continue
                    engines[run.name] = {
                        "status": "ok",
                        "backend": res["backend"],
                        "describe": run.describe,
                        "seconds": round(time.monotonic() - t0, 1),
                        "env": {
                            k: v for k, v in run.env(hosts[1], "initiator").items() if not k.startswith("MORI_NODE_ID")
                        },
                    }
                    for r in res["rows"] + res["latency"]:
                        r["engine"] = run.name
                    keep_best(
                        best_rows,
                        res["rows"],
                        ("engine", "op", "api", "BatchSize", "MsgSize (B)"),
                        lambda r: r["Max BW (GB/s)"],
                    )
                    keep_best(best_lat, res["latency"], ("engine", "op", "api"), lambda r: -r["p50_us"])
        finally:
            if veth is not None:
                veth.__exit__(None, None, None)
    rows = [r for r in best_rows.values() if engines[r["engine"]]["status"] == "ok"]
    lat = [r for r in best_lat.values() if engines[r["engine"]]["status"] == "ok"]
    add_ratios(rows, same_host=args.hosts == "local")
    latency_ratios(lat)
    ratio_cols = list(RATIOS)
    for run in runs:
        mine = [r for r in rows if r["engine"] == run.name]
        if mine:
            backend = engines[run.name].get("backend")
            _show(
                Report,
                run.name,
                ["op", "api", *MORI_COLUMNS, *ratio_cols],
                mine,
                f"{run.name}: {run.describe}" + (f" (backend {backend})" if backend else "") + f"; {link}",
            )
    if lat:
        _show(
            Report,
            "io-latency",
            ["engine", "backend", "op", "api", "p50_us", "p99_us", "max_us", "mean_us", "p99/p50", "p50 x socket"],
            lat,
            f"8 B transfers, one at a time ({args.lat_iters} each); {link}",
        )
    targets = check_targets(rows, lat, runs)
    for name, ok in targets.items():
        print(f"target {name}: {'n/a (not measured)' if ok is None else 'met' if ok else 'MISSED'}")
    for name, e in engines.items():
        if e["status"] != "ok":
            print(f"{name}: {e['status']}: {e['reason']}")
    report = Report(f"io-{args.hosts}", ["engine", "op", "api", *MORI_COLUMNS, *ratio_cols])
    report.rows = rows
    report.meta = {
        "hosts": args.hosts,
        "repeats": args.repeats,
        "link": link,
        "plan": plan,
        "engines": engines,
        "latency": lat,
        "targets": targets,
        "buffer_bytes": buf_bytes,
        "sizes": [human_size(s) for s in sizes],
        "method": "per row: one warm-up, then up to `iters` transfers of BatchSize messages, each posted "
        "and waited for; Max BW from the fastest, Avg BW from the mean; ratios are Max BW over "
        "the baseline's Max BW at the same op, batch and size ('... avg': of Avg BW)",
    }
    print("wrote", report.save(args.json))
    failed_mori = [n for n, e in engines.items() if n.startswith("mori") and e["status"] == "failed"]
    return 1 if failed_mori else 0


if __name__ == "__main__":
    sys.exit(main())
