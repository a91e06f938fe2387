# SPDX-License-Identifier: MIT
"""scripts/before_after_rows.py: the A/B scripts' summary of `mori bench io` runs, before against
after, read from the JSON files the benchmark writes."""

from __future__ import annotations

import json
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))

from before_after_rows import io_summary  # noqa: E402


def _row(engine: str, op: str, size: int, batch: int, us: float, **ratios) -> dict:
    return {
        "engine": engine,
        "op": op,
        "MsgSize (B)": size,
        "BatchSize": batch,
        "Min Lat (us)": us,
        "Max BW (GB/s)": size * batch / us / 1e3,
        **ratios,
    }


def _write(path: str, rows: list[dict], latency: list[dict]) -> None:
    with open(path, "w") as f:
        json.dump({"rows": rows, "meta": {"latency": latency}}, f)


def test_io_summary_pairs_rows_and_borrows_the_one_by_one_baseline(tmp_path) -> None:
    rng = random.Random()
    us_before, us_after, serial_us = rng.uniform(20, 40), rng.uniform(5, 19), rng.uniform(100, 200)
    # "before" knew no socket-serial baseline: its x 1by1 comes from the same run's "after".
    _write(
        f"{tmp_path}/before-1.json",
        [_row("mori-tcp", "read", 4096, 128, us_before, **{"x socket": 0.5, "x mooncake": 3.0})],
        [{"engine": "mori-tcp", "op": "write", "p50_us": 26.7, "p99/p50": 1.39, "p50 x socket": 1.34}],
    )
    _write(
        f"{tmp_path}/after-1.json",
        [
            _row("mori-tcp", "read", 4096, 128, us_after, **{"x socket": 0.9, "x sock-1by1": 7.5, "x mooncake": 6.0}),
            _row("socket-serial", "read", 4096, 128, serial_us),
            _row("mori-tcp", "write", 8, 1, 9.8, **{"x socket": 2.0}),
        ],
        [{"engine": "mori-tcp", "op": "write", "p50_us": 9.8, "p99/p50": 1.85, "p50 x socket": 0.48}],
    )
    text = io_summary(str(tmp_path), 1)
    lines = text.splitlines()
    read = next(line for line in lines if line.startswith(" read      4096 x 128"))
    before, after = read.split("|")[1].split(), read.split("|")[2].split()
    assert float(before[0]) == round(us_before, 1)
    assert float(before[2]) == round(serial_us / us_before, 2)  # borrowed from "after"
    assert float(after[2]) == 7.5  # its own baseline
    # A row only one build measured shows dashes for the other.
    write = next(line for line in lines if line.startswith("write         8 x 1"))
    assert write.split("|")[1].split() == ["-", "-", "-", "-"]
    latency = next(line for line in lines if line.strip().startswith("write    1 |"))
    assert latency.split("|")[1].split() == ["26.7", "1.39", "1.34"]
    assert latency.split("|")[2].split() == ["9.8", "1.85", "0.48"]


def test_io_summary_leaves_a_missing_run_empty(tmp_path) -> None:
    # Run 1's "after" failed (no JSON): its rows show dashes, and nothing raises.
    _write(f"{tmp_path}/before-1.json", [_row("mori-tcp", "write", 65536, 1, 21.8)], [])
    text = io_summary(str(tmp_path), 1)
    row = next(line for line in text.splitlines() if "65536 x 1" in line)
    assert row.split("|")[2].split() == ["-", "-", "-", "-"]
