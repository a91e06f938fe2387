# SPDX-License-Identifier: MIT
"""The import paths existing integrations use (vLLM, SGLang, DeepEP's MORI shim)."""

import importlib

import pytest


def test_vllm_style_imports():
    pytest.importorskip("torch")
    import mori

    mori_ops = importlib.import_module("mori.ops.dispatch_combine")
    from mori.ops.dispatch_combine import EpDispatchCombineKernelType

    assert mori_ops.EpDispatchCombineOp is mori.ops.EpDispatchCombineOp
    assert mori_ops.EpDispatchCombineConfig is mori.ep.EpDispatchCombineConfig
    assert int(EpDispatchCombineKernelType.IntraNode) == 0 and int(EpDispatchCombineKernelType.IntraNodeLL) == 5
    from mori.ops import EpDispatchCombineConfig, EpDispatchCombineOp  # noqa: F401


def test_aliases_are_the_same_modules():
    import mori
    import mori.ccl
    import mori.collectives
    import mori.ep
    import mori.ops

    assert mori.ops is mori.ep and mori.ccl is mori.collectives
    assert mori.cpp is mori._C and hasattr(mori.cpp, "shmem")
    assert isinstance(mori.__version__, str)
    for name in (
        "shmem_torch_process_group_init",
        "shmem_get_unique_id",
        "shmem_init_attr",
        "shmem_mpi_init",
        "shmem_finalize",
        "shmem_mype",
        "shmem_npes",
        "shmem_malloc",
        "shmem_malloc_align",
        "shmem_free",
        "shmem_ptr_p2p",
        "shmem_barrier_all",
        "shmem_buffer_register",
        "shmem_buffer_deregister",
        "MORI_SHMEM_INIT_WITH_MPI_COMM",
        "MORI_SHMEM_INIT_WITH_UNIQUEID",
    ):
        assert hasattr(mori.shmem, name), name


def test_mori_names_of_later_additions():
    """MORI's kernel_profiler module, its ccl class API and launch_local_expert_count."""
    pytest.importorskip("torch")
    import mori.ccl
    import mori.ep.profiler
    import mori.kernel_profiler
    import mori.ops

    assert mori.kernel_profiler is mori.ep.profiler and callable(mori.kernel_profiler.export_to_perfetto)
    from mori.ccl import AllGatherIntoTensor, AllgatherSdma, DataType, size_of  # noqa: F401
    from mori.ops import launch_local_expert_count  # noqa: F401

    assert size_of(DataType.BFloat16) == 2 and int(DataType.Float64) == 11


def test_build_scripts_never_import_an_installed_mori(tmp_path):
    """The build runs ir/codegen.py as a script, where an installed mori may be stale or broken
    (CI once failed so: a stale editable install's mori._C lacked a name)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    fake = tmp_path / "shadow" / "mori"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise AttributeError('the installed mori must not be imported')\n")
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "wrappers.cu"
    env = dict(os.environ, PYTHONPATH=str(fake.parent))
    subprocess.run(
        [sys.executable, str(root / "ir" / "codegen.py"), str(out)], check=True, env=env, cwd=tmp_path, timeout=60
    )
    assert "mori_shmem_device_state" in out.read_text()
