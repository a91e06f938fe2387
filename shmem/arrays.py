# SPDX-License-Identifier: MIT
"""A Pythonic shmem API: symmetric numpy arrays and torch tensors, RMA and atomics on them.

    import numpy as np
    import mori.shmem as sh

    with sh.init():
        x = sh.zeros(1024, dtype=np.float32)       # symmetric: the same array exists on every PE
        sh.put(x, np.arange(1024, dtype=np.float32), pe=(sh.my_pe() + 1) % sh.n_pes())
        sh.barrier_all()
        counter = sh.zeros(1, dtype=np.int64)
        sh.atomic_add(counter, 1, pe=0)
        sh.free(x)

Every allocation is collective (same calls, same order, on every PE). Arrays may be
sliced: RMA on a view addresses the same elements on the target PE.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import numpy as np

from mori import _C
from mori.core.errors import InvalidArgument
from mori.shmem import api

_native = _C.shmem

# Comparisons (OpenSHMEM SHMEM_CMP_* numbering) and signal operations.
CMP_EQ, CMP_NE, CMP_GT, CMP_LE, CMP_LT, CMP_GE = range(6)
SIGNAL_SET, SIGNAL_ADD = 0, 1
_CMP_NAMES = {"==": CMP_EQ, "!=": CMP_NE, ">": CMP_GT, "<=": CMP_LE, "<": CMP_LT, ">=": CMP_GE}

# AmoOp numbering of the native core (transports/include/mori/transports/transport.h).
_AMO = {"fetch": 0, "set": 1, "swap": 2, "compare_swap": 3, "add": 4, "fetch_add": 5, "and": 6, "fetch_and": 7,
        "or": 8, "fetch_or": 9, "xor": 10, "fetch_xor": 11}
_NUM_SIGNED, _NUM_UNSIGNED, _NUM_FLOAT = 0, 1, 2

Shape = Union[int, Sequence[int]]


@dataclass
class Session:
    """Returned by :func:`init`; finalizes on leaving a ``with`` block."""

    my_pe: int
    n_pes: int

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        if _native.initialized():
            finalize()


def init(launch: Any = None) -> Session:
    """Initialize from the launcher's environment (see :func:`mori.shmem.shmem_init`). Collective."""
    api.shmem_init(launch)
    return Session(my_pe(), n_pes())


def finalize() -> None:
    api.shmem_finalize()


def my_pe() -> int:
    return _native.my_pe()


def n_pes() -> int:
    return _native.n_pes()


def barrier_all() -> None:
    _native.barrier_all()


def fence() -> None:
    _native.fence()


def quiet() -> None:
    _native.quiet()


# ---------------------------------------------------------------- allocation


def _shape(shape: Shape) -> tuple[int, ...]:
    return (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)


def _allocate(shape: Shape, dtype: Any, alignment: int = 64, barrier: bool = True) -> np.ndarray:
    shape, dtype = _shape(shape), np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = max(count * dtype.itemsize, 1)
    addr = _native.malloc(nbytes, alignment, barrier)
    buf = (ctypes.c_char * nbytes).from_address(addr)
    return np.frombuffer(buf, dtype=dtype, count=count).reshape(shape)


def empty(shape: Shape, dtype: Any = np.float64, alignment: int = 64) -> np.ndarray:
    """An uninitialized symmetric numpy array. Collective (ends with a barrier)."""
    return _allocate(shape, dtype, alignment)


def full(shape: Shape, fill_value: Any, dtype: Any = None) -> np.ndarray:
    """A symmetric numpy array filled with ``fill_value``. Collective (ends with a barrier,
    so no peer's write can be overwritten by the fill)."""
    a = _allocate(shape, dtype if dtype is not None else np.asarray(fill_value).dtype, barrier=False)
    a.fill(fill_value)
    _native.barrier_all()
    return a


def zeros(shape: Shape, dtype: Any = np.float64) -> np.ndarray:
    """A zero-filled symmetric numpy array. Collective."""
    return full(shape, 0, dtype)


def array(obj: Any, dtype: Any = None) -> np.ndarray:
    """A symmetric copy of an array-like. Collective (same shape on every PE)."""
    src = np.asarray(obj, dtype=dtype)
    a = _allocate(src.shape, src.dtype, barrier=False)
    a[...] = src
    _native.barrier_all()
    return a


