# SPDX-License-Identifier: MIT
"""MORI-IR: the shmem device API as LLVM bitcode, for kernels that JIT frameworks compile.

``libmori_shmem_device_<arch>.bc`` holds one ``extern "C"`` function per row of
:data:`MORI_DEVICE_FUNCTIONS` (``mori_shmem_my_pe``, ``mori_shmem_putmem_nbi_block``, ...), each
a wrapper over ``mori/shmem/device.cuh``, plus the global ``mori_shmem_device_state`` that
``mori.shmem.shmem_module_init`` fills in each compiled module. Triton: :mod:`mori.ir.triton`.
"""

from mori.ir.bitcode import cache_dir, find_bitcode, get_bitcode_path
from mori.ir.codegen import STATE_SYMBOL
from mori.ir.functions import AMO_TYPES, DEVICE_FUNCTIONS, MORI_DEVICE_FUNCTIONS, SIGNAL_ADD, SIGNAL_SET

__all__ = [
    "MORI_DEVICE_FUNCTIONS",
    "DEVICE_FUNCTIONS",
    "SIGNAL_SET",
    "SIGNAL_ADD",
    "AMO_TYPES",
    "STATE_SYMBOL",
    "find_bitcode",
    "get_bitcode_path",
    "cache_dir",
]
