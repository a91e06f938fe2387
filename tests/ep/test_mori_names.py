# SPDX-License-Identifier: MIT
"""MORI's EP names that code imports directly: ``mori.cpp``'s native EP classes,
``mori.ops.tuning_config`` as a module, ``warmup_jit_kernels``, the op's size helpers.
(The handle, which needs shmem, is exercised by tests/programs/ep_errors.py.)"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")


def test_mori_cpp_exports_moris_ep_classes():
    import mori.cpp
    from mori.cpp import (  # noqa: F401 (importing the names is the check)
        EpDispatchCombineConfig,
        EpDispatchCombineHandle,
        EpDispatchCombineKernelType,
        EpDispatchCombineQuantType,
        get_cur_device_wall_clock_freq_mhz,
    )
    from mori.ops import EpDispatchCombineKernelType as K

    assert EpDispatchCombineKernelType is K and EpDispatchCombineQuantType.Fp8DirectCast.value == 1
    c = EpDispatchCombineConfig(
        rank=1,
        world_size=4,
        hidden_dim=7168,
        max_num_inp_token_per_rank=4096,
        num_experts_per_rank=32,
        num_experts_per_token=8,
        max_total_recv_tokens=1000,
    )
    # The native defaults (pybind's), and the size methods.
    assert (
        c.scale_dim,
        c.warp_num_per_block,
        c.block_num,
        c.use_external_inp_buf,
        c.kernel_type,
        c.gpu_per_node,
        c.rdma_block_num,
        c.num_qp_per_pe,
        c.quant_type,
    ) == (0, 0, 0, True, K.IntraNode, 8, 0, 1, EpDispatchCombineQuantType.None_)
    assert c.max_num_tokens_to_send_per_rank() == 4096 and c.max_num_tokens_to_send() == 4 * 4096
    assert c.max_num_tokens_to_recv_per_rank() == 250 and c.max_num_tokens_to_recv() == 1000
    c.max_total_recv_tokens = 0  # fields are read-write
    assert c.max_num_tokens_to_recv() == 4 * 4096
    assert get_cur_device_wall_clock_freq_mhz() == 1000
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        mori.cpp.NoSuchThing  # noqa: B018


def test_tuning_config_module():
    import mori.ep.tuning_config
    import mori.ops.tuning_config as tc
    from mori.ops import EpDispatchCombineKernelType as K

    assert tc is mori.ep.tuning_config
    import mori.ops.dispatch_combine
    import mori.ops.local_expert_count

    assert mori.ops.dispatch_combine is mori.ep.dispatch_combine
    assert mori.ops.local_expert_count.launch_local_expert_count is mori.ops.launch_local_expert_count
    assert tc.kernel_type_to_config_str(K.InterNodeV1LL) == "InterNodeV1LL"
    assert tc.kernel_type_to_config_str("AsyncLL") == "AsyncLL" and tc.kernel_type_to_config_str(5) == "IntraNodeLL"
    with pytest.raises(ValueError, match="kernel_type"):
        tc.kernel_type_to_config_str("Nowhere")
    assert tc.quant_type_to_config_str("None_") == "none"
    assert tc.quant_type_to_config_str(mori.ops.EpDispatchCombineQuantType.Fp8DirectCast) == "fp8_direct_cast"
    with pytest.raises(ValueError, match="quant_type"):
        tc.quant_type_to_config_str("int3")
    assert (
        tc.dtype_to_config_str(torch.bfloat16) == "bf16" and tc.dtype_to_config_str(torch.float8_e4m3fn) == "fp8_e4m3"
    )
    assert tc.CONFIG_STR_TO_DTYPE["fp8_e4m3_fnuz"] is torch.float8_e4m3fnuz
    with pytest.raises(KeyError):
        tc.dtype_to_config_str(torch.int64)
    assert tc.build_config_filename("sm90", "IntraNode", 2, "h200", "combine") == "sm90_h200_IntraNode_ep2_combine.json"
    assert tc.build_config_filename("sm90", "IntraNode", 2) == "sm90_IntraNode_ep2_dispatch.json"
    assert tc.detect_gpu_model() is None or isinstance(tc.detect_gpu_model(), str)
    # The shipped H200 rules through MORI's manager.
    shipped = tc.config_path_for("sm90", "IntraNode", 2, "h200", "combine")
    assert shipped.name == "sm90_h200_IntraNode_ep2_combine.json" and shipped.is_file()
    assert tc.config_path_for("sm90", "IntraNode", 2, "h100", "combine") == shipped  # any model of the arch
    mgr = tc.TuningConfigManager.get_instance("sm90", K.IntraNode, 2, "h200")
    assert mgr is tc.TuningConfigManager.get_instance("sm90", "IntraNode", 2, "h200")
    assert mgr.dispatch_rules and mgr.combine_rules
    assert tc.TuningConfigManager.lookup(mgr.dispatch_rules, torch.float8_e4m3fn, 4096, 7168) == tc.LaunchParams(
        264, 0, 16
    )
    assert tc.TuningConfigManager.lookup(
        mgr.combine_rules, torch.bfloat16, 128, 7168, zero_copy=False, quant_type="fp8_direct_cast"
    ) == tc.LaunchParams(264, 0, 16)
    assert tc.TuningConfigManager.lookup(mgr.dispatch_rules, torch.int64, 1, 1) is None
    empty = tc.TuningConfigManager.get_instance("cpu", "InterNodeV1", 64)
    assert empty.dispatch_rules == [] and empty.combine_rules == []


def test_save_tuning_result_keeps_the_best(tmp_path):
    import mori.ops.tuning_config as tc

    path = tmp_path / "sub" / "x_combine.json"
    meta = {"gpu_arch": "cpu", "kernel_type": "IntraNode", "ep_size": 2, "phase": "combine"}
    base = {
        "dtype": "bf16",
        "num_tokens": 128,
        "hidden_dim": 64,
        "zero_copy": False,
        "quant_type": "none",
        "rdma_block_num": 0,
    }
    tc.TuningConfigManager.save_tuning_result(
        path, meta, {**base, "block_num": 4, "warp_per_block": 8, "bandwidth_gbps": 10.0}, "combine"
    )
    tc.TuningConfigManager.save_tuning_result(
        path, meta, {**base, "block_num": 9, "warp_per_block": 9, "bandwidth_gbps": 5.0}, "combine"
    )  # worse: kept out
    tc.TuningConfigManager.save_tuning_result(
        path, meta, {**base, "num_tokens": 16, "block_num": 2, "warp_per_block": 2, "bandwidth_gbps": 1.0}, "combine"
    )
    data = json.loads(path.read_text())
    assert data["version"] == "1.0" and data["gpu_arch"] == "cpu"
    assert [(r["num_tokens"], r["block_num"]) for r in data["rules"]] == [(16, 2), (128, 4)]
    tc.TuningConfigManager.save_tuning_result(
        path, meta, {**base, "block_num": 7, "warp_per_block": 7, "bandwidth_gbps": 20.0}, "combine"
    )  # better: replaces
    rules = json.loads(path.read_text())["rules"]
    assert [(r["num_tokens"], r["block_num"]) for r in rules] == [(16, 2), (128, 7)]
    assert tc.TuningConfigManager.lookup(rules, torch.bfloat16, 100, 64, False, "none") == tc.LaunchParams(7, 0, 7)
    with pytest.raises(ValueError, match="phase"):
        tc.TuningConfigManager.save_tuning_result(path, meta, base, "middle")


def test_warmup_jit_kernels_and_sizes():
    from mori.ops import EpDispatchCombineConfig, EpDispatchCombineKernelType as K
    from mori.ops.dispatch_combine import warmup_jit_kernels

    for k in K:
        assert warmup_jit_kernels(k) is None  # compiled ahead of time: nothing to do, and no error
    with pytest.raises(ValueError, match="kernel_type"):
        warmup_jit_kernels(17)
    c = EpDispatchCombineConfig(torch.bfloat16, 0, 8, 7168, 0, 1, 4, 4096, 32, 8)
    assert c.max_num_tokens_to_send_per_rank == 4096
