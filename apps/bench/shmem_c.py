# SPDX-License-Identifier: MIT
"""``mori bench shmem-c``: MORI's OpenSHMEM C library against Open MPI's OpenSHMEM.

One C source (``shmem_c_bench.c``: put/get latency and bandwidth, put latency to a global,
atomic fetch-add latency, barrier latency) is compiled twice, with MORI's ``oshcc`` and with
Open MPI's (``/usr/bin/oshcc``), and both binaries run side by side on 2 and 4 PEs (ours
through ``oshrun`` = ``mori run``, theirs through Open MPI's ``oshrun``). Prints a table and
writes JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

SOURCE = Path(__file__).with_name("shmem_c_bench.c")
# Open MPI as root, oversubscribed; mem_hooks=0 avoids OSHMEM's finalize crash (reference/environment.md).
OMPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "OMPI_MCA_opal_common_ucx_opal_mem_hooks": "0",
}


@dataclass
class Row:
    impl: str
    pes: int
    op: str
    bytes: int
    iters: int
    us: float
    GBps: float


def _compile(oshcc: str, out: Path, env: Optional[dict] = None) -> None:
    cmd = [oshcc, "-O2", "-o", str(out), str(SOURCE)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stderr}")


def _run(cmd: list[str], env: dict, timeout: float) -> list[dict]:
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {res.returncode}:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    rows = []
    for line in res.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            rows.append(json.loads(line))
    return rows


def run(pes: list[int], max_bytes: int, scale: float, ompi_oshcc: str, ompi_oshrun: str) -> list[Row]:
    """Build both binaries and run them; returns every measurement."""
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
        args = [str(max_bytes), str(scale)]
        for n in pes:
            env = dict(os.environ, MORI_PYTHON=sys.executable)
            env.setdefault("MORI_SHMEM_HEAP_SIZE", str(max(64 << 20, 4 * max_bytes)))
            for r in _run([str(p.bin_dir / "oshrun"), "-n", str(n), str(ours), *args], env, 600):
                rows.append(Row("mori", n, **r))
            if have_ompi:
                env = dict(os.environ, **OMPI_ENV)
                for r in _run([ompi_oshrun, "-n", str(n), str(theirs), *args], env, 600):
                    rows.append(Row("openmpi", n, **r))
    return rows


def table(rows: list[Row]) -> str:
    """Side-by-side table: latency (us) for *_lat/barrier, GB/s for *_bw, and mori's speedup."""
    keyed = {(r.impl, r.pes, r.op, r.bytes): r for r in rows}
    lines = [f"{'PEs':>3} {'op':<16} {'bytes':>9} {'mori':>12} {'openmpi':>12} {'speedup':>8}"]
    for (impl, n, op, b), r in sorted(keyed.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][3])):
        if impl != "mori":
            continue
        o = keyed.get(("openmpi", n, op, b))
        bw = op.endswith("_bw")
        fmt = (lambda x: f"{x.GBps:9.3f} GB/s") if bw else (lambda x: f"{x.us:9.3f} us")
        sp = ((r.GBps / o.GBps if o.GBps else float("nan")) if bw else (o.us / r.us if r.us else float("nan"))) if o else None
        lines.append(f"{n:>3} {op:<16} {b:>9} {fmt(r):>12} {fmt(o) if o else '-':>12} "
                     f"{f'{sp:7.2f}x' if sp is not None else '-':>8}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Entry point of ``mori bench shmem-c``."""
    ap = argparse.ArgumentParser(prog="mori bench shmem-c", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pes", default="2,4", help="comma-separated PE counts (default 2,4)")
    ap.add_argument("--max-bytes", type=int, default=4 << 20, help="largest message (default 4 MiB)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply iteration counts (quick runs: 0.1)")
    ap.add_argument("--json", default="bench-results/shmem_c.json", help="where to write the JSON results")
    ap.add_argument("--ompi-oshcc", default="/usr/bin/oshcc")
    ap.add_argument("--ompi-oshrun", default="/usr/bin/oshrun")
    args = ap.parse_args(argv)
    pes = [int(x) for x in args.pes.split(",") if x]
    if any(n < 2 for n in pes):
        ap.error("--pes: every PE count must be at least 2")
    t0 = time.time()
    rows = run(pes, args.max_bytes, args.scale, args.ompi_oshcc, args.ompi_oshrun)
    print(table(rows))
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"benchmark": "shmem-c", "date": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(),
            "cpus": os.cpu_count(), "machine": platform.machine(), "seconds": round(time.time() - t0, 1),
            "max_bytes": args.max_bytes, "scale": args.scale}
    out.write_text(json.dumps({"meta": meta, "rows": [asdict(r) for r in rows]}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
