# SPDX-License-Identifier: MIT
"""Host collectives (mori.ccl on CPU tensors) on 2, 4 and 8 PEs: every dtype, odd sizes,
chunked staging, symmetric (zero-copy) inputs, uneven all-to-all, error paths; and mori.ccl
beside the C API in one process."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from harness import check, mori_run, pe_counts, python_program

pytest.importorskip("torch")

# Short spins: the suite runs oversubscribed on CI's 2 cores.
ENV = {"MORI_SPIN_ITERATIONS": "200"}


@pytest.mark.timeout(150)
def test_suite_2pes_chunked():
    # 4 KiB chunks: every staged call larger than that runs in several double-buffered rounds.
    out = check(mori_run(2, python_program("ccl_suite.py"), timeout=140, env={**ENV, "MORI_CCL_CHUNK_SIZE": "4K"}))
    assert out.count("ccl suite ok") == 2


@pytest.mark.timeout(120)
def test_suite_4pes():
    out = check(mori_run(4, python_program("ccl_suite.py", "--quick"), timeout=110, env=ENV))
    assert out.count("ccl suite ok") == 4


@pytest.mark.timeout(150)
# 8 PEs with 8 KiB chunks: with MORI_TEST_ALL_PE_COUNTS=1 (21 s on CI's 2 cores; the 4-PE and
# two-host suites take the same code paths).
@pytest.mark.skipif(8 not in pe_counts(4, also=[8]), reason="CI time: set MORI_TEST_ALL_PE_COUNTS=1")
def test_suite_8pes():
    out = check(
        mori_run(8, python_program("ccl_suite.py", "--quick"), timeout=140, env={**ENV, "MORI_CCL_CHUNK_SIZE": "8K"})
    )
    assert out.count("ccl suite ok") == 8


@pytest.mark.timeout(150)
@pytest.mark.parametrize("pes", pe_counts(2, also=[4]))  # 4: 8 s of CI; the same calls as 2
def test_mori_class_api(pes):
    """AllGatherIntoTensor (DeepSpeed's MORI hook's call) and AllgatherSdma on CPU memory."""
    out = check(mori_run(pes, python_program("ccl_handles.py"), timeout=140, env=ENV))
    assert out.count("ccl handles ok") == pes


@pytest.mark.timeout(200)
@pytest.mark.parametrize("pes", [2, 3, 4])
def test_ccl_and_capi_share_the_engine(pes):
    """The C API's world collectives and mori.ccl's, interleaved in one process: one engine,
    separate groups (ccl_capi_mix.py)."""
    seed = random.getrandbits(32)
    prog = [sys.executable, str(Path(__file__).parent / "ccl_capi_mix.py"), str(seed)]
    out = check(mori_run(pes, prog, timeout=190, env=ENV))
    assert out.count("ccl+capi mix ok") == pes, f"seed {seed}"


@pytest.mark.netns
@pytest.mark.timeout(300)
def test_suite_across_two_hosts():
    """2 PEs on each of two hosts (network namespaces joined by veth): same-host peers over shm,
    the other host over the tcp transport."""
    from multihost import check_all, run_on_hosts, veth_hosts_or_skip

    vh = veth_hosts_or_skip()
    try:
        out = check_all(run_on_hosts(vh.hosts, 2, python_program("ccl_suite.py", "--quick"), timeout=280, env=ENV))
    finally:
        vh.destroy()
    assert out.count("ccl suite ok") == 4