def tensor(shape: Shape, dtype: Any = None) -> Any:
    """A zero-filled torch CPU tensor on the symmetric heap (zero-copy). Collective."""
    import torch

    dtype = dtype or torch.float32
    shape = _shape(shape)
    elem = torch.empty((), dtype=dtype).element_size()
    nbytes = max(int(np.prod(shape, dtype=np.int64)) * elem, 1)
    addr = _native.malloc(nbytes, 64, False)
    buf = (ctypes.c_char * nbytes).from_address(addr)
    t = torch.frombuffer(buf, dtype=dtype, count=int(np.prod(shape, dtype=np.int64))).reshape(shape)
    t.zero_()
    _native.barrier_all()
    return t


def _as_array(obj: Any) -> np.ndarray:
    """A numpy view of a symmetric numpy array or CPU torch tensor (no copy)."""
    if isinstance(obj, np.ndarray):
        return obj
    if hasattr(obj, "data_ptr") and hasattr(obj, "numpy"):
        if obj.device.type != "cpu":
            raise InvalidArgument(f"expected a CPU tensor here, got one on {obj.device}")
        try:
            return obj.numpy()
        except TypeError as exc:  # e.g. bfloat16 has no numpy dtype
            raise InvalidArgument(f"dtype {obj.dtype} has no element-wise shmem operations") from exc
    raise InvalidArgument(f"expected a numpy array or torch tensor, got {type(obj).__name__}")


def _address(obj: Any) -> int:
    if isinstance(obj, np.ndarray):
        return obj.__array_interface__["data"][0]
    if hasattr(obj, "data_ptr"):
        return obj.data_ptr()
    raise InvalidArgument(f"expected a numpy array or torch tensor, got {type(obj).__name__}")


def _base_address(obj: Any) -> int:
    """Start of the allocation that ``obj`` (an array, tensor or view) came from."""
    base = obj
    if isinstance(obj, np.ndarray):
        while isinstance(base.base, np.ndarray):
            base = base.base
    return _address(base)


def free(obj: Any) -> None:
    """Free the symmetric allocation behind an array or tensor made by this module. Collective."""
    _native.free(_base_address(obj))


# ---------------------------------------------------------------- RMA


def _as_contiguous(obj: Any) -> tuple[int, int, Any]:
    """(address, nbytes, keep-alive) of an array-like source/destination."""
    if hasattr(obj, "data_ptr"):  # torch
        if not obj.is_contiguous():
            raise InvalidArgument("torch tensor must be contiguous for RMA")
        return obj.data_ptr(), obj.numel() * obj.element_size(), obj
    arr = np.asarray(obj)
    if not arr.flags.c_contiguous:
        raise InvalidArgument("array must be C-contiguous for RMA (use mori.shmem.iput/iget for strides)")
    return arr.__array_interface__["data"][0], arr.nbytes, arr


def put(dest: Any, source: Any, pe: int, nbi: bool = False) -> None:
    """Copy ``source`` (any array-like) into the symmetric ``dest`` on PE ``pe``."""
    daddr, dbytes, _ = _as_contiguous(dest)
    src = source
    if isinstance(dest, np.ndarray) and not hasattr(source, "data_ptr"):
        src = np.ascontiguousarray(source, dtype=dest.dtype)
    saddr, sbytes, keep = _as_contiguous(src)
    if sbytes > dbytes:
        raise InvalidArgument(f"put: source has {sbytes} bytes but dest only {dbytes}")
    _native.put(daddr, saddr, sbytes, pe, nbi)
    del keep


def get(dest: Any, source: Any, pe: int, nbi: bool = False) -> None:
    """Copy the symmetric ``source`` on PE ``pe`` into the local array ``dest``."""
    daddr, dbytes, _ = _as_contiguous(dest)
    saddr, sbytes, _ = _as_contiguous(source)
    if dbytes > sbytes:
        raise InvalidArgument(f"get: dest has {dbytes} bytes but source only {sbytes}")
    _native.get(daddr, saddr, dbytes, pe, nbi)


def iput(dest: np.ndarray, source: np.ndarray, dst_stride: int, src_stride: int, nelems: int, pe: int) -> None:
    """Strided put of ``nelems`` elements (strides in elements)."""
    _native.iput(_address(dest), _address(source), dst_stride, src_stride, nelems, np.asarray(source).itemsize, pe)


def iget(dest: np.ndarray, source: np.ndarray, dst_stride: int, src_stride: int, nelems: int, pe: int) -> None:
    """Strided get of ``nelems`` elements (strides in elements)."""
    _native.iget(_address(dest), _address(source), dst_stride, src_stride, nelems, np.asarray(dest).itemsize, pe)


