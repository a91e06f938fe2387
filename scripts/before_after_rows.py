# SPDX-License-Identifier: MIT
"""The rows of the GPU-host A/B scripts' runs (before_after_builds.sh): before-N.json and
after-N.json in an output folder, each a benchmark's JSON with its "rows"."""

from __future__ import annotations

import json
from typing import Iterator

NAMES = ("before", "after")


def runs(out: str, count: int) -> Iterator[tuple[int, dict[str, list[dict]]]]:
    """(run, {"before": rows, "after": rows}) for runs 1..count; a run whose JSON is missing or
    unreadable (its benchmark failed) has no rows."""
    for i in range(1, count + 1):
        by: dict[str, list[dict]] = {}
        for name in NAMES:
            try:
                with open(f"{out}/{name}-{i}.json") as f:
                    by[name] = json.load(f)["rows"]
            except (OSError, ValueError, KeyError):
                by[name] = []
        yield i, by


def _io_rows(rows: list[dict], engine: str) -> dict[tuple, dict]:
    return {(r["op"], r["MsgSize (B)"], r["BatchSize"]): r for r in rows if r.get("engine") == engine}


def io_summary(out: str, count: int) -> str:
    """`mori bench io`'s tcp rows of each run, before against after: the fastest transfer (us),
    x the socket, x the socket moving a batch one message at a time (where "before" had no such
    baseline, the same run's "after" measured it: a baseline's code is the same in both), x
    Mooncake TCP; then the 8 B latency of writes and reads (p50, p99/p50, p50 x the socket's
    round trip)."""
    lines = [
        "row                     run | before: us  x sock  x 1by1  x mooncake | after: us  x sock  x 1by1  x mooncake"
    ]
    lat = ["8 B p50 (us)  run | before: mori  p99/p50  x socket | after: mori  p99/p50  x socket"]
    for i, by_name in runs(out, count):
        rows = {name: _io_rows(by_name[name], "mori-tcp") for name in NAMES}
        serial = _io_rows(by_name["after"], "socket-serial")
        keys = sorted({k for name in NAMES for k in rows[name]})
        for key in keys:
            cells = []
            for name in NAMES:
                r = rows[name].get(key)
                if r is None:
                    cells.append(f"{'-':>9} {'-':>7} {'-':>7} {'-':>10}")
                    continue
                one_by_one = r.get("x sock-1by1")
                if one_by_one is None and key in serial:
                    one_by_one = r["Max BW (GB/s)"] / serial[key]["Max BW (GB/s)"]
                cells.append(
                    f"{r['Min Lat (us)']:9.1f} {r.get('x socket') or 0:7.2f} {one_by_one or 0:7.2f} "
                    f"{r.get('x mooncake') or 0:10.2f}"
                )
            op, size, batch = key
            lines.append(f"{op:>5} {size:>9} x {batch:<4} {i:4d} | {cells[0]} | {cells[1]}")
        for op in ("write", "read"):
            cells = []
            for name in NAMES:
                try:
                    with open(f"{out}/{name}-{i}.json") as f:
                        meta = json.load(f)["meta"]
                    row = next(x for x in meta["latency"] if x["engine"] == "mori-tcp" and x["op"] == op)
                    cells.append(f"{row['p50_us']:11.1f} {row['p99/p50']:8.2f} {row.get('p50 x socket') or 0:9.2f}")
                except (OSError, ValueError, KeyError, StopIteration):
                    cells.append(f"{'-':>11} {'-':>8} {'-':>9}")
            lat.append(f"{op:>12} {i:4d} | {cells[0]} | {cells[1]}")
    return "\n".join(lines + [""] + lat)
