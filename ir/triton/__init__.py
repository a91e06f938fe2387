# SPDX-License-Identifier: MIT
"""MORI-IR for Triton: the device functions, the extern library, and module initialization.

    from mori.ir.triton import get_extern_libs, install_hook, mori_shmem_device
    install_hook()                      # every compiled kernel gets this PE's device state
    kernel[grid](..., extern_libs=get_extern_libs())
"""
from __future__ import annotations

from typing import Any

from mori.ir.bitcode import find_bitcode
from mori.ir.triton import device as mori_shmem_device
from mori.ir.triton.device import LIB_NAME

_hook_installed = False


def get_extern_libs(arch: str | None = None) -> dict[str, str]:
    """``extern_libs=`` for a Triton launch: {"mori_shmem_device": path of the bitcode for `arch`}."""
    return {LIB_NAME: find_bitcode(arch)}


def init_kernel(kernel: Any) -> bool:
    """Copies this PE's device state into a compiled Triton kernel's module (loading it first).
    Returns False when the kernel does not use MORI-IR (its module has no state global)."""
    from mori.shmem import shmem_module_init
    if getattr(kernel, "module", None) is None:
        kernel._init_handles()
    return shmem_module_init(kernel.module)


def _compiled_kernel(kwargs: dict) -> Any:
    """The CompiledKernel a jit_post_compile_hook call is about (Triton keeps it in the JIT cache)."""
    jit_function = kwargs["fn"].jit_function
    device = kwargs["compile"]["device"]
    caches = jit_function.device_caches[device]
    cache = caches[0] if isinstance(caches, tuple) else caches
    return cache.get(kwargs["key"])


def install_hook() -> None:
    """Sets Triton's ``jit_post_compile_hook`` so that every kernel compiled (or loaded from
    Triton's cache) gets this PE's device state before its first launch. A hook already set
    is kept and called first. Call after shmem init, before the first launch."""
    global _hook_installed
    if _hook_installed:
        return
    from triton import knobs

    previous = knobs.runtime.jit_post_compile_hook

    def hook(*args: Any, **kwargs: Any) -> Any:
        result = previous(*args, **kwargs) if previous is not None else None
        kernel = _compiled_kernel(kwargs)
        if kernel is not None:
            init_kernel(kernel)
        return result

    knobs.runtime.jit_post_compile_hook = hook
    _hook_installed = True


__all__ = ["get_extern_libs", "install_hook", "init_kernel", "mori_shmem_device", "find_bitcode"]
