# SPDX-License-Identifier: MIT
"""Smoke tests of ``mori bench io``: tiny sizes, every row verified by the benchmark itself
(the destination is overwritten first, then hashed on both sides), the JSON checked here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mori.apps.netns import unavailable_reason


def _bench(tmp_path, *args: str, timeout: float = 240) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "io.json"
    proc = subprocess.run(
        [sys.executable, "-m", "mori.apps.cli", "bench", "io", "--max-buffer", "1M", *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    doc = json.loads(out.read_text()) if out.exists() else {}
    return proc, doc


def _check_rows(doc: dict, engine: str, apis: list[str], batches: list[int], sizes: list[int]) -> None:
    rows = [r for r in doc["rows"] if r["engine"] == engine]
    got = sorted((r["op"], r["api"], r["BatchSize"], r["MsgSize (B)"]) for r in rows)
    want = sorted((op, api, b, s) for op in ("write", "read") for api in apis for b in batches for s in sizes)
    assert got == want, f"{engine}: rows {got} != {want}"
    for r in rows:
        assert r["verified"] is True
        assert r["TotalSize (MB)"] == pytest.approx(r["MsgSize (B)"] * r["BatchSize"] / 1e6)
        assert r["Max BW (GB/s)"] >= r["Avg BW (GB/s)"] > 0
        assert 0 < r["Min Lat (us)"] <= r["Avg Lat (us)"]
        assert r["iters"] >= 3


def test_bench_io_baselines_only(tmp_path):
    # two passes: each row is the best of both (a second pass once met the first one's stale files)
    proc, doc = _bench(
        tmp_path,
        "--only-baselines",
        "--baselines",
        "socket,memcpy",
        "--sizes",
        "8,4K",
        "--batches",
        "1,4",
        "--budget",
        "0.02",
        "--lat-iters",
        "50",
        "--repeats",
        "2",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert doc["meta"]["engines"]["socket"]["status"] == "ok"
    assert all(r["passes"] == 2 for r in doc["rows"] + doc["meta"]["latency"])
    assert "mori" not in doc["meta"]["engines"]
    for engine in ("socket", "memcpy"):
        _check_rows(doc, engine, ["-"], [1, 4], [8, 4096])
    memcpy = [r for r in doc["rows"] if r["engine"] == "memcpy"]
    assert all(
        r["x socket"]
        == pytest.approx(
            r["Max BW (GB/s)"]
            / next(
                s["Max BW (GB/s)"]
                for s in doc["rows"]
                if s["engine"] == "socket"
                and s["op"] == r["op"]
                and s["BatchSize"] == r["BatchSize"]
                and s["MsgSize (B)"] == r["MsgSize (B)"]
            )
        )
        for r in memcpy
    )
    lat = {(r["engine"], r["op"]): r for r in doc["meta"]["latency"]}
    assert set(lat) == {(e, op) for e in ("socket", "memcpy") for op in ("write", "read")}
    assert all(r["n"] == 50 and 0 < r["p50_us"] <= r["p99_us"] <= r["max_us"] for r in lat.values())
    assert "/" not in doc["command"].split()[0]  # no install path in the JSON


@pytest.mark.parametrize("option,value", [("--sizes", "0"), ("--batches", "x"), ("--max-buffer", "-1")])
def test_bench_io_rejects_bad_input(tmp_path, option, value):
    proc, doc = _bench(tmp_path, "--only-baselines", option, value, timeout=60)
    assert proc.returncode == 2
    assert f"{option}: {value!r}" in proc.stderr and doc == {}


def _mori_io_missing() -> str:
    from mori.apps.bench.io_mori import unavailable

    return unavailable() or ""


@pytest.mark.skipif(bool(_mori_io_missing()), reason=_mori_io_missing() or "mori.io has IOEngine")
def test_bench_io_mori(tmp_path):
    proc, doc = _bench(
        tmp_path, "--baselines", "none", "--sizes", "8,64K", "--batches", "1,4", "--budget", "0.02", "--lat-iters", "50"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for engine in ("mori", "mori-tcp"):
        assert doc["meta"]["engines"][engine]["status"] == "ok"
        assert doc["meta"]["engines"][engine]["backend"]
        _check_rows(doc, engine, ["session", "engine"], [1, 4], [8, 65536])
    assert doc["meta"]["engines"]["mori-tcp"]["backend"] == "tcp"
    from ucx_variants import matches, unavailable as ucx_unavailable

    for variant in ("ucx-tcp", "ucx-sm"):  # the RDMA backend forced onto UCX, beside the others
        meta = doc["meta"]["engines"][f"mori-{variant}"]
        if ucx_unavailable():
            assert meta["status"] == "skipped", meta
            continue
        assert meta["status"] == "ok" and matches(variant, meta["backend"]), meta
        _check_rows(doc, f"mori-{variant}", ["session", "engine"], [1, 4], [8, 65536])


@pytest.mark.netns
@pytest.mark.skipif(bool(unavailable_reason()), reason=unavailable_reason() or "netns available")
def test_bench_io_netns_socket(tmp_path):
    proc, doc = _bench(
        tmp_path,
        "--hosts",
        "netns",
        "--only-baselines",
        "--baselines",
        "socket",
        "--sizes",
        "64K",
        "--batches",
        "1,4",
        "--budget",
        "0.02",
        "--no-latency",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert doc["meta"]["hosts"] == "netns" and "veth" in doc["meta"]["link"]
    _check_rows(doc, "socket", ["-"], [1, 4], [65536])


def test_bench_io_gpu_flag_reaches_gpu_benchmark():
    proc = subprocess.run(
        [sys.executable, "-m", "mori.apps.cli", "bench", "io", "--gpu", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: mori bench io --gpu") and "--peer-device" in proc.stdout


def test_bench_io_missing_baselines_are_skipped(tmp_path):
    """Mooncake and NIXL absent (as on CI): reported as skipped, the rest of the run goes on."""
    out = tmp_path / "io.json"
    hide = "; ".join(f"sys.modules[{m!r}] = None" for m in ("mooncake", "nixl", "nixl_cu12", "nixl_cu13"))
    code = (
        f"import sys; {hide}; from mori.apps.bench.io import main; "
        f"sys.exit(main(['--only-baselines', '--baselines', 'socket,mooncake-tcp,nixl-ucx-tcp', '--sizes', '8', "
        f"'--batches', '1', '--budget', '0.02', '--no-latency', '--max-buffer', '1M', '--json', {str(out)!r}]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    engines = json.loads(out.read_text())["meta"]["engines"]
    assert engines["socket"]["status"] == "ok"
    # The reason names the interpreter that looked (a wheel installed by another one's pip is
    # what "not installed" meant on the GPU host) and how to install it there.
    assert engines["mooncake-tcp"] == {
        "status": "skipped",
        "describe": engines["mooncake-tcp"]["describe"],
        "reason": f"no mooncake package on the path of {sys.executable} (install it "
        f"with that interpreter: PYTHON={sys.executable} "
        "scripts/bench-io-setup.sh)",
    }
    assert engines["nixl-ucx-tcp"]["status"] == "skipped" and "nixl" in engines["nixl-ucx-tcp"]["reason"]
