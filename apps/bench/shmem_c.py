# SPDX-License-Identifier: MIT
"""``mori bench shmem-c``: MORI's OpenSHMEM C library against Open MPI's OpenSHMEM.

One C source (``shmem_c_bench.c``: put/get latency and bandwidth, put latency to a global,
atomic fetch-add latency, and the latency of barrier, fcollect, broadcast, int64 sum reduction
and alltoall) is compiled twice, with MORI's ``oshcc`` and with Open MPI's (``/usr/bin/oshcc``),
and both binaries run on each PE count (ours through ``oshrun`` = ``mori run``, theirs through
Open MPI's ``oshrun``), ``--runs`` times, alternating which goes first, since a shared machine
drifts. Prints the median of the runs with their spread (min-max) and writes every run as JSON.

``--transport ucx`` runs every pair of PEs through UCX on both sides: ours with
``MORI_NET_TRANSPORT=ucx-all`` and Open MPI's spml ucx, both with ``UCX_TLS`` from
``--ucx-tls`` (default tcp), and ours over its own tcp transport (``MORI_DISABLE_P2P=1``)
beside them, and raw UCX's ``ucx_perftest`` (2 processes, the same ``UCX_TLS``) in each run:
the table's last column is ours over ucx against it (see ucx_perftest.py for which perftest
matches which row). Open MPI's default collectives do not go through its spml (they run on
its MPI layer's shared memory), so the ucx runs add Open MPI with ``OMPI_MCA_scoll=basic``,
whose collectives are made of spml ucx operations: the collective rows' speedup is against
that column (the same UCX underneath), the other rows' against Open MPI's default.
``--transport tcp`` only ours over tcp. Default: ours over shared memory.

``--load N`` runs N busy loops (one process each, as other jobs of a shared machine) beside
every run of both implementations, so the figure under load comes from one command.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Optional

from mori.apps.bench.launch import OMPI_ENV as MPIRUN_ENV
from mori.apps.bench.report import Report
from mori.apps.bench.sizes import size_type

SOURCE = Path(__file__).with_name("shmem_c_bench.c")
# Open MPI as root, oversubscribed; mem_hooks=0 avoids OSHMEM's finalize crash on Debian's 4.1.4
# (reference/environment.md), but Ubuntu's 4.1.6 (the GPU host) crashes with it in shmem_init
# (mca_memheap_modex_recv_all) and runs without it: the bench takes the first that runs.
OMPI_ENVS = (dict(MPIRUN_ENV, OMPI_MCA_opal_common_ucx_opal_mem_hooks="0"), dict(MPIRUN_ENV))


# The bench's collective rows (the others are point-to-point operations of one PE).
COLLECTIVES = {"barrier", "fcollect", "broadcast+barrier", "sum_to_all_int64", "alltoall"}


@dataclass
class Row:
    impl: str
    pes: int
    op: str
    bytes: int
    iters: int
    us: float
    GBps: float
    run: int = 0


def _compile(oshcc: str, out: Path, env: Optional[dict] = None) -> None:
    cmd = [oshcc, "-O2", "-o", str(out), str(SOURCE)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stderr}")


# Ubuntu's Open MPI 4.1.6 (the GPU host) crashes in shmem_init now and then (SIGSEGV in
# mca_memheap_modex_recv_all): such a run is started again, and counted in the JSON.
INIT_CRASH_RETRIES = 3
init_crash_retries = 0


def _run(cmd: list[str], env: dict, timeout: float, retry_init_crash: bool = False) -> list[dict]:
    global init_crash_retries
    for _ in range(INIT_CRASH_RETRIES + 1 if retry_init_crash else 1):
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, stdin=subprocess.DEVNULL)
        if res.returncode == 0 or "mca_memheap_modex_recv_all" not in res.stderr:
            break
        init_crash_retries += 1
        print(f"note: {cmd[0]} crashed in shmem_init (Open MPI's memheap modex); run again", file=sys.stderr)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {res.returncode}:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    rows = []
    for line in res.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            rows.append(json.loads(line))
    return rows


@contextlib.contextmanager
def busy_loops(n: int):
    """N processes that spin for as long as the block runs: the load of other jobs."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL) for _ in range(n)]
    try:
        yield
    finally:
        for p in loops:
            p.kill()
            p.wait()


def _iters_for(nbytes: int, scale: float) -> int:
    """The C benchmark's iteration count for a message size (shmem_c_bench.c's iters_for)."""
    it = 20000 if nbytes <= 4096 else 4000 if nbytes <= 65536 else 400 if nbytes <= (1 << 20) else 100
    return max(10, int(it * scale))


