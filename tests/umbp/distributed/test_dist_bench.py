# SPDX-License-Identifier: MIT
"""Smoke test of ``mori bench umbp --distributed``: one size, one batch, a few calls. The benchmark
checks every get bit for bit and that the calls crossed to the other process; here the JSON is
checked for its rows and ratios (not their values)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(120)


def test_bench_umbp_distributed_tiny(tmp_path):
    out = tmp_path / "d.json"
    proc = subprocess.run([sys.executable, "-m", "mori.apps.cli", "bench", "umbp", "--distributed", "--sizes", "64K",
                           "--batches", "4", "--iters", "3", "--budget", "0.01", "--json", str(out)],
                          capture_output=True, text=True, timeout=100, stdin=subprocess.DEVNULL,
                          # the owner's 1 GiB arena is not faulted in up front: a smoke run touches little of it
                          env={**os.environ, "UMBP_DRAM_PREFAULT": "0"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The writer's engine reached the owner with GetPeerInfo: its transfers' notifications count.
    assert "without proof" not in proc.stderr, proc.stderr
    doc = json.loads(out.read_text())
    rows = {(r["engine"], r["op"]): r for r in doc["rows"]}
    assert set(rows) == {("umbp", "put"), ("umbp", "get-1st"), ("umbp", "get"), ("raw-io", "write"), ("raw-io", "read"),
                         ("master", "BatchRouteGet")}
    for key, r in rows.items():
        assert r["iters"] >= (2 if key == ("umbp", "get-1st") else 3) and 0 < r["p50 us"] <= r["p99 us"] and r["ops/s"] > 0, key
    for op in ("put", "get-1st", "get"):
        r = rows[("umbp", op)]
        assert (r["value_bytes"], r["batch"]) == (64 << 10, 4) and r["x raw-io"] > 0
    assert doc["meta"]["io_backend"]
