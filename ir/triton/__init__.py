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


def _on_module_load(module: Any, function: Any, name: str, *args: Any, **kwargs: Any) -> None:
    """Triton's kernel_load_end_hook: a kernel's module was just loaded into the current context."""
    from mori.shmem import shmem_module_init

    shmem_module_init(module)


def _on_post_compile(*args: Any, **kwargs: Any) -> None:
    """Triton's jit_post_compile_hook (older Triton without kernel_load_end_hook)."""
    jit_function = kwargs["fn"].jit_function
    caches = jit_function.device_caches[kwargs["compile"]["device"]]
    kernel = (caches[0] if isinstance(caches, tuple) else caches).get(kwargs["key"])
    if kernel is not None:
        init_kernel(kernel)


def install_hook() -> None:
    """Makes Triton fill every kernel module it loads with this PE's device state: the module's
    ``mori_shmem_device_state`` is written right after load, before any launch (modules that do
    not use MORI-IR are left alone). Uses ``knobs.runtime.kernel_load_end_hook`` (Triton >= 3.4),
    else ``jit_post_compile_hook`` (chained after a hook already set). Call after shmem init."""
    global _hook_installed
    if _hook_installed:
        return
    from triton import knobs

    chain = getattr(knobs.runtime, "kernel_load_end_hook", None)
    if chain is not None and hasattr(chain, "add"):
        chain.add(_on_module_load)
    else:
        previous = knobs.runtime.jit_post_compile_hook

        def hook(*args: Any, **kwargs: Any) -> Any:
            result = previous(*args, **kwargs) if previous is not None else None
            _on_post_compile(*args, **kwargs)
            return result

        knobs.runtime.jit_post_compile_hook = hook
    _hook_installed = True


__all__ = ["get_extern_libs", "install_hook", "init_kernel", "mori_shmem_device", "find_bitcode"]
