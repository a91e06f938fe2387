# SPDX-License-Identifier: MIT
"""MORI-EP on CPU: the correctness matrix (every kernel type, dtype, scales, zero-copy and
external buffers, routing patterns) on 2, 4 and 8 PEs, the EP guide's Complete Example,
error paths, AUTO launch rules and the fp8/bf16/fp16 conversions against torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness import check, mori_run, pe_counts, python_program

torch = pytest.importorskip("torch")

ALL = "kernels,dtypes,routing,internode"


# 8 PEs take the paths of 4 (the guide's complete example below runs 8 ranks every time).
SUITE_RUNS = [(n, ALL + ",big" if n < 8 else "kernels,routing,internode") for n in pe_counts(2, 4, also=[8])]


@pytest.mark.parametrize("n,presets", SUITE_RUNS)
def test_suite(n, presets):
    out = check(mori_run(n, python_program("ep_suite.py", "--preset", presets), timeout=240))
    assert f"on {n} PEs passed" in out


def test_suite_with_copy_threads():
    """Several copy threads per PE (the ThreadTeam paths) on 2 PEs."""
    out = check(
        mori_run(2, python_program("ep_suite.py", "--preset", "kernels,routing", "--threads", "3"), timeout=240)
    )
    assert "on 2 PEs passed" in out


def test_complete_example_from_the_guide():
    """Seed 002 section 7, device changed to CPU: 8 ranks, hidden 7168, 4096 max tokens, top-8 of 256."""
    out = check(mori_run(8, python_program("ep_complete_example.py"), timeout=240, env={"MORI_SHMEM_HEAP_SIZE": "4G"}))
    assert out.count("sent 128 tokens, received") == 8


@pytest.mark.parametrize("n", pe_counts(4, also=[2]))  # 2 and 8 PEs take the paths of 4 (test_suite runs both)
def test_blockwise_and_fp4_combine(n):
    """quant_type fp8_blockwise / fp4_blockwise (exact against a model of the wire, within MORI's
    tolerance, refused at combine where MORI refuses) and fp4 rows, every kernel type."""
    out = check(mori_run(n, python_program("ep_quant_combine.py"), timeout=240))
    assert f"ep quant combine ok on {n} PEs" in out
    # fp8: IntraNode, IntraNodeLL, AsyncLL; fp4: IntraNode, IntraNodeLL (x 2 hidden sizes); the rest refused.
    assert out.count(": combined") == 10 and out.count(": refused at combine") == 14, out
    assert out.count("fp4 rows: dispatched and combined") == 6


@pytest.mark.parametrize("n", pe_counts(4, also=[2]))  # 2 and 8 PEs take the paths of 4 (test_suite runs both)
def test_combine_reads_shared_tensors_in_place(n):
    """An external combine input in the shared tensor arena is summed in place (IntraNode,
    IntraNodeLL), staged where it must be (AsyncLL, fp8_direct_cast), exact against a torch model
    with weights in the arena / dispatch output / private / absent, mixed shared and private
    holders, and holders overwriting their input as soon as combine returns."""
    out = check(mori_run(n, python_program("ep_shared_input.py"), timeout=240))
    assert f"ep shared input ok on {n} PEs" in out and out.count("combines exact") == n


def test_combine_refuses_a_peer_that_lies_about_its_shared_input():
    """Issue 29 item 3: the last PE combines honestly from its shared tensor arena, then publishes
    one lie per round (arena size, handle, input offset, rows, row size, weights, weights offset);
    every reader's combine is a RemoteError naming that PE and the field, never a read outside
    what the reader mapped (before: a segfault, or the lie accepted). 3 PEs: two readers."""
    n = 3
    out = check(mori_run(n, python_program("ep_published_lies.py"), timeout=120))
    assert f"ep published lies refused on {n} PEs" in out
    assert out.count("refused 22 lies of PE") == n - 1, out


def test_blockwise_combine_reads_scale_dim_setting():
    """MORI_FP8_COMBINE_SCALE_DIM=20 (not MORI's 56): blocks of ceil(hidden / 20) values, exact
    against the wire model at that setting and 20 scales per row on the wire; 0 is refused."""
    out = check(
        mori_run(2, python_program("ep_quant_combine.py"), timeout=240, env={"MORI_FP8_COMBINE_SCALE_DIM": "20"})
    )
    assert "ep quant combine ok on 2 PEs" in out and out.count(": combined") == 10, out
    probe = (
        "from mori import _C\nfrom mori.ep.kernel_type import blockwise_scale_dim\n"
        "try:\n    blockwise_scale_dim()\nexcept ValueError as e:\n    print('refused:', e)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MORI_FP8_COMBINE_SCALE_DIM": "0"},
    )
    assert "refused: MORI_FP8_COMBINE_SCALE_DIM must be > 0" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("n", pe_counts(4, also=[2]))  # 2 and 8 PEs take the paths of 4 (test_suite runs both)
def test_routing_handles(n):
    """Three layers in flight, combined out of order by their handles; a handle replayed; errors."""
    out = check(mori_run(n, python_program("ep_routing.py"), timeout=200))
    assert out.count("routing handles ok") == n


@pytest.mark.parametrize("n", pe_counts(4, also=[2]))  # 2 and 8 PEs take the paths of 4 (test_suite runs both)
def test_vllm_and_sglang_call_sequences(n):
    """vLLM's and SGLang's MORI managers' calls (standard/normal and AsyncLL/low-latency; fp8 and
    mxfp4 dispatch; bf16, fp8_blockwise, fp4_blockwise combine) around a real MoE layer, against
    a plain-torch MoE."""
    out = check(mori_run(n, python_program("ep_integrations.py"), timeout=200))
    assert f"ep integrations ok on {n} PEs" in out and out.count("matches the torch MoE") == 8


@pytest.mark.parametrize("n", [1, 2, 4])
def test_errors(n):
    out = check(mori_run(n, python_program("ep_errors.py"), timeout=120))
    assert f"ep errors ok on {n} PEs" in out


def test_dead_peer_is_an_error_not_a_hang():
    out = check(mori_run(3, python_program("ep_errors.py", "--dead-peer"), timeout=120))
    assert out.count("dead peer reported") == 2


def test_auto_launch_mode_reads_tuning_rules(tmp_path):
    rules = {
        "version": "1.0",
        "gpu_arch": "cpu",
        "gpu_model": "any",
        "kernel_type": "IntraNode",
        "ep_size": 2,
        "phase": "dispatch",
        "rules": [
            {
                "dtype": "bf16",
                "num_tokens": 8,
                "hidden_dim": 64,
                "block_num": 3,
                "rdma_block_num": 0,
                "warp_per_block": 4,
            },
            {
                "dtype": "bf16",
                "num_tokens": 4096,
                "hidden_dim": 64,
                "block_num": 5,
                "rdma_block_num": 0,
                "warp_per_block": 4,
            },
        ],
    }
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(rules))
    out = check(
        mori_run(
            2,
            python_program("ep_suite.py", "--preset", "quick"),
            timeout=120,
            env={"MORI_EP_LAUNCH_CONFIG_MODE": "AUTO", "MORI_EP_TUNING_CONFIG": str(path)},
        )
    )
    assert "on 2 PEs passed" in out
    assert "auto launch config (5, 0, 4)" in out  # 16 tokens: the smallest rule with num_tokens >= 16


def test_rule_selection():
    from mori.ep.kernel_type import EpDispatchCombineKernelType as K
    from mori.ep.tuning import AUTO_FALLBACK, LaunchConfigurator, select_rule

    rules = [
        {"dtype": "bf16", "num_tokens": 128, "hidden_dim": 7168, "block_num": 1, "warp_per_block": 1},
        {"dtype": "bf16", "num_tokens": 4096, "hidden_dim": 7168, "block_num": 2, "warp_per_block": 2},
        {"dtype": "bf16", "num_tokens": 64, "hidden_dim": 4096, "block_num": 3, "warp_per_block": 3},
        {"dtype": "fp8_e4m3", "num_tokens": 64, "hidden_dim": 7168, "block_num": 4, "warp_per_block": 4},
    ]
    assert select_rule(rules, "bf16", 100, 7168, 4)["block_num"] == 1  # smallest num_tokens >= N
    assert select_rule(rules, "bf16", 200, 7168, 4)["block_num"] == 2
    assert select_rule(rules, "bf16", 9999, 7168, 4)["block_num"] == 2  # clamp to the largest
    assert select_rule(rules, "bf16", 10, 4096, 4)["block_num"] == 3  # exact hidden preferred
    combine = rules + [
        {
            "dtype": "bf16",
            "num_tokens": 256,
            "hidden_dim": 7168,
            "topk": 8,
            "zero_copy": True,
            "block_num": 5,
            "warp_per_block": 5,
        }
    ]
    assert select_rule(combine, "bf16", 10, 7168, 8)["block_num"] == 5  # exact top-k preferred
    assert select_rule(combine, "bf16", 10, 7168, 8, zero_copy=False)["block_num"] == 1
    assert select_rule(rules, "fp4", 10, 7168, 8) is None
    manual = LaunchConfigurator(K.IntraNode, 8, 8, "MANUAL")
    assert manual.resolve("dispatch", torch.device("cpu"), torch.bfloat16, 10, 64, 7, -1, 3) == (7, -1, 3)
    auto = LaunchConfigurator(K.InterNodeV1, 16, 8, "AUTO")  # no rule file for cpu: MORI's fallback
    assert (
        auto.resolve("dispatch", torch.device("cpu"), torch.bfloat16, 10, 64, 7, -1, 3) == AUTO_FALLBACK[K.InterNodeV1]
    )
    with pytest.raises(ValueError, match="MORI_EP_LAUNCH_CONFIG_MODE"):
        LaunchConfigurator(K.IntraNode, 8, 8, "FAST")


@pytest.mark.parametrize("n", pe_counts(4, also=[2]))  # 2 and 8 PEs take the paths of 4 (test_suite runs both)
def test_local_expert_count(n):
    """dispatch(call_local_expert_count=True), the split phases on every kernel type, and MORI's
    launch_local_expert_count on addresses."""
    out = check(mori_run(n, python_program("ep_local_expert_count.py"), timeout=100))
    assert out.count("local expert count ok") == n


def test_profile_spans_and_perfetto_export(tmp_path):
    """MORI_EP_PROFILE=1: a span per dispatch/combine, exported as a Chrome JSON trace."""
    out = check(mori_run(2, python_program("ep_profile.py", tmp_path), timeout=100, env={"MORI_EP_PROFILE": "1"}))
    assert out.count("ep profile ok") == 2


def test_shipped_tuning_rules():
    """The rules shipped for 2 x H200 load and give the measured launch shape for the measured cases."""
    from mori.ep.kernel_type import EpDispatchCombineKernelType as K
    from mori.ep.tuning import find_rule_file, load_rules, select_rule

    for phase, dtype, extra in (
        ("dispatch", "fp8_e4m3", {}),
        ("combine", "bf16", {"zero_copy": False, "quant_type": "none"}),
        ("combine", "bf16", {"zero_copy": True, "quant_type": "none"}),
        ("combine", "bf16", {"zero_copy": False, "quant_type": "fp8_direct_cast"}),
    ):
        path = find_rule_file("sm90", "h200", K.IntraNode, 2, phase)
        assert path is not None and path.name == f"sm90_h200_IntraNode_ep2_{phase}.json"
        rules = load_rules(path, phase)
        assert rules.phase == phase
        for tokens in (128, 4096):
            rule = select_rule(rules.rules, dtype, tokens, 7168, 8, **extra)
            assert (rule["block_num"], rule["warp_per_block"]) == (264, 16), (phase, dtype, extra, tokens)
    assert find_rule_file("sm90", "h200", K.IntraNode, 8, "dispatch") is None  # EP8 not measured yet


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e4m3fnuz", "bfloat16", "float16"])
def test_encode_matches_torch(dtype):
    """Combine's fp32 -> dtype rounding equals torch's cast, edge cases included."""
    from mori import _C
    from mori.ep.tensors import dtype_code

    dt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(7)
    vals = (
        torch.cat(
            [
                torch.randn(20000, generator=g) * 4,
                torch.randn(20000, generator=g) * 1e-3,
                torch.randn(2000, generator=g) * 300,
                torch.tensor(
                    [
                        0.0,
                        -0.0,
                        448.0,
                        464.0,
                        465.0,
                        479.0,
                        480.0,
                        500.0,
                        240.0,
                        248.0,
                        250.0,
                        1e-9,
                        -1e-9,
                        2**-9,
                        2**-10,
                        3 * 2**-10,
                        2**-7,
                        65504.0,
                        65519.0,
                        65520.0,
                        1e6,
                        3.0e-8,
                        float("inf"),
                        float("-inf"),
                        float("nan"),
                    ]
                ),
            ]
        )
        .float()
        .contiguous()
    )
    # Also every fp8 value and the midpoints between neighbours (the tie cases).
    grid = (
        torch.arange(256, dtype=torch.uint8).view(dt if "float8" in dtype else torch.uint8).float()
        if "float8" in dtype
        else torch.empty(0)
    )
    grid = grid[torch.isfinite(grid)].sort().values
    if grid.numel():
        vals = torch.cat([vals, grid, (grid[1:] + grid[:-1]) / 2]).contiguous()
    ref = vals.to(dt)
    got = torch.empty_like(ref)
    _C.ep.encode_fp32(vals.data_ptr(), got.data_ptr(), dtype_code(dt, "test"), vals.numel())
    ref_f, got_f = ref.float(), got.float()
    same = (ref_f == got_f) | (torch.isnan(ref_f) & torch.isnan(got_f))
    bad = (~same).nonzero().flatten()[:5]
    assert same.all(), [(vals[i].item(), ref_f[i].item(), got_f[i].item()) for i in bad]


@pytest.mark.parametrize("m,n", [(1, 7168), (3, 7168), (8, 2051), (13, 16), (5, 7)])
def test_fused_bf16_sum_matches_torch(m, n):
    """Combine's fused bf16 sum (registers, one pass) gives the bits of an fp32 sum in row order
    from zero, rounded once, as torch computes it; ties, NaN, infinities, -0 included."""
    from mori import _C

    g = torch.Generator().manual_seed(100 + m * n)
    rows = (torch.randn(m, n, generator=g) * torch.rand(m, 1, generator=g) * 50).to(torch.bfloat16)
    flat = rows.view(-1)
    specials = torch.tensor([float("nan"), float("inf"), -0.0, 3.0e38, -3.0e38, 1e-40], dtype=torch.bfloat16)
    flat[torch.randint(0, flat.numel(), (min(flat.numel(), 24),), generator=g)] = specials.repeat(4)[
        : min(flat.numel(), 24)
    ]
    rows = rows.contiguous()
    acc = torch.zeros(n, dtype=torch.float32)
    for r in range(m):
        acc = acc + rows[r].float()
    ref = acc.to(torch.bfloat16)
    got = torch.empty(n, dtype=torch.bfloat16)
    _C.ep.sum_rows_bf16(rows.data_ptr(), m, got.data_ptr(), n)
    same = (ref.view(torch.int16) == got.view(torch.int16)) | (torch.isnan(ref) & torch.isnan(got))
    assert same.all(), (~same).nonzero().flatten()[:5].tolist()


def test_config_defaults_match_mori():
    from mori.ops import EpDispatchCombineConfig, EpDispatchCombineKernelType as K

    assert [(k.name, k.value) for k in K] == [
        ("IntraNode", 0),
        ("InterNode", 1),
        ("InterNodeV1", 2),
        ("InterNodeV1LL", 3),
        ("AsyncLL", 4),
        ("IntraNodeLL", 5),
    ]
    c = EpDispatchCombineConfig(torch.bfloat16, 0, 8, 7168, 0, 1, 4, 4096, 32, 8)
    assert (
        c.warp_num_per_block,
        c.block_num,
        c.max_total_recv_tokens,
        c.use_external_inp_buf,
        c.kernel_type,
        c.gpu_per_node,
        c.rdma_block_num,
        c.num_qp_per_pe,
        c.quant_type,
    ) == (8, 80, 0, True, K.IntraNode, 8, 0, 1, "none")
    assert c.max_num_tokens_to_recv == 8 * 4096
    capped = EpDispatchCombineConfig(torch.bfloat16, 0, 8, 7168, 0, 1, 4, 4096, 32, 8, max_total_recv_tokens=1000)
    assert capped.max_num_tokens_to_recv == 8 * 125


@pytest.mark.netns
def test_internode_kernel_types_across_two_hosts():
    """InterNode, InterNodeV1, InterNodeV1LL and AsyncLL with 2 PEs on each of two hosts (network
    namespaces joined by veth): same-host peers over shm, the other host over the tcp transport."""
    from multihost import check_all, run_on_hosts, veth_hosts_or_skip

    vh = veth_hosts_or_skip()
    try:
        out = check_all(
            run_on_hosts(vh.hosts, 2, python_program("ep_suite.py", "--preset", "internode,hosts"), timeout=240)
        )
    finally:
        vh.destroy()
    assert "on 4 PEs passed" in out


@pytest.mark.netns
def test_blockwise_fp4_and_routing_handles_across_two_hosts():
    """The inter-node kernel types with fp4 rows and the blockwise combines (AsyncLL combines
    fp8_blockwise, the others refuse at combine), and InterNodeV1 routing handles, with 2 PEs on
    each of two hosts (network namespaces, tcp transport between them)."""
    from multihost import check_all, run_on_hosts, veth_hosts_or_skip

    vh = veth_hosts_or_skip()
    try:
        quant = check_all(run_on_hosts(vh.hosts, 2, python_program("ep_quant_combine.py", "--hosts"), timeout=240))
        routing = check_all(run_on_hosts(vh.hosts, 2, python_program("ep_routing.py", "--hosts"), timeout=240))
    finally:
        vh.destroy()
    assert "ep quant combine ok on 4 PEs" in quant and quant.count(": combined") == 2
    assert routing.count("routing handles ok (InterNodeV1)") == 4
