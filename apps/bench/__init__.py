# SPDX-License-Identifier: MIT
"""``mori bench WHAT``: every benchmark prints a table, writes JSON and runs its baseline in
the same run, so each figure is a ratio measured on the same machine.

A benchmark is a module here with ``main(argv) -> int``; ``BENCHES`` names them for the
``mori bench`` subcommands (apps/cli.py). Some have variants chosen by a flag (``shmem --gpu``):
another module, given the same arguments (the flag itself left out where the variant's parser
does not take it). The pieces they share: ``sizes`` (option parsing, size labels), ``timing``
(warm-up, slowest rank), ``launch`` (starting their own ranks), ``report`` (table and JSON),
``wire`` (their sockets), ``processes`` (stopping helpers).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass, field
from typing import Sequence


@dataclass(frozen=True)
class Variant:
    """``mori bench NAME FLAG ...`` runs ``module`` instead of the benchmark's own."""

    flag: str
    module: str
    help: str
    keep_flag: bool = True  # the variant's parser takes the flag itself (e.g. --hosts N)


@dataclass(frozen=True)
class Bench:
    name: str
    module: str
    help: str
    variants: tuple = field(default_factory=tuple)

    def pick(self, argv: Sequence[str]) -> tuple[str, list[str]]:
        """The module to run for ``argv`` and the arguments it gets."""
        rest = list(argv)
        for v in self.variants:
            if v.flag in rest:
                return v.module, rest if v.keep_flag else [a for a in rest if a != v.flag]
        return self.module, rest


BENCHES = (
    Bench(
        "shmem",
        "shmem",
        "put/get latency and bandwidth between 2 PEs of one host (vs mpi4py RMA, memcpy)",
        (
            Variant("--hosts", "shmem_hosts", "the same across a network link (vs a plain TCP socket)"),
            Variant("--gpu", "shmem_gpu", "GPU heap RMA on 2 GPUs (vs torch peer copy)", keep_flag=False),
        ),
    ),
    Bench("shmem-c", "shmem_c", "the C API vs Open MPI's OpenSHMEM"),
    Bench("ep", "ep", "MoE dispatch/combine (vs the all_to_all path)"),
    Bench("ccl", "ccl", "allgather and friends (vs gloo / NCCL)"),
    Bench(
        "io",
        "io",
        "MORI-IO point-to-point transfers (vs a TCP socket, memcpy, Mooncake, NIXL)",
        (
            Variant(
                "--gpu",
                "io_gpu",
                "MORI-IO on GPU memory, CUDA IPC and tcp (vs a device-to-device copy)",
                keep_flag=False,
            ),
        ),
    ),
    Bench(
        "umbp",
        "umbp",
        "MORI-UMBP put/get, DRAM and SSD hits, local and per-host server (vs memcpy, pread, Mooncake Store)",
        (
            Variant(
                "--master",
                "umbp_master",
                "the UMBP master's BatchRouteGet rate: in-memory store, one Redis, four Redis",
                keep_flag=False,
            ),
            Variant(
                "--distributed",
                "umbp_distributed",
                "the distributed pool across two processes or namespaces (vs Mooncake Store, raw MORI-IO)",
            ),
        ),
    ),
    Bench("ir", "ir", "Triton kernels over MORI-IR: put, put+signal, all-reduce (vs CUDA C++, NCCL)"),
)
_BY_NAME = {b.name: b for b in BENCHES}


def listing(variants_only: bool = False) -> str:
    """One line per benchmark (unless ``variants_only``) and per variant."""
    lines = []
    for b in BENCHES:
        if not variants_only:
            lines.append(f"  {b.name:<20} {b.help}")
        for v in b.variants:
            lines.append(f"  {b.name + ' ' + v.flag:<20} {v.help}")
    return "\n".join(lines)


def add_subcommands(bench: argparse.ArgumentParser) -> None:
    """One argparse subcommand per benchmark under ``mori bench``; each benchmark's options are
    its own module's parser's (``mori bench WHAT --help``), so they pass through untouched."""
    sub = bench.add_subparsers(dest="what", metavar="WHAT")
    for b in BENCHES:
        sub.add_parser(b.name, help=b.help, add_help=False)


def main(argv: Sequence[str]) -> int:
    """Run ``mori bench`` with ``argv`` = [WHAT, options...]."""
    argv = list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: mori bench {" + ",".join(_BY_NAME) + "} [options]\n" + listing())
        return 0
    what, rest = argv[0], argv[1:]
    bench = _BY_NAME.get(what)
    if bench is None:
        print(f"mori bench: unknown benchmark {what!r}; choose from {', '.join(_BY_NAME)}", file=sys.stderr)
        return 2
    module, rest = bench.pick(rest)
    try:
        mod = importlib.import_module(f"mori.apps.bench.{module}")
    except ModuleNotFoundError as exc:
        print(f"mori bench {what}: not available in this build ({exc})", file=sys.stderr)
        return 2
    return mod.main(rest)