def _perftest_rows(max_bytes: int, scale: float, env: dict, run: int) -> list[Row]:
    """Raw UCX (ucx_perftest, 2 processes) for the rows it has a match for: latencies at 8 B
    and at the largest size, put bandwidth at the largest size."""
    from mori.apps.bench import ucx_perftest

    largest = 8
    while largest * 8 <= max_bytes:
        largest *= 8  # the C benchmark's sizes: 8, 64, 512, ...
    rows = []
    for op, test, bw in ucx_perftest.MEASURES:
        for nbytes in [largest] if bw else sorted({8, largest}) if op == "get_lat" else [8]:
            r = ucx_perftest.run_test(test, nbytes, _iters_for(nbytes, scale), env)
            rows.append(Row("ucx_perftest", 2, op, nbytes, r.iters, r.us, r.GBps, run=run))
    return rows


def _mori_variants(transport: str, ucx_tls: str) -> list[tuple[str, dict]]:
    """(implementation label, extra environment) of each of our runs."""
    if transport == "ucx":
        return [
            ("mori-ucx", {"MORI_NET_TRANSPORT": "ucx-all", "UCX_TLS": ucx_tls}),
            ("mori-tcp", {"MORI_DISABLE_P2P": "1", "MORI_NET_TRANSPORT": "tcp"}),
        ]
    if transport == "tcp":
        return [("mori-tcp", {"MORI_DISABLE_P2P": "1", "MORI_NET_TRANSPORT": "tcp"})]
    return [("mori", {})]


def run(
    pes: list[int],
    max_bytes: int,
    scale: float,
    ompi_oshcc: str,
    ompi_oshrun: str,
    runs: int = 1,
    transport: str = "shm",
    ucx_tls: str = "tcp",
    coll_max_bytes: int = 0,
    ops: str = "",
    before_python: str = "",
) -> list[Row]:
    """Build both binaries and run each `runs` times per PE count, alternating which implementation
    goes first; returns every measurement. `before_python`: the Python of another MORI install
    (an earlier build), whose oshcc/oshrun build and run the same source as "mori-before"."""
    from mori.shmem.capi import paths

    p = paths()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="mori-bench-shmem-c-") as tmp:
        ours, theirs = Path(tmp) / "bench_mori", Path(tmp) / "bench_ompi"
        _compile(str(p.bin_dir / "oshcc"), ours)
        have_ompi = shutil.which(ompi_oshcc) is not None and shutil.which(ompi_oshrun) is not None
        if have_ompi:
            _compile(ompi_oshcc, theirs)
        else:
            print(f"warning: {ompi_oshcc}/{ompi_oshrun} not found: Open MPI baseline skipped", file=sys.stderr)
        args = [str(max_bytes), str(scale), str(coll_max_bytes), ops]
        mori_env = dict(os.environ, MORI_PYTHON=sys.executable)
        # The collectives' two buffers hold every PE's part (fcollect, alltoall).
        heap = max(64 << 20, 4 * max_bytes, 4 * coll_max_bytes * max(pes))
        mori_env.setdefault("MORI_SHMEM_HEAP_SIZE", str(heap))
        impls = [
            (label, [str(p.bin_dir / "oshrun")], ours, dict(mori_env, **extra))
            for label, extra in _mori_variants(transport, ucx_tls)
        ]
        if before_python:
            got = subprocess.run(
                [before_python, "-c", "from mori.shmem.capi import paths; print(paths().bin_dir)"],
                capture_output=True,
                text=True,
                timeout=120,
            )
            if got.returncode != 0:
                raise RuntimeError(f"--before-python {before_python}: no MORI there:\n{got.stderr[-2000:]}")
            before_bin = Path(got.stdout.strip())
            _compile(str(before_bin / "oshcc"), Path(tmp) / "bench_mori_before")
            impls.append(
                (
                    "mori-before",
                    [str(before_bin / "oshrun")],
                    Path(tmp) / "bench_mori_before",
                    dict(mori_env, MORI_PYTHON=before_python),
                )
            )
        if have_ompi:
            ompi_env = _working_ompi_env(ompi_oshrun, theirs, max(pes))
            if transport == "ucx":  # the same UCX transports under Open MPI's spml ucx
                ompi_env.update(UCX_TLS=ucx_tls, OMPI_MCA_spml="ucx")
            impls.append(("openmpi", [ompi_oshrun], theirs, ompi_env))
            if transport == "ucx":
                impls.append(("openmpi-scoll-basic", [ompi_oshrun], theirs, dict(ompi_env, OMPI_MCA_scoll="basic")))
        perftest_env = None
        if transport == "ucx":
            from mori.apps.bench import ucx_perftest

            why = ucx_perftest.missing_reason()
            if why:
                print(f"warning: {why}", file=sys.stderr)
            else:
                perftest_env = dict(os.environ, UCX_TLS=ucx_tls)
        for k in range(runs):
            for n in pes:
                for name, launcher, binary, env in impls if k % 2 == 0 else impls[::-1]:
                    retry = name.startswith("openmpi")
                    for r in _run([*launcher, "-n", str(n), str(binary), *args], env, 600, retry_init_crash=retry):
                        rows.append(Row(name, n, run=k, **r))
                if perftest_env is not None and n == 2:
                    rows.extend(_perftest_rows(max_bytes, scale, perftest_env, k))
    return rows


