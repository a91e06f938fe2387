# SPDX-License-Identifier: MIT
"""Smoke test of ``mori bench umbp``: one value size, one batch, a few calls, no Mooncake. The
benchmark checks every get and copy bit for bit itself; here the JSON is checked for its rows,
their ratios and the targets (not their values)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("mori.umbp")

pytestmark = pytest.mark.timeout(120)


def _bench(tmp_path, *args: str, timeout: float = 90) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "umbp.json"
    proc = subprocess.run(
        [sys.executable, "-m", "mori.apps.cli", "bench", "umbp", *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    return proc, json.loads(out.read_text()) if out.exists() else {}


def test_bench_umbp_local_tiny(tmp_path):
    proc, doc = _bench(
        tmp_path,
        "--modes",
        "local",
        "--sizes",
        "64K",
        "--batches",
        "4",
        "--iters",
        "3",
        "--budget",
        "0.01",
        "--exists-iters",
        "20",
        "--no-mooncake",
        "--ssd-dir",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {(r["mode"], r["engine"], r["op"], r["tier"]): r for r in doc["rows"]}
    want = {
        ("local", "umbp", "put", "dram"),
        ("local", "umbp", "get", "dram"),
        ("local", "memcpy", "copy", "dram"),
        ("local", "umbp", "put", "ssd"),
        ("local", "umbp", "get", "ssd"),
        ("local", "raw read", "get", "ssd"),
        ("local", "umbp", "exists_consecutive", "dram"),
    }
    assert set(rows) == want
    for key, r in rows.items():
        assert r["iters"] >= 3 and 0 < r["p50 us"] <= r["p99 us"] and r["ops/s"] > 0, key
        if key[2] == "exists_consecutive":
            assert r["batch"] == 128 and r["GiB/s"] is None
        else:
            assert (r["value_bytes"], r["batch"]) == (64 << 10, 4) and r["GiB/s"] > 0
    get_dram, get_ssd = rows[("local", "umbp", "get", "dram")], rows[("local", "umbp", "get", "ssd")]
    assert get_dram["x memcpy"] == pytest.approx(get_dram["GiB/s"] / rows[("local", "memcpy", "copy", "dram")]["GiB/s"])
    assert get_ssd["x raw read"] == pytest.approx(get_ssd["GiB/s"] / rows[("local", "raw read", "get", "ssd")]["GiB/s"])
    assert get_dram["x mooncake"] is None
    targets = doc["meta"]["targets"]
    assert set(targets) == {
        "dram_get_vs_memcpy",
        "ssd_get_vs_raw_read",
        "put_vs_mooncake",
        "get_vs_mooncake",
        "exists_consecutive_128_p50_us",
    }
    assert targets["ssd_get_vs_raw_read"]["status"] in ("met", "missed")
    assert targets["ssd_get_vs_raw_read"]["worst"] == pytest.approx(get_ssd["x raw read"])
    assert targets["dram_get_vs_memcpy"]["status"] == "not measured"  # 64 KiB values only
    assert targets["put_vs_mooncake"]["status"] == "not measured"
    assert doc["meta"]["engines"]["mooncake"] == {"status": "skipped", "reason": "--no-mooncake"}
    assert "/" not in doc["command"].split()[0]  # no install path in the JSON


def test_bench_umbp_exists_row_with_large_values_only(tmp_path):
    """The exists row puts 128 values beside the rows': with 2 MiB values only (the DRAM tier
    sized for them), they once did not fit and the bench failed."""
    proc, doc = _bench(
        tmp_path,
        *("--modes", "local", "--tiers", "dram", "--sizes", "2M", "--batches", "1"),
        *("--iters", "3", "--budget", "0.01", "--exists-iters", "20", "--no-mooncake"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (ex,) = [r for r in doc["rows"] if r["op"] == "exists_consecutive"]
    assert ex["batch"] == 128 and ex["value_bytes"] == 64 << 10 and ex["p50 us"] > 0
    assert doc["meta"]["targets"]["exists_consecutive_128_p50_us"]["status"] in ("met", "missed")


@pytest.mark.parametrize(
    "option,value", [("--sizes", "0"), ("--batches", "x"), ("--modes", "cluster"), ("--iters", "-2")]
)
def test_bench_umbp_rejects_bad_input(tmp_path, option, value):
    proc, doc = _bench(tmp_path, option, value, timeout=60)
    assert proc.returncode == 2
    assert option in proc.stderr and value in proc.stderr and doc == {}


def test_bench_umbp_server_tiny(tmp_path):
    import importlib.util

    if importlib.util.find_spec("mori.umbp.server") is None:
        pytest.skip("this build has no per-host server (mori.umbp.server)")
    proc, doc = _bench(
        tmp_path,
        "--modes",
        "server",
        "--sizes",
        "64K",
        "--batches",
        "2",
        "--iters",
        "3",
        "--budget",
        "0.01",
        "--no-mooncake",
        "--ssd-dir",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {(r["mode"], r["engine"], r["op"], r["tier"]): r for r in doc["rows"]}
    mode = "server x4"
    assert set(rows) == {
        (mode, "umbp", "put", "dram"),
        (mode, "umbp", "get", "dram"),
        (mode, "memcpy", "copy", "dram"),
        (mode, "umbp", "put", "ssd"),
        (mode, "umbp", "get", "ssd"),
        (mode, "raw read", "get", "ssd"),
    }
    for key, r in rows.items():
        assert r["iters"] == 3 and r["batch"] == 2 and r["GiB/s"] > 0 and 0 < r["p50 us"] <= r["p99 us"], key
    get_dram, get_ssd = rows[(mode, "umbp", "get", "dram")], rows[(mode, "umbp", "get", "ssd")]
    assert get_dram["x memcpy"] == pytest.approx(get_dram["GiB/s"] / rows[(mode, "memcpy", "copy", "dram")]["GiB/s"])
    assert get_ssd["x raw read"] == pytest.approx(get_ssd["GiB/s"] / rows[(mode, "raw read", "get", "ssd")]["GiB/s"])
    assert doc["meta"]["engines"]["server"] == {**doc["meta"]["engines"]["server"], "dram": "ok", "ssd": "ok"}
    assert doc["meta"]["targets"]["ssd_get_vs_raw_read"]["rows"] == 1


def test_bench_umbp_says_why_mooncake_is_missing(tmp_path):
    # A `mooncake` package whose store cannot be imported, ahead of any installed one.
    shim = tmp_path / "shim" / "mooncake"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("")
    (shim / "store.py").write_text("raise ImportError('no store in this test')\n")
    out = tmp_path / "umbp.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "shim"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mori.apps.cli",
            "bench",
            "umbp",
            "--modes",
            "local",
            "--tiers",
            "dram",
            "--sizes",
            "64K",
            "--batches",
            "2",
            "--iters",
            "3",
            "--budget",
            "0.01",
            "--exists-iters",
            "5",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=90,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    mc = doc["meta"]["engines"]["mooncake"]
    assert mc["status"] == "skipped" and "no store in this test" in mc["reason"]
    assert "no store in this test" in proc.stdout
    assert {r["engine"] for r in doc["rows"]} == {"umbp", "memcpy"}
    assert doc["meta"]["targets"]["get_vs_mooncake"]["status"] == "not measured"
