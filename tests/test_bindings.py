# SPDX-License-Identifier: MIT
"""Python takes its enums and the EP config's field list from the C++ side, and mori/_C.pyi is
the stub of the module this build makes (issue 30 item 9). Fast: no PEs are started."""

from __future__ import annotations

import ast
import dataclasses
import enum
import importlib.util
import pickle
import random
from pathlib import Path

import pytest

from mori import _C

ROOT = Path(__file__).resolve().parents[1]


def test_python_constants_are_the_native_enums():
    import mori.shmem as sh
    from mori.ccl import ReduceOp
    from mori.core.errors import InvalidArgument, MoriError, Status, Timeout
    from mori.ops import EpDispatchCombineKernelType, EpDispatchCombineQuantType
    from mori.shmem import arrays

    # mori.ccl's ReduceOp is the core's (bound from C++) restricted to the ops mori.ccl implements.
    assert [(m.name, int(m)) for m in ReduceOp] == [("SUM", 0), ("MAX", 1), ("MIN", 2)]
    assert all(int(m) == int(_C.core.ReduceOp[m.name]) for m in ReduceOp)
    assert EpDispatchCombineKernelType is _C.ep.EpDispatchCombineKernelType
    assert EpDispatchCombineQuantType is _C.ep.EpDispatchCombineQuantType
    assert [m.name for m in EpDispatchCombineKernelType] == [
        "IntraNode",
        "InterNode",
        "InterNodeV1",
        "InterNodeV1LL",
        "AsyncLL",
        "IntraNodeLL",
    ]
    assert [int(m) for m in EpDispatchCombineKernelType] == list(range(6))
    assert [m.name for m in EpDispatchCombineQuantType] == [
        "None_",
        "Fp8DirectCast",
        "Fp8BlockwiseQuant",
        "Fp4BlockwiseQuant",
    ]
    assert (sh.CMP_EQ, sh.CMP_NE, sh.CMP_GT, sh.CMP_LE, sh.CMP_LT, sh.CMP_GE) == tuple(_C.shmem.Cmp)
    assert (sh.CMP_EQ, sh.CMP_GE) == (0, 5) and (sh.SIGNAL_SET, sh.SIGNAL_ADD) == (0, 1)
    assert sh.SIGNAL_ADD is _C.shmem.SignalOp.ADD
    assert arrays._AMO["fetch_add"] is _C.shmem.AmoOp.FETCH_ADD and len(arrays._AMO) == 12
    assert InvalidArgument.status is Status.INVALID_ARGUMENT and Timeout.status == 7
    assert MoriError.status is Status.INTERNAL
    for cls in (ReduceOp, EpDispatchCombineKernelType, _C.shmem.AmoOp, _C.shmem.Cmp, Status, _C.core.LogLevel):
        assert issubclass(cls, enum.IntEnum), cls


def test_enum_members_behave_as_before():
    from mori.ops import EpDispatchCombineKernelType as K
    from mori.ops import EpDispatchCombineQuantType as Q

    member = random.choice(list(K))
    assert str(member) == member.name and K(int(member)) is member and K[member.name] is member
    assert pickle.loads(pickle.dumps(member)) is member
    q = random.choice(list(Q))
    assert str(q) == q.name and pickle.loads(pickle.dumps(q)) is q
    with pytest.raises(ValueError):
        K(6)


def test_native_errors_map_by_the_bound_status():
    from mori.core.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="size"):
        _C.core.parse_size(f"{random.randrange(1, 99)}Q")


def test_ep_config_fields_are_the_native_list():
    from mori.ops import EpDispatchCombineConfig, EpDispatchCombineKernelType

    native = _C.ep.config_fields()
    fields = [f for f in dataclasses.fields(EpDispatchCombineConfig) if f.name != "data_type"]
    assert [f.name for f in fields] == [name for name, _, _ in native]
    defaults = {name: default for name, _, default in native}
    for f in fields:
        if f.default is not dataclasses.MISSING:
            value = f.default
            if f.name == "quant_type":
                from mori.ep.kernel_type import normalize_quant_type

                value = normalize_quant_type(value)
            assert int(value) == defaults[f.name], f.name
    rng = random.Random()
    values = {name: rng.randrange(1, 2**20) for name, kind, _ in native if kind == "int"}
    cfg = EpDispatchCombineConfig(
        data_type=None,
        **values,
        use_external_inp_buf=False,
        kernel_type=EpDispatchCombineKernelType.AsyncLL,
        quant_type="fp8_blockwise",
    )
    threads = rng.randrange(1, 64)
    out = cfg.native(threads)
    assert list(out) == [name for name, _, _ in native] + ["num_threads"]
    assert {k: out[k] for k in values} == values and out["num_threads"] == threads
    assert (out["use_external_inp_buf"], out["kernel_type"], out["quant_type"]) == (False, 4, 2)
    with pytest.raises(ValueError, match="block_num"):
        dataclasses.replace(cfg, block_num=2**31).native()
    with pytest.raises(ValueError, match="kernel_type"):
        dataclasses.replace(cfg, kernel_type=17).native()


def test_cpp_config_face_keeps_its_fields():
    from mori.cpp import EpDispatchCombineConfig as CppConfig

    rng = random.Random()
    hidden, ranks = rng.randrange(8, 4096), rng.randrange(2, 9)
    c = CppConfig(
        rank=1,
        world_size=ranks,
        hidden_dim=hidden,
        max_num_inp_token_per_rank=rng.randrange(1, 512),
        quant_type="fp8_direct_cast",
    )
    py = c.to_python()
    assert (py.hidden_dim, py.world_size, py.warp_num_per_block, py.block_num) == (hidden, ranks, 0, 0)
    assert int(py.quant_type) == 1 and c.max_num_tokens_to_send() == ranks * c.max_num_inp_token_per_rank


def test_stub_is_current_and_typed_marker_ships():
    assert (ROOT / "mori" / "py.typed").exists()
    stub = (ROOT / "mori" / "_C.pyi").read_text()
    tree = ast.parse(stub)
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    assert {"core", "shmem", "collectives", "ep", "io", "umbp"} <= classes
    if not _C.shmem.built_with_cuda():
        pytest.skip("mori/_C.pyi describes a CUDA build; this build has no CUDA parts to compare")
    spec = importlib.util.spec_from_file_location("gen_stubs", ROOT / "scripts" / "gen_stubs.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.generate() == stub, "mori/_C.pyi is stale: run python scripts/gen_stubs.py"
