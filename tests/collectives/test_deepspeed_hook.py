# SPDX-License-Identifier: MIT
"""DeepSpeed ZeRO-3 on CPU (2 ranks, gloo): the same training without the hook, with it, and
with a size cap that sends the large all-gathers back to DeepSpeed: losses and final
parameters bit-identical, counters show who handled what, uninstall restores DeepSpeed."""

from __future__ import annotations

import json

import pytest

from harness import check, mori_run, python_program

pytest.importorskip("torch")
pytest.importorskip("deepspeed", reason="deepspeed is not installed (pip install deepspeed==0.19.8)")


@pytest.mark.timeout(240)
def test_zero3_bit_identical_with_hook():
    out = check(mori_run(2, python_program("ds_zero3.py"), timeout=230, env={"MORI_SPIN_ITERATIONS": "200"}))
    lines = [l for l in out.splitlines() if "ds-zero3 ok" in l]
    assert len(lines) == 2, out[-3000:]
    for line in lines:
        report = json.loads(line.split("ds-zero3 ok ", 1)[1])
        assert report["stats"]["handled"].get("allgather_fn", 0) > 0  # ZeRO-3's coalesced fetch path
        assert not report["stats"]["fallback"]


def test_env_switch_installs(monkeypatch):
    pytest.importorskip("deepspeed.comm")
    import importlib
    import sys

    import deepspeed.comm as dscomm

    original = dscomm.allgather_fn
    monkeypatch.setenv("MORI_DEEPSPEED", "1")
    sys.modules.pop("mori.apps.deepspeed", None)
    mds = importlib.import_module("mori.apps.deepspeed")
    try:
        assert mds.installed() and dscomm.allgather_fn is not original
        assert dscomm.allgather_fn.__wrapped__ is original
    finally:
        mds.uninstall()
    assert dscomm.allgather_fn is original and not mds.installed()


@pytest.mark.timeout(240)
def test_deepspeeds_builtin_mori_path_builds_and_runs_our_handle():
    """DeepSpeed 0.19.8's own MORI path (deepspeed/comm/mori.py, DS_SDMA_ALLGATHER=1) builds
    mori.ccl.AllGatherIntoTensor from this MORI and its calls gather bit-exactly."""
    out = check(mori_run(2, python_program("ds_builtin_mori.py"), timeout=230, env={"MORI_SPIN_ITERATIONS": "200"}))
    assert out.count("deepspeed builtin mori ok") == 2, out[-3000:]
