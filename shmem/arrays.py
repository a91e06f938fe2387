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
import math
import operator
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import numpy as np

from mori import _C
from mori.core.errors import InvalidArgument, OutOfMemory
from mori.shmem import api
from mori.shmem.gpu import CMP_EQ, CMP_GE, CMP_GT, CMP_LE, CMP_LT, CMP_NE, SIGNAL_ADD, SIGNAL_SET

_native = _C.shmem

# Comparisons (OpenSHMEM SHMEM_CMP_* numbering) and signal operations are the runtime's enums
# (mori.shmem.gpu takes them from mori._C.shmem).
_CMP_NAMES = {"==": CMP_EQ, "!=": CMP_NE, ">": CMP_GT, "<=": CMP_LE, "<": CMP_LT, ">=": CMP_GE}
# Atomic operations by the names the AMO functions below use ("fetch_add", ...).
_AMO = {op.name.lower(): op for op in _native.AmoOp}
_NUM_SIGNED, _NUM_UNSIGNED, _NUM_FLOAT = _native.Num.SIGNED, _native.Num.UNSIGNED, _native.Num.FLOAT

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


# numpy's NPY_MAXDIMS: an array of more dimensions cannot be made, so such a shape is refused
# before any heap byte is taken.
_MAX_NDIM = 64 if int(np.__version__.split(".")[0]) >= 2 else 32


