# SPDX-License-Identifier: MIT
"""EpDispatchCombineOp on CUDA tensors, one process per GPU launched by `mori run -n 2`
(each PE bound to GPU LOCAL_RANK before shmem init, buffers on the shmem GPU heap)."""

from __future__ import annotations

import pytest

from harness import check, gpu_pe_counts, mori_run, python_program

torch = pytest.importorskip("torch")

from mori import _C  # noqa: E402

# 2 PEs, and every GPU of the machine when it has more (EP8 on an 8-GPU node).
_PES = gpu_pe_counts(torch.cuda.device_count() if torch.cuda.is_available() else 0)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _PES, reason="needs 2 CUDA GPUs (or MORI_TEST_GPU_PES and one)"),
    pytest.mark.skipif(not getattr(_C.ep, "cuda_built", False), reason="MORI built without CUDA"),
]


# PASS lines per PE: a line per dtype/kernel case, per kernel, or one.
_LINES = {"dtypes": 8, "fp8_cast": 3, "standard_moe": 2, "blockwise": 6, "fp4_rows": 4}


@pytest.mark.parametrize("pes", _PES)
@pytest.mark.parametrize("staging", ["bulk", "pipelined"])  # MORI_EP_COMBINE_STAGING
@pytest.mark.parametrize(
    "checks", ["dtypes", "zero_copy async_ll errors", "graph", "fp8_cast standard_moe", "blockwise routing", "fp4_rows"]
)
def test_gpu_op(checks, staging, pes):
    names = checks.split()
    out = check(
        mori_run(
            pes,
            python_program("ep_gpu_op_suite.py", *names),
            timeout=150 + 30 * pes,
            env={"MORI_EP_COMBINE_STAGING": staging},
        )
    )
    for name in names:
        assert out.count(f"PASS {name}") == pes * _LINES.get(name, 1), out


@pytest.mark.parametrize("pes", _PES)
def test_gpu_blockwise_at_another_scale_dim(pes):
    """MORI_FP8_COMBINE_SCALE_DIM=28 (not MORI's 56): hidden 7168 in blocks of 256, on CUDA, against
    the wire model at that setting (the CPU path's)."""
    out = check(
        mori_run(
            pes,
            python_program("ep_gpu_op_suite.py", "blockwise"),
            timeout=150 + 30 * pes,
            env={"MORI_FP8_COMBINE_SCALE_DIM": "28"},
        )
    )
    assert out.count("PASS blockwise") == pes * _LINES["blockwise"], out


@pytest.mark.skipif(
    torch.cuda.is_available() and torch.cuda.device_count() < 2,
    reason="the guide's example binds GPU `rank`: needs 2 GPUs",
)
def test_gpu_complete_example_from_the_guide():
    """Seed 002 section 7 as written (CUDA device, nccl), 2 ranks, one GPU each."""
    out = check(mori_run(2, python_program("ep_complete_example.py", "cuda"), timeout=150))
    assert out.count("sent 128 tokens, received") == 2