def _working_ompi_env(oshrun: str, binary: Path, npes: int) -> dict:
    """The first of OMPI_ENVS under which Open MPI runs a short barrier-only run of the bench."""
    errors = []
    for extra in OMPI_ENVS:
        env = dict(os.environ, **extra)
        try:
            _run([oshrun, "-n", str(npes), str(binary), "8", "0.01", "8", "barrier"], env, 120, retry_init_crash=True)
            return env
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            errors.append(f"with {extra}: {str(e)[-600:]}")
    raise RuntimeError("Open MPI's oshrun fails under every setting tried:\n" + "\n".join(errors))


def _summary(rows: list[Row], bandwidth: bool) -> tuple[float, float, float]:
    """(median, min, max) over the runs of one measurement."""
    vals = [r.GBps if bandwidth else r.us for r in rows]
    return statistics.median(vals), min(vals), max(vals)


def table(rows: list[Row]) -> str:
    """Side-by-side table: the median over the runs [min-max] of latency (us) for latencies and
    collectives, GB/s for *_bw, one column per implementation, the first implementation's
    speedup over Open MPI (ratio of the medians, > 1: ours is faster) and, where raw UCX
    (ucx_perftest) ran, the first implementation's time over raw UCX's (1.10: 10 % above it)."""
    keyed: dict[tuple, list[Row]] = {}
    impls: list[str] = []
    for r in rows:
        keyed.setdefault((r.impl, r.pes, r.op, r.bytes), []).append(r)
        if r.impl not in impls:
            impls.append(r.impl)
    baselines = [i for i in ("mori-before", "openmpi", "openmpi-scoll-basic", "ucx_perftest") if i in impls]
    ours = [i for i in impls if i not in baselines]
    cols = ours + baselines
    runs = max((r.run for r in rows), default=0) + 1
    first = ours[0] if ours else None
    raw = "ucx_perftest" in impls
    before = "mori-before" in impls
    basic = "openmpi-scoll-basic" in impls
    lines = [
        f"median of {runs} run(s) [min-max]; speedup: {first or '-'} over openmpi"
        + (" (collectives: over openmpi-scoll-basic, Open MPI's collectives on its spml)" if basic else "")
        + (f"; vs raw ucx: {first or '-'} time / ucx_perftest time" if raw else "")
        + (f"; vs before: mori-before's time / {first or '-'}'s" if before else ""),
        f"{'PEs':>3} {'op':<18} {'bytes':>7} "
        + " ".join(f"{c:>28}" for c in cols)
        + f" {'speedup':>8}"
        + (f" {'vs raw ucx':>10}" if raw else "")
        + (f" {'vs before':>9}" if before else ""),
    ]

    def ratio(theirs: Optional[list[Row]], m: tuple[float, float, float], bw: bool) -> Optional[float]:
        """Their median time over ours (> 1: ours faster), from latencies or bandwidths."""
        o = _summary(theirs, bw) if theirs else None
        return ((m[0] / o[0]) if bw else (o[0] / m[0])) if o and m[0] and o[0] else None

    for (impl, n, op, b), rs in sorted(keyed.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][3])):
        if impl != first:
            continue
        bw = op.endswith("_bw")
        unit = "GB/s" if bw else "us"

        def fmt(s: tuple, unit: str = unit) -> str:
            return f"{s[0]:9.3f} [{s[1]:.3g}-{s[2]:.3g}] {unit}"

        cells = []
        for c in cols:
            got = keyed.get((c, n, op, b))
            cells.append(f"{fmt(_summary(got, bw)) if got else '-':>28}")
        m = _summary(rs, bw)
        baseline = "openmpi-scoll-basic" if basic and op in COLLECTIVES else "openmpi"
        sp = ratio(keyed.get((baseline, n, op, b)), m, bw)
        line = f"{n:>3} {op:<18} {b:>7} " + " ".join(cells) + f" {f'{sp:7.2f}x' if sp is not None else '-':>8}"
        if raw:
            vs = ratio(keyed.get(("ucx_perftest", n, op, b)), m, bw)
            line += f" {f'{1 / vs:9.2f}x' if vs else '-':>10}"
        if before:
            vb = ratio(keyed.get(("mori-before", n, op, b)), m, bw)
            line += f" {f'{vb:8.2f}x' if vb else '-':>9}"
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Entry point of ``mori bench shmem-c``."""
    ap = argparse.ArgumentParser(
        prog="mori bench shmem-c", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--pes", default="2,4", help="comma-separated PE counts (default 2,4)")
    ap.add_argument(
        "--max-bytes", type=size_type("--max-bytes"), default=4 << 20, help="largest message (default 4 MiB)"
    )
    ap.add_argument("--scale", type=float, default=1.0, help="multiply iteration counts (quick runs: 0.1)")
    ap.add_argument("--runs", type=int, default=5, help="runs of each implementation, alternating (default 5)")
    ap.add_argument("--json", default="bench-results/shmem_c.json", help="where to write the JSON results")
    ap.add_argument(
        "--transport",
        choices=["shm", "tcp", "ucx"],
        default="shm",
        help="how our PEs reach each other: shm (default), tcp (MORI_DISABLE_P2P), or ucx "
        "(ucx-all, beside tcp; Open MPI gets the same UCX_TLS)",
    )
    ap.add_argument("--ucx-tls", default="tcp", help="UCX_TLS of the ucx runs, ours and Open MPI's (default tcp)")
    ap.add_argument(
        "--load",
        type=int,
        default=0,
        help="busy-loop processes running beside every run, as other jobs would (default 0)",
    )
    ap.add_argument(
        "--coll-max-bytes",
        type=size_type("--coll-max-bytes"),
        default=0,
        help="time the collectives at every power of two from 8 B to this size per PE (OSU's sizes; "
        "default: 8 B, 1, 16, 32 and 64 KiB)",
    )
    ap.add_argument(
        "--ops",
        default="",
        help="comma-separated subset of p2p,fcollect,broadcast,sum,alltoall,barrier to run (default all)",
    )
    ap.add_argument(
        "--before-python",
        default="",
        help="the Python of another MORI install (an earlier build): its oshcc/oshrun run the same "
        "source as 'mori-before' in every run, alternated with ours and Open MPI's",
    )
    ap.add_argument("--ompi-oshcc", default="/usr/bin/oshcc")
    ap.add_argument("--ompi-oshrun", default="/usr/bin/oshrun")
    args = ap.parse_args(argv)
    pes = [int(x) for x in args.pes.split(",") if x]
    if any(n < 2 for n in pes):
        ap.error("--pes: every PE count must be at least 2")
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    if args.load < 0:
        ap.error("--load must be 0 or more")
    known = {"p2p", "fcollect", "broadcast", "sum", "alltoall", "barrier"}
    if not set(filter(None, args.ops.split(","))) <= known:
        ap.error(f"--ops: each must be one of {','.join(sorted(known))}")
    t0 = time.time()
    with busy_loops(args.load):
        rows = run(
            pes,
            args.max_bytes,
            args.scale,
            args.ompi_oshcc,
            args.ompi_oshrun,
            args.runs,
            args.transport,
            args.ucx_tls,
            args.coll_max_bytes,
            args.ops,
            args.before_python,
        )
    if args.load:
        print(f"beside {args.load} busy loop(s)")
    print(table(rows))
    meta = {
        "benchmark": "shmem-c",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "seconds": round(time.time() - t0, 1),
        "max_bytes": args.max_bytes,
        "scale": args.scale,
        "runs": args.runs,
        "transport": args.transport,
        "load": args.load,
        "coll_max_bytes": args.coll_max_bytes,
        "ops": args.ops or "all",
        "before_python": args.before_python or None,
        "ucx_tls": args.ucx_tls if args.transport == "ucx" else None,
        "command": "mori bench shmem-c " + " ".join(argv),
        "openmpi_init_crash_retries": init_crash_retries,
    }
    report = Report("shmem-c", [f.name for f in fields(Row)], rows=[asdict(r) for r in rows], meta=meta)
    print(f"wrote {report.save(args.json)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
