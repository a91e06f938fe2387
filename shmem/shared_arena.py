# SPDX-License-Identifier: MIT
"""Shared tensors: torch CPU tensors that the PEs of this host read in place.

A CPU PE's private tensors are invisible to its peers, so an EP combine from an external
input (``use_external_inp_buf=True``, the default) must first copy every row into its source's
staging buffer. Inside :func:`shared_tensors` (or everywhere, with ``MORI_SHARED_TENSORS=1``),
torch's CPU allocator serves tensors of at least :func:`shared_tensor_min_bytes` bytes from
this process's shared arena (an anonymous memory file of ``MORI_SHARED_TENSOR_BYTES`` address
space); the combine then finds its input there and its sources sum the rows straight from it,
one pass over memory fewer. Nothing else changes: the tensors are ordinary torch tensors, and
an allocation the arena cannot serve goes to torch's own allocator.

Caveats: freed blocks stay committed for the next tensor (as in a caching allocator); a fork()
child shares the arena pages it inherited with its parent and never allocates from it.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch  # the allocator module links against torch's c10, loaded here first

try:
    from mori import _shared_tensors as _native
except ImportError as exc:  # built where torch was not importable (shmem/CMakeLists.txt)
    raise ImportError(
        "mori.shmem.shared_tensors: this mori was built without torch; install torch, then rebuild "
        "(pip install --no-build-isolation -e .)"
    ) from exc


def _ensure_installed() -> None:
    _native.install()


@contextlib.contextmanager
def shared_tensors() -> Iterator[None]:
    """Scope (this thread) in which large CPU tensors are allocated in the PE's shared arena.

    Example: ``with mori.shmem.shared_tensors(): out = experts(x)``, then
    ``op.combine(out, ...)`` lets peers read ``out`` in place."""
    _ensure_installed()
    _native.enter_scope()
    try:
        yield
    finally:
        _native.exit_scope()


def enable_shared_tensors(enabled: bool = True) -> None:
    """Allocate large CPU tensors of every thread in the shared arena from now on (or stop)."""
    _ensure_installed()
    _native.set_everywhere(bool(enabled))


def shared_tensors_enabled() -> bool:
    """Whether this thread currently allocates large CPU tensors in the shared arena."""
    return _native.everywhere() or _native.scope_depth() > 0


def set_shared_tensor_min_bytes(nbytes: int) -> None:
    """Smallest tensor (bytes) taken from the arena; smaller ones stay private (default 1 MiB)."""
    if int(nbytes) < 0:
        raise ValueError(f"set_shared_tensor_min_bytes: nbytes must be >= 0, got {nbytes}")
    _native.set_min_bytes(int(nbytes))


def shared_tensor_min_bytes() -> int:
    """Smallest tensor (bytes) the shared arena serves."""
    return _native.min_bytes()


def is_shared_tensor(t: torch.Tensor) -> bool:
    """Whether every byte of ``t`` lies in this PE's shared arena."""
    if t.device.type != "cpu":
        return False
    if t.numel() == 0:
        return False
    # The span of the view: storage offset to the last element reached by the strides.
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if n > 0)
    return _native.contains(t.data_ptr(), (last + 1) * t.element_size())


def shared_tensor_stats() -> dict:
    """``reserved`` (address space), ``in_use`` (bytes of live blocks) and ``blocks`` of the arena."""
    return dict(_native.stats())


def shared_tensor_trim() -> int:
    """Give the memory of the arena's free blocks back to the system (freed tensors otherwise
    keep theirs for the next allocation); returns the bytes released. Live tensors are untouched."""
    return int(_native.trim())
