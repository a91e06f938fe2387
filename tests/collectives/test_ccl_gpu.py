# SPDX-License-Identifier: MIT
"""Copy-engine allgather on 2 GPUs (skipped without them)."""
from __future__ import annotations

import pytest

from harness import check, mori_run, python_program

torch = pytest.importorskip("torch")

needs_gpus = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                reason="needs 2 CUDA GPUs")


@pytest.mark.gpu
@needs_gpus
@pytest.mark.timeout(300)
def test_ce_allgather_2gpus():
    from mori import _C

    if not getattr(_C.collectives, "has_cuda", False):
        pytest.skip("MORI built without CUDA")
    out = check(mori_run(2, python_program("ccl_gpu_suite.py"), timeout=280))
    assert out.count("ccl gpu suite ok") == 2