def _shape(shape: Shape, caller: str) -> tuple[int, ...]:
    """``shape`` as a tuple of non-negative ints; InvalidArgument naming it otherwise."""
    if isinstance(shape, (int, np.integer)):
        dims: tuple[int, ...] = (int(shape),)
    else:
        try:
            dims = tuple(operator.index(s) for s in shape)
        except TypeError:
            raise InvalidArgument(f"{caller}: shape must be an int or a sequence of ints, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise InvalidArgument(f"{caller}: shape {dims} has a negative dimension")
    if len(dims) > _MAX_NDIM:
        raise InvalidArgument(f"{caller}: shape has {len(dims)} dimensions, numpy allows at most {_MAX_NDIM}")
    return dims


def _heap_bytes(dims: tuple[int, ...], itemsize: int, caller: str) -> int:
    """Bytes of an allocation of ``dims`` elements of ``itemsize`` bytes (at least 1: every array
    has its own address). Python ints do not wrap, so an overflowing shape is seen here."""
    nbytes = math.prod(dims) * itemsize
    if nbytes >= 1 << 63:
        raise OutOfMemory(f"{caller}: shape {dims} needs {nbytes} bytes, more than any address space")
    if math.prod(d for d in dims if d) * itemsize >= 1 << 63:  # numpy refuses it even without elements
        raise InvalidArgument(f"{caller}: shape {dims} is too large for numpy to index, though it has no elements")
    return max(nbytes, 1)


def _numpy_dtype(dtype: Any, caller: str) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise InvalidArgument(f"{caller}: dtype {dtype!r} is not a numpy dtype ({exc})") from None
    if dt.hasobject:
        raise InvalidArgument(f"{caller}: dtype {dt} holds Python objects, which cannot live in symmetric memory")
    if dt.itemsize == 0:
        raise InvalidArgument(f"{caller}: dtype {dt} has no size")
    return dt


def _wrap_heap(addr: int, nbytes: int, make: Any) -> Any:
    """``make(buffer)`` over the ``nbytes`` at ``addr``; frees the block (no barrier: every PE
    fails alike) if making the array fails, so no heap bytes leak."""
    try:
        return make((ctypes.c_char * nbytes).from_address(addr))
    except BaseException:
        _native.free(addr, False)
        raise


def _allocate(shape: Shape, dtype: Any, alignment: int = 64, barrier: bool = True, caller: str = "empty") -> np.ndarray:
    dims, dt = _shape(shape, caller), _numpy_dtype(dtype, caller)
    nbytes = _heap_bytes(dims, dt.itemsize, caller)
    addr = _native.malloc(nbytes, alignment, barrier)
    return _wrap_heap(addr, nbytes, lambda buf: np.ndarray(dims, dt, buffer=buf))


def empty(shape: Shape, dtype: Any = np.float64, alignment: int = 64) -> np.ndarray:
    """An uninitialized symmetric numpy array. Collective (ends with a barrier).
    Raises InvalidArgument for a bad shape or dtype, MemoryError when the heap cannot hold it."""
    return _allocate(shape, dtype, alignment)


def full(shape: Shape, fill_value: Any, dtype: Any = None) -> np.ndarray:
    """A symmetric numpy array filled with ``fill_value``. Collective (ends with a barrier,
    so no peer's write can be overwritten by the fill)."""
    dt = _numpy_dtype(dtype if dtype is not None else np.asarray(fill_value).dtype, "full")
    value = _scalar(fill_value, dt, "fill_value", "full")  # before allocating: a bad value leaks nothing
    a = _allocate(shape, dt, barrier=False, caller="full")
    a.fill(value)
    _native.barrier_all()
    return a


def zeros(shape: Shape, dtype: Any = np.float64) -> np.ndarray:
    """A zero-filled symmetric numpy array. Collective."""
    return full(shape, 0, dtype)


def array(obj: Any, dtype: Any = None) -> np.ndarray:
    """A symmetric copy of an array-like. Collective (same shape on every PE)."""
    src = np.asarray(obj, dtype=dtype)
    a = _allocate(src.shape, src.dtype, barrier=False, caller="array")
    a[...] = src
    _native.barrier_all()
    return a


def tensor(shape: Shape, dtype: Any = None) -> Any:
    """A zero-filled torch CPU tensor on the symmetric heap (zero-copy). Collective."""
    import torch

    dtype = dtype or torch.float32
    if not isinstance(dtype, torch.dtype):
        raise InvalidArgument(f"tensor: dtype must be a torch.dtype, got {dtype!r}")
    dims = _shape(shape, "tensor")
    nbytes = _heap_bytes(dims, dtype.itemsize, "tensor")
    addr = _native.malloc(nbytes, 64, False)
    count = math.prod(dims) * dtype.itemsize  # bytes the tensor spans (the block has at least 1)
    t = _wrap_heap(addr, nbytes, lambda buf: torch.frombuffer(buf, dtype=torch.uint8)[:count].view(dtype).reshape(dims))
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
    elif hasattr(obj, "untyped_storage"):  # torch: an empty tensor's data_ptr() is 0, its storage's is not
        return obj.untyped_storage().data_ptr()
    return _address(base)


def free(obj: Any) -> None:
    """Free the symmetric allocation behind an array or tensor made by this module. Collective."""
    _native.free(_base_address(obj))


# ---------------------------------------------------------------- argument checks
# Every argument that becomes an address is checked here, in Python ints (which do not wrap),
# before any byte moves: a bad one is InvalidArgument naming it, never a write elsewhere.


def _integer(value: Any, name: str, caller: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise InvalidArgument(f"{caller}: {name} must be an integer, got {type(value).__name__}") from None


def _pe(pe: Any, caller: str) -> int:
    pe, n = _integer(pe, "pe", caller), _native.n_pes()
    if not 0 <= pe < n:
        raise InvalidArgument(f"{caller}: PE {pe} is out of range (the job has PEs 0..{n - 1})")
    return pe


def _element_address(arr: np.ndarray, index: Any, caller: str, name: str = "index") -> int:
    """Address of element ``index`` of ``arr`` in C (flattened) order, views included."""
    index = _integer(index, name, caller)
    if not 0 <= index < arr.size:
        raise InvalidArgument(f"{caller}: {name} {index} is out of range for an array of {arr.size} elements")
    addr = arr.__array_interface__["data"][0]
    if arr.ndim == 1:
        return addr + index * arr.strides[0]
    return addr + sum(int(i) * st for i, st in zip(np.unravel_index(index, arr.shape), arr.strides))


def _scalar(value: Any, dtype: np.dtype, name: str, caller: str) -> np.ndarray:
    """``value`` as a 0-d array of ``dtype``; InvalidArgument when it is not one such value."""
    try:
        out = np.asarray(value, dtype=dtype)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidArgument(f"{caller}: {name} {value!r} is not a {dtype} value ({exc})") from None
    if out.ndim != 0:
        raise InvalidArgument(f"{caller}: {name} must be one value, got an array of shape {out.shape}")
    return out


def _dtype_name(obj: Any) -> str:
    """ "float32", "int64", "bfloat16"...: the same name for a numpy array and a torch tensor."""
    return str(obj.dtype).removeprefix("torch.")


def _same_dtype(dest: Any, source: Any, caller: str) -> None:
    if _dtype_name(dest) != _dtype_name(source):
        raise InvalidArgument(
            f"{caller}: dest has dtype {_dtype_name(dest)} but source has {_dtype_name(source)}; "
            "RMA copies elements as they are, so convert one of them first"
        )


def _is_array(obj: Any) -> bool:
    return isinstance(obj, np.ndarray) or hasattr(obj, "data_ptr")


def _writable(arr: Any, name: str, caller: str) -> None:
    if isinstance(arr, np.ndarray) and not arr.flags.writeable:
        raise InvalidArgument(f"{caller}: {name} is a read-only array")


def _typed_source(dest: Any, source: Any, caller: str) -> Any:
    """``source`` as an array of dest's dtype: array-likes (lists, scalars) are converted,
    arrays and tensors must already have it (no silent reinterpretation of bytes)."""
    if _is_array(source):
        _same_dtype(dest, source, caller)
        return np.ascontiguousarray(source) if isinstance(source, np.ndarray) else source
    if hasattr(dest, "data_ptr"):  # torch dest
        import torch

        try:
            return torch.as_tensor(source, dtype=dest.dtype).contiguous()
        except (TypeError, ValueError, RuntimeError, OverflowError) as exc:
            raise InvalidArgument(f"{caller}: source cannot be made a {dest.dtype} tensor ({exc})") from None
    try:
        return np.ascontiguousarray(source, dtype=np.asarray(dest).dtype)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidArgument(f"{caller}: source cannot be made an array of dest's dtype ({exc})") from None


def _strided_span(arr: np.ndarray, stride: int, nelems: int, name: str, caller: str) -> None:
    """Elements 0, stride, ..., (nelems-1)*stride of ``arr`` must all exist, and there may be no
    more of them than ``arr`` has (a stride of 0 would otherwise allow any count)."""
    if nelems > arr.size:
        raise InvalidArgument(f"{caller}: nelems={nelems} exceeds the {arr.size} elements of {name}")
    last = (nelems - 1) * stride
    if nelems > 1 and not 0 <= last < arr.size:
        raise InvalidArgument(
            f"{caller}: nelems={nelems} at stride {stride} reaches element {last} of {name}, "
            f"which has {arr.size} elements"
        )


def _strided_args(
    dest: Any, source: Any, dst_stride: Any, src_stride: Any, nelems: Any, caller: str
) -> tuple[np.ndarray, np.ndarray, int, int, int]:
    dst, src = _as_array(dest), _as_array(source)
    for arr, name in ((dst, "dest"), (src, "source")):
        if not arr.flags.c_contiguous:
            raise InvalidArgument(f"{caller}: {name} must be contiguous (the strides select its elements)")
    _same_dtype(dst, src, caller)
    nelems = _integer(nelems, "nelems", caller)
    if nelems < 0:
        raise InvalidArgument(f"{caller}: nelems must be >= 0, got {nelems}")
    dst_stride, src_stride = _integer(dst_stride, "dst_stride", caller), _integer(src_stride, "src_stride", caller)
    _strided_span(dst, dst_stride, nelems, "dest", caller)
    _strided_span(src, src_stride, nelems, "source", caller)
    if nelems <= 1:  # the strides do not matter; keep them in ptrdiff_t range
        dst_stride = src_stride = 1
    return dst, src, dst_stride, src_stride, nelems


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
    """Copy ``source`` into the symmetric ``dest`` on PE ``pe``. An array or tensor source must
    have dest's dtype; lists and scalars are converted to it."""
    pe = _pe(pe, "put")
    daddr, dbytes, _ = _as_contiguous(dest)
    saddr, sbytes, keep = _as_contiguous(_typed_source(dest, source, "put"))
    if sbytes > dbytes:
        raise InvalidArgument(f"put: source has {sbytes} bytes but dest only {dbytes}")
    _native.put(daddr, saddr, sbytes, pe, nbi)
    del keep


def get(dest: Any, source: Any, pe: int, nbi: bool = False) -> None:
    """Copy the symmetric ``source`` on PE ``pe`` into the local array ``dest`` (same dtype)."""
    pe = _pe(pe, "get")
    if not _is_array(dest) or not _is_array(source):
        raise InvalidArgument("get: dest and source must be numpy arrays or torch tensors")
    _same_dtype(dest, source, "get")
    _writable(dest, "dest", "get")
    daddr, dbytes, _ = _as_contiguous(dest)
    saddr, sbytes, _ = _as_contiguous(source)
    if dbytes > sbytes:
        raise InvalidArgument(f"get: dest has {dbytes} bytes but source only {sbytes}")
    _native.get(daddr, saddr, dbytes, pe, nbi)


def iput(dest: Any, source: Any, dst_stride: int, src_stride: int, nelems: int, pe: int) -> None:
    """Strided put: ``dest[i * dst_stride] = source[i * src_stride]`` on PE ``pe`` for ``i`` in
    ``range(nelems)`` (strides in elements; both arrays contiguous, of one dtype)."""
    pe = _pe(pe, "iput")
    dst, src, dst_stride, src_stride, nelems = _strided_args(dest, source, dst_stride, src_stride, nelems, "iput")
    if nelems:
        _native.iput(_address(dst), _address(src), dst_stride, src_stride, nelems, src.itemsize, pe)


def iget(dest: Any, source: Any, dst_stride: int, src_stride: int, nelems: int, pe: int) -> None:
    """Strided get: ``dest[i * dst_stride] = source[i * src_stride]`` (``source`` on PE ``pe``) for
    ``i`` in ``range(nelems)`` (strides in elements; both arrays contiguous, of one dtype)."""
    pe = _pe(pe, "iget")
    dst, src, dst_stride, src_stride, nelems = _strided_args(dest, source, dst_stride, src_stride, nelems, "iget")
    _writable(dst, "dest", "iget")
    if nelems:
        _native.iget(_address(dst), _address(src), dst_stride, src_stride, nelems, dst.itemsize, pe)


def p(dest: Any, value: Any, pe: int, index: int = 0) -> None:
    """Store one element ``value`` at ``dest[index]`` (flat index) on PE ``pe``."""
    pe = _pe(pe, "p")
    dest = _as_array(dest)
    target = _element_address(dest, index, "p")
    one = _scalar(value, dest.dtype, "value", "p").reshape(1)
    _native.put(target, _address(one), dest.itemsize, pe, False)


def g(source: Any, pe: int, index: int = 0) -> Any:
    """Load ``source[index]`` (flat index) from PE ``pe``."""
    pe = _pe(pe, "g")
    source = _as_array(source)
    one = np.empty(1, dtype=source.dtype)
    _native.get(_address(one), _element_address(source, index, "g"), source.itemsize, pe, False)
    return one[0]


def put_signal(dest: Any, source: Any, signal: np.ndarray, value: int, sig_op: int, pe: int, nbi: bool = False) -> None:
    """Put ``source`` into ``dest`` on ``pe``, then update the uint64 ``signal[0]`` there with
    ``sig_op`` (SIGNAL_SET or SIGNAL_ADD): a PE that sees the signal also sees the data."""
    pe = _pe(pe, "put_signal")
    sig = _signal_address(signal, "put_signal")
    bits = int(_scalar(value, np.dtype(np.uint64), "value", "put_signal"))
    daddr, dbytes, _ = _as_contiguous(dest)
    saddr, sbytes, keep = _as_contiguous(_typed_source(dest, source, "put_signal"))
    if sbytes > dbytes:
        raise InvalidArgument(f"put_signal: source has {sbytes} bytes but dest only {dbytes}")
    if sig_op not in (SIGNAL_SET, SIGNAL_ADD):
        raise InvalidArgument(f"put_signal: sig_op must be SIGNAL_SET (0) or SIGNAL_ADD (1), got {sig_op!r}")
    _native.put_signal(daddr, saddr, sbytes, sig, bits, int(sig_op), pe, nbi)
    del keep


def signal_fetch(signal: np.ndarray) -> int:
    """The value of the local uint64 ``signal[0]``."""
    return _native.signal_fetch(_signal_address(signal, "signal_fetch"))


def _signal_address(signal: Any, caller: str) -> int:
    if hasattr(signal, "numpy") and not isinstance(signal, np.ndarray):
        signal = _as_array(signal)
    if not isinstance(signal, np.ndarray) or signal.dtype != np.uint64:
        raise InvalidArgument(f"{caller}: signal must be a symmetric numpy array of dtype uint64")
    return _element_address(signal, 0, caller, "signal[0] (the signal word)")


# ---------------------------------------------------------------- atomics


def _word(target: np.ndarray, op: str) -> tuple[int, int]:
    if not isinstance(target, np.ndarray):
        raise InvalidArgument(f"atomic target must be a symmetric numpy array, got {type(target).__name__}")
    dt = target.dtype
    if dt.kind in "iu" and dt.itemsize in (4, 8):
        return dt.itemsize, (_NUM_SIGNED if dt.kind == "i" else _NUM_UNSIGNED)
    if dt.kind == "f" and dt.itemsize in (4, 8) and op in ("fetch", "set", "swap", "compare_swap"):
        return dt.itemsize, _NUM_FLOAT
    raise InvalidArgument(
        f"atomic {op} is not defined for dtype {dt} (int32/int64/uint32/uint64"
        f"{'; float32/float64 for fetch/set/swap/compare_swap' if dt.kind == 'f' else ''})"
    )


def _to_bits(value: Any, dtype: np.dtype, name: str = "value", caller: str = "atomic") -> int:
    return int(_scalar(value, dtype, name, caller).view(np.uint64 if dtype.itemsize == 8 else np.uint32))


def _from_bits(bits: int, dtype: np.dtype) -> Any:
    raw = np.asarray(bits, dtype=np.uint64 if dtype.itemsize == 8 else np.uint32)
    return raw.view(dtype)[()]


def _amo(op: str, target: np.ndarray, value: Any, pe: int, index: int, compare: Any = 0) -> Any:
    caller = f"atomic_{op}"
    pe = _pe(pe, caller)
    target = _as_array(target)
    width, _ = _word(target, op)
    dt = target.dtype
    addr = _element_address(target, index, caller)
    old = _native.atomic(
        addr, _AMO[op], width, _to_bits(value, dt, "value", caller), _to_bits(compare, dt, "cond", caller), pe
    )
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
    if cmp not in range(len(_native.Cmp)):
        raise InvalidArgument(f"cmp must be a CMP_* constant (0..{len(_native.Cmp) - 1}), got {cmp}")
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


def _wait_bits(value: Any, dtype: np.dtype, caller: str) -> int:
    """The bits of ``value`` as an element of ``dtype`` (1..8 bytes), as the native compare takes them."""
    raw = _scalar(value, dtype, "value", caller).reshape(1).view(f"u{dtype.itemsize}")
    return int(raw[0])


def wait_until(ivar: np.ndarray, cmp: Union[int, str], value: Any, index: int = 0) -> Any:
    """Block until ``ivar[index] <cmp> value`` holds locally; returns the value seen.
    Fails (instead of hanging) if a peer dies while we wait."""
    ivar = _as_array(ivar)
    width, num = _wait_word(ivar)
    addr, op = _element_address(ivar, index, "wait_until"), _cmp(cmp)
    seen = _native.wait_until(addr, op, _wait_bits(value, ivar.dtype, "wait_until"), width, num)
    return _from_bits(seen, ivar.dtype) if width >= 4 else np.asarray(seen).astype(ivar.dtype)[()]


def test(ivar: np.ndarray, cmp: Union[int, str], value: Any, index: int = 0) -> bool:
    """Whether ``ivar[index] <cmp> value`` holds now."""
    ivar = _as_array(ivar)
    width, num = _wait_word(ivar)
    addr, op = _element_address(ivar, index, "test"), _cmp(cmp)
    return _native.test(addr, op, _wait_bits(value, ivar.dtype, "test"), width, num)


def ptr(obj: Any, pe: int) -> Optional[np.ndarray]:
    """A numpy view of ``obj``'s counterpart on ``pe`` when it is directly addressable, else None."""
    pe = _integer(pe, "pe", "ptr")
    addr = _native.ptr(_address(obj), pe) if 0 <= pe < _native.n_pes() else 0
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
