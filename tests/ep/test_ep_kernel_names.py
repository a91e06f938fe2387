# SPDX-License-Identifier: MIT
"""The op attributes MORI's own EP tests read (issue 29 item 16): ``_last_combine_kernel_name``
says what the last combine ran (blockwise codes, block size, weights or not, where), and
``_fp8_blockwise_combine_scale_dim`` is the scale count per row a blockwise combine of the op
uses (MORI_FP8_COMBINE_SCALE_DIM when the op was built; 0 for other quant types). One PE."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from harness import job_env

pytest.importorskip("torch")

PROGRAM = textwrap.dedent("""
    import random
    import torch
    import mori.shmem as sh
    from mori.ops import EpDispatchCombineConfig, EpDispatchCombineKernelType as K, EpDispatchCombineOp

    sh.init()
    hidden = random.choice([256, 512, 7168])
    want_dim = int(__import__("os").environ.get("MORI_FP8_COMBINE_SCALE_DIM", "56"))
    for kernel in (K.IntraNode, K.IntraNodeLL):
        for quant in ("none", "fp8_direct_cast", "fp8_blockwise", "fp4_blockwise"):
            op = EpDispatchCombineOp(EpDispatchCombineConfig(
                data_type=torch.bfloat16, rank=0, world_size=1, hidden_dim=hidden, scale_dim=0,
                scale_type_size=4, max_token_type_size=4, max_num_inp_token_per_rank=16,
                num_experts_per_rank=4, num_experts_per_token=2, kernel_type=kernel, quant_type=quant))
            blockwise = quant.endswith("blockwise")
            assert op._last_combine_kernel_name is None
            assert op._fp8_blockwise_combine_scale_dim == (want_dim if blockwise else 0), \\
                (quant, op._fp8_blockwise_combine_scale_dim)
            assert op._fp8_blockwise_combine_scale_type_size == (4 if blockwise else 0)
            for weighted in (True, False):
                x = torch.randn(int(torch.randint(1, 17, (1,))), hidden).to(torch.bfloat16)
                w = torch.rand(x.shape[0], 2)
                idx = torch.stack([torch.randperm(4)[:2] for _ in range(x.shape[0])]).to(torch.int32)
                out = op.dispatch(x, w, None, idx)
                total = int(out[4][0])
                op.combine(out[0][:total].clone(), out[1][:total].clone() if weighted else None, idx)
                name = op._last_combine_kernel_name
                block = -(-hidden // want_dim)
                tag = {"none": None, "fp8_direct_cast": "fp8cast", "fp8_blockwise": "fp8bwq",
                       "fp4_blockwise": "fp4bwq"}[quant]
                assert name.startswith(f"EpCombine{kernel.name}Kernel_bf16_") and name.endswith("_cpu"), name
                if blockwise:
                    want = f"_{tag}_block{block}_" if weighted else f"_{tag}_noweight_block{block}_"
                    assert want in name, (name, want)
                else:
                    assert "bwq" not in name and "noweight" not in name and ((tag or "?") in name) == bool(tag), name
            del op
    sh.finalize()
    print("kernel names ok")
""")


@pytest.mark.parametrize("scale_dim", [None, "20"])
def test_combine_kernel_name_and_scale_dim_are_truthful(scale_dim):
    env = job_env({"MORI_FP8_COMBINE_SCALE_DIM": scale_dim} if scale_dim else None)
    if scale_dim is None:
        env.pop("MORI_FP8_COMBINE_SCALE_DIM", None)
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 0 and "kernel names ok" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
