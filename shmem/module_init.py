# SPDX-License-Identifier: MIT
"""Device state for JIT-compiled modules: ``shmem_module_init(module)``.

A kernel compiled with MORI-IR's bitcode (a Triton kernel, or any cuModule linked with it)
reads this PE's ``mori::shmem::DeviceState`` from its OWN global ``mori_shmem_device_state``:
each module has a copy, so each must be filled after it is loaded and after shmem init.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from mori.core.errors import DeviceError, InvalidArgument, Unavailable
from mori.shmem import gpu

# The global the MORI-IR wrappers read (mori/ir/codegen.py emits it under this name).
STATE_SYMBOL = "mori_shmem_device_state"
_CUDA_SUCCESS, _CUDA_ERROR_NOT_FOUND = 0, 500

_lock = threading.Lock()
_libcuda: ctypes.CDLL | None = None


def _driver() -> ctypes.CDLL:
    global _libcuda
    with _lock:
        if _libcuda is None:
            try:
                lib = ctypes.CDLL("libcuda.so.1")
            except OSError as exc:
                raise Unavailable(
                    f"shmem_module_init: the CUDA driver (libcuda.so.1) cannot be loaded: {exc}"
                ) from None
            lib.cuModuleGetGlobal_v2.argtypes = [
                ctypes.POINTER(ctypes.c_uint64),
                ctypes.POINTER(ctypes.c_size_t),
                ctypes.c_void_p,
                ctypes.c_char_p,
            ]
            lib.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
            lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
            _libcuda = lib
        return _libcuda


def _check(lib: ctypes.CDLL, rc: int, what: str) -> None:
    if rc != _CUDA_SUCCESS:
        msg = ctypes.c_char_p()
        lib.cuGetErrorString(rc, ctypes.byref(msg))
        raise DeviceError(f"shmem_module_init: {what} failed: CUDA error {rc} ({(msg.value or b'?').decode()})")


def _module_handle(module: Any) -> int:
    """A CUmodule as int: an int, a ctypes pointer, or an object with ``.module`` (Triton's CompiledKernel)."""
    if hasattr(module, "module") and not isinstance(module, int):
        module = module.module
    if isinstance(module, ctypes.c_void_p):
        module = module.value
    if not isinstance(module, int) or module == 0:
        raise InvalidArgument(f"module must be a loaded CUmodule handle (int), got {module!r}")
    return module


def shmem_module_init(module: Any) -> bool:
    """Copies this PE's device state into ``module``'s ``mori_shmem_device_state`` global.

    ``module`` is a CUmodule handle (Triton: ``compiled_kernel.module`` after ``_init_handles()``,
    or the CompiledKernel itself), loaded in the current CUDA context. Call after shmem init and
    before the module's first launch. Returns False (and writes nothing) when the module does
    not contain the global, i.e. it does not use MORI-IR's device functions."""
    handle = _module_handle(module)
    lib = _driver()
    dptr, size = ctypes.c_uint64(0), ctypes.c_size_t(0)
    rc = lib.cuModuleGetGlobal_v2(
        ctypes.byref(dptr), ctypes.byref(size), ctypes.c_void_p(handle), STATE_SYMBOL.encode()
    )
    if rc == _CUDA_ERROR_NOT_FOUND:
        return False
    _check(lib, rc, f"cuModuleGetGlobal({STATE_SYMBOL})")
    state = gpu.device_state_bytes()  # raises (Unavailable) before shmem init or on a PE without a GPU heap
    if size.value != len(state):
        raise InvalidArgument(
            f"module: its {STATE_SYMBOL} is {size.value} bytes, this runtime's DeviceState is "
            f"{len(state)}: the bitcode was built from a different MORI version; rebuild it"
        )
    buf = ctypes.create_string_buffer(state, len(state))
    _check(lib, lib.cuMemcpyHtoD_v2(dptr.value, buf, len(state)), "cuMemcpyHtoD")
    return True
