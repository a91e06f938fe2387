# SPDX-License-Identifier: MIT
"""mori.shmem: OpenSHMEM-style symmetric memory.

Two faces over one runtime:

* MORI's functions (``shmem_torch_process_group_init``, ``shmem_malloc``, ``shmem_ptr_p2p``, ...),
  with the same names and return values as ROCm/mori, addresses as ints;
* a Pythonic API on symmetric numpy arrays and torch tensors (``init``, ``zeros``, ``put``,
  ``get``, ``atomic_add``, ``wait_until``, ``barrier_all``, ...).
"""

from mori import _C
from mori.shmem.api import (
    MORI_SHMEM_INIT_WITH_MPI_COMM,
    MORI_SHMEM_INIT_WITH_UNIQUEID,
    shmem_barrier_all,
    shmem_buffer_deregister,
    shmem_buffer_register,
    shmem_ext_malloc_with_flags,
    shmem_finalize,
    shmem_fence,
    shmem_free,
    shmem_getmem,
    shmem_get_unique_id,
    shmem_init,
    shmem_init_attr,
    shmem_initialized,
    shmem_malloc,
    shmem_malloc_align,
    shmem_mpi_init,
    shmem_mype,
    shmem_npes,
    shmem_num_qp_per_pe,
    shmem_ptr_p2p,
    shmem_putmem,
    shmem_putmem_nbi,
    shmem_quiet,
    shmem_torch_process_group_init,
)
from mori.shmem.arrays import (
    CMP_EQ,
    CMP_GE,
    CMP_GT,
    CMP_LE,
    CMP_LT,
    CMP_NE,
    SIGNAL_ADD,
    SIGNAL_SET,
    Session,
    array,
    atomic_add,
    atomic_and,
    atomic_compare_swap,
    atomic_fetch,
    atomic_fetch_add,
    atomic_fetch_and,
    atomic_fetch_inc,
    atomic_fetch_or,
    atomic_fetch_xor,
    atomic_inc,
    atomic_or,
    atomic_set,
    atomic_swap,
    atomic_xor,
    barrier_all,
    empty,
    fence,
    finalize,
    free,
    full,
    g,
    get,
    iget,
    init,
    iput,
    my_pe,
    n_pes,
    p,
    heap_free,
    heap_size,
    ptr,
    put,
    put_signal,
    quiet,
    signal_fetch,
    tensor,
    test,
    topology,
    transport_name,
    wait_until,
    zeros,
)
from mori.shmem.gpu import shmem_barrier_on_stream

from mori.shmem.module_init import shmem_module_init

# The runtime's enums (C++: transports/include/mori/transports/transport.h, shmem/runtime.h).
AmoOp, SignalOp, Cmp, ThreadLevel = _C.shmem.AmoOp, _C.shmem.SignalOp, _C.shmem.Cmp, _C.shmem.ThreadLevel

# MORI's torch tensor helpers import torch: loaded on first use (mori.shmem.tensor_utils).
_TENSOR_HELPERS = (
    "MoriShmemBuffer",
    "mori_shmem_create_tensor",
    "symm_mori_shmem_tensor",
    "mori_shmem_free_tensor",
    "mori_shmem_create_tensor_list_intra_node",
)
# Shared tensors (mori.shmem.shared_tensors) import torch too.
_SHARED_TENSORS = (
    "shared_tensors",
    "enable_shared_tensors",
    "shared_tensors_enabled",
    "is_shared_tensor",
    "set_shared_tensor_min_bytes",
    "shared_tensor_min_bytes",
    "shared_tensor_stats",
    "shared_tensor_trim",
)


def __getattr__(name: str):
    if name in _TENSOR_HELPERS:
        from mori.shmem import tensor_utils

        return getattr(tensor_utils, name)
    if name in _SHARED_TENSORS:
        from mori.shmem import shared_arena as module

        return getattr(module, name)
    raise AttributeError(f"module 'mori.shmem' has no attribute {name!r}")
