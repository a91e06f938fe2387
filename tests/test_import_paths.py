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
    for name in ("shmem_torch_process_group_init", "shmem_get_unique_id", "shmem_init_attr", "shmem_mpi_init",
                 "shmem_finalize", "shmem_mype", "shmem_npes", "shmem_malloc", "shmem_malloc_align", "shmem_free",
                 "shmem_ptr_p2p", "shmem_barrier_all", "shmem_buffer_register", "shmem_buffer_deregister",
                 "MORI_SHMEM_INIT_WITH_MPI_COMM", "MORI_SHMEM_INIT_WITH_UNIQUEID"):
        assert hasattr(mori.shmem, name), name
