# SPDX-License-Identifier: MIT
"""The copy-engine allgather for CUDA tensors (``mori._C.collectives.CeAllgather``).

One engine per process, created on first use (collectively: every PE makes the same calls)
and re-created larger when a shard outgrows its staging buffer. The engine's staging buffer
is symmetric: a tensor made by :func:`symmetric_input` is read in place by the peers.
"""
from __future__ import annotations

from typing import Any, Optional

from mori import _C
from mori.core.errors import InvalidArgument, Unavailable

_native = _C.collectives
_engine: Optional[Any] = None
_engine_gen: Optional[int] = None


def available() -> bool:
    """True when this MORI was built with CUDA."""
    return bool(getattr(_native, "has_cuda", False))


def _staging_default() -> int:
    from mori.collectives.settings import setting

    return int(setting("MORI_CCL_GPU_STAGING_SIZE"))


def engine(min_staging: int = 0) -> Any:
    """The process's CeAllgather, with at least ``min_staging`` bytes of staging. Collective
    when it is created or grown (every PE asks for the same size in the same call)."""
    global _engine, _engine_gen
    if not available():
        raise Unavailable("mori.ccl: this MORI was built without CUDA; CUDA tensors cannot be gathered "
                          "(rebuild where nvcc is installed)")
    gen = _native.runtime_generation()
    if _engine is not None and (_engine_gen != gen or _engine.staging_bytes < min_staging):
        _engine = None  # the destructor waits for every PE, then unmaps
    if _engine is None:
        size = max(_staging_default(), int(min_staging))
        _engine = _native.CeAllgather(size)
        _engine_gen = gen
    return _engine


def release() -> None:
    """Drop the engine (collective)."""
    global _engine
    _engine = None


def symmetric_input(numel: int, dtype: Any) -> Any:
    """A CUDA tensor inside the engine's symmetric staging buffer: an allgather whose input is
    this tensor sends it with no extra copy. Each PE must use the same offset (same call)."""
    import torch

    elem = torch.empty((), dtype=dtype).element_size()
    eng = engine(numel * elem)
    storage = torch.cuda.current_device()
    if eng.device != storage:
        raise InvalidArgument(f"symmetric_input: the engine lives on cuda:{eng.device}, the current device is "
                              f"cuda:{storage}")
    return _tensor_at(eng.staging_ptr, numel, dtype, eng.device)


def _tensor_at(ptr: int, numel: int, dtype: Any, device: int) -> Any:
    import torch

    class _Holder:
        def __init__(self) -> None:
            self.__cuda_array_interface__ = {
                "shape": (numel * torch.empty((), dtype=dtype).element_size(),), "typestr": "|u1",
                "data": (ptr, False), "version": 3}

    raw = torch.as_tensor(_Holder(), device=f"cuda:{device}")
    return raw.view(dtype)


def all_gather(out: Any, inp: Any) -> None:
    """out (CUDA, n * numel) = every PE's inp, enqueued on the current stream."""
    import torch

    nbytes = inp.numel() * inp.element_size()
    eng = engine(nbytes)
    if out.device.index != eng.device or inp.device.index != eng.device:
        raise InvalidArgument(f"mori.ccl all_gather: tensors are on {out.device}/{inp.device} but this PE's engine "
                              f"is on cuda:{eng.device} (set torch.cuda.set_device before the first collective)")
    stream = torch.cuda.current_stream(eng.device).cuda_stream
    eng.run(out.data_ptr(), inp.data_ptr(), nbytes, stream)


def stats() -> dict:
    return dict(_engine.stats()) if _engine is not None else {"calls": 0, "zero_copy": 0, "bytes_pulled": 0}
