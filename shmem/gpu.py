# SPDX-License-Identifier: MIT
"""The GPU symmetric heap from Python: binding, stream-ordered RMA and barriers, and
what a kernel needs (the device-state pointer, peer base addresses).

A PE is bound to a GPU when ``MORI_DEVICE`` is set, or when torch's CUDA is initialized
at shmem init (``torch.cuda.set_device(local_rank)`` before ``shmem_torch_process_group_init``):
the runtime then allocates a ``MORI_SHMEM_GPU_HEAP_SIZE`` device heap, maps every
P2P-reachable peer's heap, and MORI's ``shmem_malloc`` returns device addresses.

Streams are ``None`` (torch's current stream, else the legacy default stream), a raw
``cudaStream_t`` int, or any object with ``cuda_stream`` (torch) or ``ptr`` (cupy). Every
``*_on_stream`` call only enqueues work, so it can be captured in a CUDA graph.
"""

from __future__ import annotations

import sys
from typing import Any

from mori import _C
from mori.core.errors import InvalidArgument

_native = _C.shmem

# The runtime's enums (mori._C.shmem.SignalOp / Cmp, IntEnums): the C++ values, not copies.
SIGNAL_SET, SIGNAL_ADD = _native.SignalOp.SET, _native.SignalOp.ADD
CMP_EQ, CMP_NE, CMP_GT, CMP_LE, CMP_LT, CMP_GE = (
    _native.Cmp.EQ,
    _native.Cmp.NE,
    _native.Cmp.GT,
    _native.Cmp.LE,
    _native.Cmp.LT,
    _native.Cmp.GE,
)


def bind_current_device() -> int:
    """Tell the next shmem init which GPU this PE uses: torch's current device when torch's CUDA
    is initialized, else none (``MORI_DEVICE`` overrides both). Returns the device or -1."""
    device = -1
    torch = sys.modules.get("torch")
    if torch is not None and _native.built_with_cuda():
        try:
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                device = int(torch.cuda.current_device())
        except Exception:  # a broken CUDA install means "no GPU", not a failed init
            device = -1
    _native.bind_device(device)
    return device


def is_bound() -> bool:
    """Whether this PE has a GPU symmetric heap."""
    return bool(_native.gpu_bound())


def device() -> int:
    """The CUDA device of this PE's GPU heap, or -1."""
    return int(_native.gpu_device())


def heap_base() -> int:
    return int(_native.gpu_heap_base())


def heap_size() -> int:
    return int(_native.gpu_heap_size())


def heap_free() -> int:
    return int(_native.gpu_heap_free())


def contains(addr: int) -> bool:
    """Whether ``addr`` lies in this PE's GPU symmetric heap."""
    return bool(_native.gpu_contains(int(addr)))


def reachable(pe: int) -> bool:
    """Whether ``pe``'s GPU heap is mapped here (kernels can load/store it, copy engines reach it)."""
    return bool(_native.gpu_reachable(int(pe)))


def transport_name(pe: int) -> str:
    """The transport of ``pe``'s GPU memory: "cuda", or "none"."""
    return str(_native.device_transport_name(int(pe)))


def device_state_ptr() -> int:
    """Device address of this PE's ``mori::shmem::DeviceState`` (device_state.h): pass it to a
    kernel that includes ``mori/shmem/device.cuh``."""
    return int(_native.device_state_ptr())


def device_state_bytes() -> bytes:
    """The same struct as bytes, for kernels that take it by value."""
    return bytes(_native.device_state_bytes())


def peer_bases() -> list[int]:
    """Every PE's GPU heap base as mapped in this process (0: not reachable). The address of
    symmetric ``x`` on PE ``pe`` is ``peer_bases()[pe] + (x - heap_base())``."""
    return [int(p) for p in _native.gpu_peer_bases()]


def stream_handle(stream: Any = None) -> int:
    """A ``cudaStream_t`` as int from None / int / torch or cupy stream objects."""
    if stream is None:
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            return int(torch.cuda.current_stream().cuda_stream)
        return 0
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr", "handle"):
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    raise InvalidArgument(
        f"stream must be None, an int cudaStream_t, or a torch/cupy stream, got {type(stream).__name__}"
    )


