# SPDX-License-Identifier: MIT
"""The ``mori`` command: run, info, bench."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence


def _cmd_run(args: argparse.Namespace) -> int:
    from mori.apps.launcher import LaunchConfig, launch

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    cfg = LaunchConfig(
        nproc=args.nproc,
        command=command,
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        master_addr=args.master_addr,
        master_port=args.master_port,
        secret_file=args.secret_file,
        socket_ifname=args.socket_ifname,
        prefix_output=not args.no_prefix,
    )
    try:
        return launch(cfg)
    except ValueError as exc:
        print(f"mori run: {exc}", file=sys.stderr)
        return 2


def _cmd_info(args: argparse.Namespace) -> int:
    import mori
    from mori import _C

    if args.io:
        from mori.io.engine import probe_backends

        print("MORI-IO backend per memory pair on this machine:")
        for r in probe_backends():
            ok = {True: "ok", False: "FAILED", None: "-"}[r["works"]]
            print(f"  {r['pair']:<28} {r['backend']:<9} {ok:<7} {r['message']}")
        return 0
    if args.env:
        _print_env_table(_C.core.env_table())
        return 0
    import mori.shmem as sh

    sh.shmem_init()
    try:
        topo = sh.topology()
        matrix = [sh.transport_name(pe) for pe in range(sh.n_pes())]
        # Where each pair's transport goes: tcp's peer address, ucx's UCX transports/devices.
        endpoints = [_C.shmem.transport_endpoint(pe) for pe in range(sh.n_pes())]
        info = {
            "version": mori.__version__,
            "pe": sh.my_pe(),
            "n_pes": sh.n_pes(),
            "bootstrap": _C.shmem.bootstrap_name(),
            "heap_bytes": _C.shmem.heap_size(),
            "local_rank": topo["local_rank"],
            "local_size": topo["local_size"],
            "num_nodes": topo["num_nodes"],
            "transports": matrix,
            "endpoints": endpoints,
            "pes": topo["pes"],
        }
        blobs = _gather_json(info)
        if sh.my_pe() == 0:
            if args.json:
                print(json.dumps(blobs, indent=1))
            else:
                print(
                    f"MORI {mori.__version__}: {sh.n_pes()} PEs on {topo['num_nodes']} node(s), "
                    f"bootstrap {info['bootstrap']}, heap {_C.core.human_bytes(info['heap_bytes'])} per PE"
                )
                print(f"UMBP master gRPC server: {_umbp_grpc('UMBP_MASTER_SERVER')}")
                print(
                    f"UMBP worker gRPC: peer server {_umbp_grpc('UMBP_PEER_SERVER')}, "
                    f"client {_umbp_grpc('UMBP_GRPC_CLIENT')}"
                )
                print(f"UMBP calls the grpc++ servers answer in C++: {_umbp_native()}")
                print("transport from PE (row) to PE (column):")
                print("      " + " ".join(f"{pe:>5}" for pe in range(sh.n_pes())))
                for b in blobs:
                    print(f"{b['pe']:>5} " + " ".join(f"{t:>5}" for t in b["transports"]))
                for b in blobs:
                    for pe, ep in enumerate(b.get("endpoints", [])):
                        if b["transports"][pe] == "ucx":
                            print(f"  PE {b['pe']} -> PE {pe}: {ep}")
                for p in topo["pes"]:
                    print(
                        f"  PE {p['pe']}: node {p['node']} ({p['hostname']}), local rank {p['local_rank']}, "
                        f"pid {p['pid']}, ip {p['ip']}"
                    )
    finally:
        sh.shmem_finalize()
    return 0


def _umbp_grpc(setting_name: str) -> str:
    """Which gRPC implementation a UMBP service or client started here would run (the setting
    ``setting_name`` and the build)."""
    try:
        from mori.umbp.distributed.grpc_servers import SERVER_NAMES, server_kind

        return SERVER_NAMES[server_kind(None, setting_name)]
    except Exception as exc:  # noqa: BLE001 - info reports the reason instead of failing
        return f"none ({exc})"


def _umbp_native() -> str:
    """Which UMBP calls the grpc++ servers of this build answer without Python."""
    try:
        from mori.umbp.distributed.grpc_servers import cpp_server

        mod = cpp_server()
    except Exception as exc:  # noqa: BLE001 - info reports the reason instead of failing
        return f"none ({exc})"
    if mod is None:
        return "none (no grpc++ in this build)"
    if not mod.HAVE_NATIVE_ROUTES:
        return "none (no protoc/libprotobuf in this build)"
    redis = "and over Redis" if mod.HAVE_NATIVE_REDIS else "not over Redis (no hiredis in this build)"
    return (
        f"the master's BatchRouteGet, RouteGet, BatchLookup, BatchRoutePut in memory {redis}; "
        "a peer's pulled puts (BatchAllocateSlots)"
    )


def _print_env_table(rows: list[dict]) -> None:
    """The settings table grouped by category; ``*`` marks a variable set in this environment,
    ``alias`` names another program's variable read when MORI's is unset (``<-`` when it gave the value)."""
    categories: dict[str, list[dict]] = {}
    for row in rows:
        categories.setdefault(row["category"], []).append(row)
    for category, members in categories.items():
        print(f"[{category}]")
        for row in members:
            mark = "*" if row["is_set"] else " "
            alias = ""
            if row["alias"]:
                alias = f", alias {row['alias']}" + (" <-" if row["set_by_alias"] else "")
            print(
                f"{mark} {row['name']:<28} {row['value']:<10} ({row['type']}, default {row['default']}{alias}) "
                f"{row['description']}"
            )


def _gather_json(obj: dict) -> list[dict]:
    """Gather a JSON-able dict from every PE to every PE through the symmetric heap."""
    import numpy as np

    import mori.shmem as sh

    raw = json.dumps(obj).encode()
    n = sh.n_pes()
    size = np.zeros(1, dtype=np.int64)
    sizes = sh.zeros(n, dtype=np.int64)
    size[0] = len(raw)
    for pe in range(n):
        sh.put(sizes[sh.my_pe() : sh.my_pe() + 1], size, pe)
    sh.barrier_all()
    cap = int(sizes.max())
    board = sh.zeros((n, cap), dtype=np.uint8)
    mine = np.frombuffer(raw, dtype=np.uint8)
    for pe in range(n):
        sh.put(board[sh.my_pe(), : len(raw)], mine, pe)
    sh.barrier_all()
    out = [json.loads(bytes(board[pe, : sizes[pe]])) for pe in range(n)]
    sh.barrier_all()
    sh.free(board)
    sh.free(sizes)
    return out


def _cmd_umbp_server(args: argparse.Namespace) -> int:
    from mori.umbp.server import options_from_args, serve

    return serve(options_from_args(args))


def _cmd_umbp_master(args: argparse.Namespace, rest: list[str]) -> int:
    from mori.umbp.distributed.master_server import main as master_main

    return master_main(rest)


def _cmd_bench(args: argparse.Namespace, rest: list[str], parser: argparse.ArgumentParser) -> int:
    from mori.apps.bench import main as bench_main

    if args.what is None:
        parser.parse_args(["bench", "--help"])  # prints the benchmarks and exits
    return bench_main([args.what] + rest)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mori", description="MORI command line")
    sub = parser.add_subparsers(dest="cmd", required=True)

    run = sub.add_parser(
        "run", help="start N processes of a job on this host", description="mori run -n N [--] program [args...]"
    )
    run.add_argument(
        "-n", "--nproc", "--nproc-per-node", type=int, required=True, dest="nproc", help="processes on this host"
    )
    run.add_argument("--nnodes", type=int, default=1, help="hosts in the job (one mori run per host)")
    run.add_argument("--node-rank", type=int, default=0, help="this host's index in [0, nnodes)")
    run.add_argument("--master-addr", default="127.0.0.1", help="address of node 0 (multi-host)")
    run.add_argument("--master-port", type=int, default=0, help="port of node 0's bootstrap store (multi-host)")
    run.add_argument(
        "--secret-file",
        default="",
        help="file holding the job secret (64 hex digits; default: MORI_JOB_SECRET, else node 0 "
        "draws one and prints it)",
    )
    run.add_argument(
        "--socket-ifname",
        default="",
        help="network interface the hosts share (sets MORI_SOCKET_IFNAME for the processes)",
    )
    run.add_argument("--no-prefix", action="store_true", help="do not prefix output lines with the rank")
    run.add_argument("command", nargs=argparse.REMAINDER, help="program and its arguments")
    run.set_defaults(func=_cmd_run)

    info = sub.add_parser("info", help="show PEs, nodes and the transport chosen for each pair")
    info.add_argument("--env", action="store_true", help="list every MORI_* / UMBP_* setting by category instead")
    info.add_argument("--io", action="store_true", help="MORI-IO: the backend each kind of memory pair gets here")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(func=_cmd_info)

    umbp_server = sub.add_parser("umbp-server", help="MORI-UMBP's per-host server (StandaloneProcess mode)")
    from mori.umbp.server import add_arguments as add_umbp_server_arguments

    add_umbp_server_arguments(umbp_server)
    umbp_server.set_defaults(func=_cmd_umbp_server)

    umbp_master = sub.add_parser(
        "umbp-master",
        add_help=False,
        help="MORI-UMBP's master (gRPC umbp.UMBPMaster): umbp-master [listen_address] [metrics_port]",
    )
    umbp_master.set_defaults(func=None)

    from mori.apps.bench import add_subcommands as add_bench_subcommands, listing as bench_listing

    bench = sub.add_parser(
        "bench",
        help="benchmarks (shmem, ccl, ep, io, umbp, ir); see mori bench WHAT --help",
        description="Each benchmark prints a table, writes JSON and runs its baseline in the same run.",
        epilog="variants (a flag picks another benchmark):\n" + bench_listing(variants_only=True),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_bench_subcommands(bench)
    bench.set_defaults(func=None)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.cmd == "bench":
        return _cmd_bench(args, rest, parser)
    if args.cmd == "umbp-master":
        return _cmd_umbp_master(args, rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