def p(dest: np.ndarray, value: Any, pe: int, index: int = 0) -> None:
    """Store one element ``value`` at ``dest[index]`` on PE ``pe``."""
    dest = _as_array(dest)
    one = np.asarray([value], dtype=dest.dtype)
    _native.put(_address(dest) + index * dest.itemsize, _address(one), dest.itemsize, pe, False)


def g(source: np.ndarray, pe: int, index: int = 0) -> Any:
    """Load ``source[index]`` from PE ``pe``."""
    source = _as_array(source)
    one = np.empty(1, dtype=source.dtype)
    _native.get(_address(one), _address(source) + index * source.itemsize, source.itemsize, pe, False)
    return one[0]


def put_signal(dest: Any, source: Any, signal: np.ndarray, value: int, sig_op: int, pe: int,
               nbi: bool = False) -> None:
    """Put ``source`` into ``dest`` on ``pe``, then update the uint64 ``signal[0]`` there with
    ``sig_op`` (SIGNAL_SET or SIGNAL_ADD): a PE that sees the signal also sees the data."""
    _check_signal(signal)
    daddr, dbytes, _ = _as_contiguous(dest)
    saddr, sbytes, keep = _as_contiguous(np.ascontiguousarray(source, dtype=dest.dtype)
                                         if isinstance(dest, np.ndarray) else source)
    if sbytes > dbytes:
        raise InvalidArgument(f"put_signal: source has {sbytes} bytes but dest only {dbytes}")
    _native.put_signal(daddr, saddr, sbytes, _address(signal), int(value), int(sig_op), pe, nbi)
    del keep


def signal_fetch(signal: np.ndarray) -> int:
    _check_signal(signal)
    return _native.signal_fetch(_address(signal))


def _check_signal(signal: np.ndarray) -> None:
    if hasattr(signal, "numpy") and not isinstance(signal, np.ndarray):
        signal = _as_array(signal)
    if not isinstance(signal, np.ndarray) or signal.dtype != np.uint64:
        raise InvalidArgument("signal must be a symmetric numpy array of dtype uint64")


# ---------------------------------------------------------------- atomics


def _word(target: np.ndarray, op: str) -> tuple[int, int]:
    if not isinstance(target, np.ndarray):
        raise InvalidArgument(f"atomic target must be a symmetric numpy array, got {type(target).__name__}")
    dt = target.dtype
    if dt.kind in "iu" and dt.itemsize in (4, 8):
        return dt.itemsize, (_NUM_SIGNED if dt.kind == "i" else _NUM_UNSIGNED)
    if dt.kind == "f" and dt.itemsize in (4, 8) and op in ("fetch", "set", "swap", "compare_swap"):
        return dt.itemsize, _NUM_FLOAT
    raise InvalidArgument(f"atomic {op} is not defined for dtype {dt} (int32/int64/uint32/uint64"
                          f"{'; float32/float64 for fetch/set/swap/compare_swap' if dt.kind == 'f' else ''})")


def _to_bits(value: Any, dtype: np.dtype) -> int:
    return int(np.asarray(value, dtype=dtype).view(np.uint64 if dtype.itemsize == 8 else np.uint32))


def _from_bits(bits: int, dtype: np.dtype) -> Any:
    raw = np.asarray(bits, dtype=np.uint64 if dtype.itemsize == 8 else np.uint32)
    return raw.view(dtype)[()]


def _amo(op: str, target: np.ndarray, value: Any, pe: int, index: int, compare: Any = 0) -> Any:
    target = _as_array(target)
    width, _ = _word(target, op)
    dt = target.dtype
    old = _native.atomic(_address(target) + index * dt.itemsize, _AMO[op], width, _to_bits(value, dt),
                         _to_bits(compare, dt), pe)
    return _from_bits(old, dt)


def atomic_fetch(target: np.ndarray, pe: int, index: int = 0) -> Any:
    return _amo("fetch", target, 0, pe, index)


def atomic_set(target: np.ndarray, value: Any, pe: int, index: int = 0) -> None:
    _amo("set", target, value, pe, index)


def atomic_swap(target: np.ndarray, value: Any, pe: int, index: int = 0) -> Any:
    return _amo("swap", target, value, pe, index)


def atomic_compare_swap(target: np.ndarray, cond: Any, value: Any, pe: int, index: int = 0) -> Any:
    """Store ``value`` if the target equals ``cond``; returns the old value either way."""
    return _amo("compare_swap", target, value, pe, index, compare=cond)


def atomic_add(target: np.ndarray, value: Any, pe: int, index: int = 0) -> None:
    _amo("add", target, value, pe, index)


def atomic_fetch_add(target: np.ndarray, value: Any, pe: int, index: int = 0) -> Any:
    return _amo("fetch_add", target, value, pe, index)


