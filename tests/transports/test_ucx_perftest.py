# SPDX-License-Identifier: MIT
"""Raw UCX beside ours in `mori bench shmem-c --transport ucx`: ucx_perftest's figures are
read, put in the table, and our time over raw UCX's printed as a ratio."""

from __future__ import annotations

import os
import random
import shutil

import pytest

from apps.bench import ucx_perftest
from apps.bench.shmem_c import Row, table

# `ucx_perftest -f -v` of UCX 1.13 (the client's whole stdout).
FINAL = """iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr
2000,17.142,624.521,611.138,0.01,0.01,1601,1636
"""


def test_final_figures_are_parsed():
    r = ucx_perftest.parse_final("ucp_get", 8, FINAL)
    assert (r.iters, r.us, r.GBps) == (2000, 611.138, 0.0)
    bw = ucx_perftest.parse_final("ucp_put_bw", 262144, FINAL.replace(",0.01,1601", ",512.0,1601"))
    assert bw.GBps == pytest.approx(512.0 * (1 << 20) / 1e9)
    with pytest.raises(RuntimeError, match="no final CSV"):
        ucx_perftest.parse_final("ucp_get", 8, "[1] connection refused\n")


def test_table_prints_our_time_over_raw_ucx():
    ours, raw = random.uniform(20, 400), random.uniform(20, 400)
    gb_ours, gb_raw = random.uniform(0.1, 2), random.uniform(0.1, 2)
    rows = [
        Row("mori-ucx", 2, "get_lat", 8, 10, ours, 0.0),
        Row("ucx_perftest", 2, "get_lat", 8, 10, raw, 0.0),
        Row("mori-ucx", 2, "put_bw", 262144, 10, 1.0, gb_ours),
        Row("ucx_perftest", 2, "put_bw", 262144, 10, 1.0, gb_raw),
        Row("mori-ucx", 4, "get_lat", 8, 10, ours, 0.0),
    ]
    lines = table(rows).splitlines()
    assert "vs raw ucx" in lines[1]
    get8 = next(ln for ln in lines if ln.split()[:3] == ["2", "get_lat", "8"])
    assert get8.split()[-1] == f"{ours / raw:.2f}x"
    bw = next(ln for ln in lines if ln.split()[:2] == ["2", "put_bw"])
    assert bw.split()[-1] == f"{gb_raw / gb_ours:.2f}x"  # time ratio: their bandwidth over ours
    four = next(ln for ln in lines if ln.split()[:2] == ["4", "get_lat"])
    assert four.split()[-1] == "-"  # perftest is 2 processes


def test_collectives_are_compared_with_open_mpis_spml_collectives():
    ours, default, basic = (random.uniform(20, 400) for _ in range(3))
    rows = [
        Row(impl, 4, op, 8, 10, us, 0.0)
        for op in ("fcollect", "put_lat")
        for impl, us in (("mori-ucx", ours), ("openmpi", default), ("openmpi-scoll-basic", basic))
    ]
    lines = table(rows).splitlines()
    assert "openmpi-scoll-basic" in lines[0] and "openmpi-scoll-basic" in lines[1]
    fcollect = next(ln for ln in lines if ln.split()[:2] == ["4", "fcollect"])
    assert fcollect.split()[-1] == f"{basic / ours:.2f}x"  # the same UCX underneath
    put = next(ln for ln in lines if ln.split()[:2] == ["4", "put_lat"])
    assert put.split()[-1] == f"{default / ours:.2f}x"


def test_missing_perftest_is_said(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    why = ucx_perftest.missing_reason()
    assert why and "ucx_perftest not found" in why and "ucx-utils" in why


@pytest.mark.skipif(shutil.which("ucx_perftest") is None, reason="no ucx_perftest (Debian: ucx-utils)")
def test_perftest_runs_over_ucx_tcp():
    iters = random.randint(50, 120)
    r = ucx_perftest.run_test("ucp_fadd", 8, iters, dict(os.environ, UCX_TLS="tcp"), timeout=60)
    assert r.iters == iters and r.us > 0 and r.GBps == 0.0