def _addr(x: Any, what: str) -> int:
    if isinstance(x, int):
        return x
    if hasattr(x, "data_ptr"):
        return int(x.data_ptr())
    raise InvalidArgument(f"{what} must be an int address or a tensor, got {type(x).__name__}")


def putmem_on_stream(
    dst: Any, src: Any, nbytes: int, pe: int, stream: Any = None, engine: str = "copy", blocks: int = 0
) -> None:
    """Enqueue a put of ``nbytes`` from local ``src`` to symmetric ``dst`` on ``pe``.

    engine="copy" uses the copy engines (cudaMemcpyAsync, no SMs); engine="sm" launches a
    kernel of ``blocks`` thread blocks (0: four per SM) that stores over NVLink."""
    if nbytes < 0:
        raise InvalidArgument(f"putmem_on_stream: nbytes must be >= 0, got {nbytes}")
    d, s, h = _addr(dst, "dst"), _addr(src, "src"), stream_handle(stream)
    if engine == "copy":
        _native.put_on_stream(d, s, int(nbytes), int(pe), h)
    elif engine == "sm":
        _native.put_sm_on_stream(d, s, int(nbytes), int(pe), int(blocks), h)
    else:
        raise InvalidArgument(f"putmem_on_stream: engine must be 'copy' or 'sm', got {engine!r}")


def getmem_on_stream(dst: Any, src: Any, nbytes: int, pe: int, stream: Any = None) -> None:
    """Enqueue a copy-engine get of ``nbytes`` from symmetric ``src`` on ``pe`` into local ``dst``."""
    if nbytes < 0:
        raise InvalidArgument(f"getmem_on_stream: nbytes must be >= 0, got {nbytes}")
    _native.get_on_stream(_addr(dst, "dst"), _addr(src, "src"), int(nbytes), int(pe), stream_handle(stream))


def putmem_signal_on_stream(
    dst: Any, src: Any, nbytes: int, signal: Any, value: int, sig_op: int, pe: int, stream: Any = None
) -> None:
    """Enqueue put + signal: after the data has landed on ``pe``, its uint64 ``signal`` is set to /
    increased by ``value`` (release, system scope)."""
    if nbytes < 0:
        raise InvalidArgument(f"putmem_signal_on_stream: nbytes must be >= 0, got {nbytes}")
    _native.put_signal_on_stream(
        _addr(dst, "dst"),
        _addr(src, "src"),
        int(nbytes),
        _addr(signal, "signal"),
        int(value),
        int(sig_op),
        int(pe),
        stream_handle(stream),
    )


def signal_wait_until_on_stream(signal: Any, cmp: int, value: int, stream: Any = None) -> None:
    """Stall ``stream`` until the local uint64 ``signal`` compares true against ``value``."""
    _native.signal_wait_until_on_stream(_addr(signal, "signal"), int(cmp), int(value), stream_handle(stream))


def shmem_barrier_on_stream(stream: Any = None) -> None:
    """Enqueue a barrier of all PEs on ``stream`` (MORI's function): it completes once every PE's
    stream has reached its own barrier, and work enqueued before it on any PE (puts included) is
    visible to work enqueued after it on every PE. On a PE without a GPU (a CPU job) there is
    no stream to order: it is a host barrier of all PEs."""
    if not is_bound():
        _native.barrier_all()
        return
    _native.barrier_on_stream(stream_handle(stream))


def synchronize_device() -> None:
    """Wait for all work on this PE's GPU (helper for tests and shutdown paths)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize(device())


__all__ = [
    "SIGNAL_SET",
    "SIGNAL_ADD",
    "CMP_EQ",
    "CMP_NE",
    "CMP_GT",
    "CMP_LE",
    "CMP_LT",
    "CMP_GE",
    "bind_current_device",
    "is_bound",
    "device",
    "heap_base",
    "heap_size",
    "heap_free",
    "contains",
    "reachable",
    "transport_name",
    "device_state_ptr",
    "device_state_bytes",
    "peer_bases",
    "stream_handle",
    "putmem_on_stream",
    "getmem_on_stream",
    "putmem_signal_on_stream",
    "signal_wait_until_on_stream",
    "shmem_barrier_on_stream",
]
