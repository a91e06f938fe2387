# SPDX-License-Identifier: MIT
"""MORI-CCL collectives on CUDA tensors: 2 GPUs, and every GPU of the machine when it has more
(skipped without 2)."""

from __future__ import annotations

import pytest

from harness import check, gpu_pe_counts, mori_run, python_program

torch = pytest.importorskip("torch")

_PES = gpu_pe_counts(torch.cuda.device_count() if torch.cuda.is_available() else 0)
needs_gpus = pytest.mark.skipif(not _PES, reason="needs 2 CUDA GPUs (or MORI_TEST_GPU_PES and one)")


@pytest.mark.gpu
@needs_gpus
@pytest.mark.timeout(600)
@pytest.mark.parametrize("pes", _PES)
def test_ccl_gpu_collectives(pes):
    from mori import _C

    if not getattr(_C.collectives, "has_cuda", False):
        pytest.skip("MORI built without CUDA")
    out = check(mori_run(pes, python_program("ccl_gpu_suite.py"), timeout=280 + 30 * pes))
    assert out.count("ccl gpu suite ok") == pes