def atomic_inc(target: np.ndarray, pe: int, index: int = 0) -> None:
    _amo("add", target, 1, pe, index)


def atomic_fetch_inc(target: np.ndarray, pe: int, index: int = 0) -> Any:
    return _amo("fetch_add", target, 1, pe, index)


def atomic_and(target: np.ndarray, value: Any, pe: int, index: int = 0) -> None:
    _amo("and", target, value, pe, index)


def atomic_fetch_and(target: np.ndarray, value: Any, pe: int, index: int = 0) -> Any:
    return _amo("fetch_and", target, value, pe, index)


def atomic_or(target: np.ndarray, value: Any, pe: int, index: int = 0) -> None:
    _amo("or", target, value, pe, index)


def atomic_fetch_or(target: np.ndarray, value: Any, pe: int, index: int = 0) -> Any:
    return _amo("fetch_or", target, value, pe, index)


def atomic_xor(target: np.ndarray, value: Any, pe: int, index: int = 0) -> None:
    _amo("xor", target, value, pe, index)


def atomic_fetch_xor(target: np.ndarray, value: Any, pe: int, index: int = 0) -> Any:
    return _amo("fetch_xor", target, value, pe, index)


# ---------------------------------------------------------------- point-to-point sync


def _cmp(cmp: Union[int, str]) -> int:
    if isinstance(cmp, str):
        if cmp not in _CMP_NAMES:
            raise InvalidArgument(f"cmp must be one of {sorted(_CMP_NAMES)} or a CMP_* constant, got {cmp!r}")
        return _CMP_NAMES[cmp]
    if cmp not in range(6):
        raise InvalidArgument(f"cmp must be a CMP_* constant (0..5), got {cmp}")
    return int(cmp)


def _wait_word(ivar: np.ndarray) -> tuple[int, int]:
    if not isinstance(ivar, np.ndarray):
        raise InvalidArgument("ivar must be a symmetric numpy array")
    dt = ivar.dtype
    if dt.kind in "iu" and dt.itemsize in (1, 2, 4, 8):
        return dt.itemsize, (_NUM_SIGNED if dt.kind == "i" else _NUM_UNSIGNED)
    if dt.kind == "f" and dt.itemsize in (4, 8):
        return dt.itemsize, _NUM_FLOAT
    raise InvalidArgument(f"cannot wait on dtype {dt}")


def wait_until(ivar: np.ndarray, cmp: Union[int, str], value: Any, index: int = 0) -> Any:
    """Block until ``ivar[index] <cmp> value`` holds locally; returns the value seen.
    Fails (instead of hanging) if a peer dies while we wait."""
    ivar = _as_array(ivar)
    width, num = _wait_word(ivar)
    seen = _native.wait_until(_address(ivar) + index * ivar.itemsize, _cmp(cmp), _to_bits(value, ivar.dtype)
                              if width >= 4 else int(value) & ((1 << (8 * width)) - 1), width, num)
    return _from_bits(seen, ivar.dtype) if width >= 4 else np.asarray(seen).astype(ivar.dtype)[()]


def test(ivar: np.ndarray, cmp: Union[int, str], value: Any, index: int = 0) -> bool:
    """Whether ``ivar[index] <cmp> value`` holds now."""
    ivar = _as_array(ivar)
    width, num = _wait_word(ivar)
    bits = _to_bits(value, ivar.dtype) if width >= 4 else int(value) & ((1 << (8 * width)) - 1)
    return _native.test(_address(ivar) + index * ivar.itemsize, _cmp(cmp), bits, width, num)


def ptr(obj: Any, pe: int) -> Optional[np.ndarray]:
    """A numpy view of ``obj``'s counterpart on ``pe`` when it is directly addressable, else None."""
    addr = _native.ptr(_address(obj), pe)
    if not addr:
        return None
    arr = np.asarray(obj)
    buf = (ctypes.c_char * arr.nbytes).from_address(addr)
    return np.frombuffer(buf, dtype=arr.dtype).reshape(arr.shape)


def transport_name(pe: int) -> str:
    """The transport that reaches ``pe`` ("shm", "tcp", ...)."""
    return _native.transport_name(pe)


def topology() -> dict:
    """Node, local rank, host and pid of every PE."""
    return _native.topology()


def heap_size() -> int:
    """Bytes of this PE's symmetric heap (MORI_SHMEM_HEAP_SIZE)."""
    return _native.heap_size()


def heap_free() -> int:
    """Bytes of the symmetric heap not allocated."""
    return _native.heap_free()
