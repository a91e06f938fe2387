# SPDX-License-Identifier: MIT
"""Torch- and numpy-facing collectives over the shmem runtime's PEs.

    import torch, mori.shmem as sh, mori.ccl as ccl

    sh.init()
    x = torch.randn(1000)
    out = torch.empty(1000 * sh.n_pes())
    ccl.all_gather_into_tensor(out, x)        # every PE's x, in PE order
    ccl.all_reduce(x, op="sum")               # in place

Every function is collective over the whole shmem world (``group=None``; a torch process
group that spans the same ranks in the same order is accepted too). CPU tensors and numpy
arrays move through the host heap (ordinary ones are staged, symmetric ones from
``mori.shmem.tensor``/``mori.shmem.zeros`` are read in place); CUDA tensors are pushed
between GPUs by the copy engines through the GPU symmetric heap (:mod:`mori.collectives.gpu`). Calls complete before they return
(CUDA ones are enqueued on the current stream); ``async_op=True`` returns a finished
:class:`Work` for code written against torch.distributed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from mori import _C
from mori.collectives import gpu
from mori.collectives.dtypes import DataType, data_type, reduce_op
from mori.core.errors import InvalidArgument

_native = _C.collectives
_COMPLEX = (DataType.Complex64, DataType.Complex128)


class Work:
    """A finished collective (torch.distributed's ``Work`` shape: ``wait``, ``is_completed``)."""

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True


@dataclass
class _Buf:
    """A contiguous tensor or array as the native layer sees it."""

    addr: int
    numel: int
    nbytes: int
    dtype: DataType
    device: str  # "cpu" or "cuda"
    rows: int  # size of dim 0 (1 for 0-d)
    obj: Any


def _buf(x: Any, name: str, caller: str, writable: bool = False) -> _Buf:
    if hasattr(x, "data_ptr") and hasattr(x, "is_contiguous"):  # torch.Tensor
        if not x.is_contiguous():
            raise InvalidArgument(f"{caller}: {name} must be contiguous (call .contiguous())")
        dev = x.device.type
        if dev not in ("cpu", "cuda"):
            raise InvalidArgument(f"{caller}: {name} is on device {x.device}; mori.ccl handles cpu and cuda tensors")
        dt = data_type(x.dtype)
        rows = x.shape[0] if x.dim() > 0 else 1
        return _Buf(x.data_ptr(), x.numel(), x.numel() * x.element_size(), dt, dev, rows, x)
    if isinstance(x, np.ndarray):
        if not x.flags.c_contiguous:
            raise InvalidArgument(f"{caller}: {name} must be C-contiguous")
        if writable and not x.flags.writeable:
            raise InvalidArgument(f"{caller}: {name} is read-only")
        rows = x.shape[0] if x.ndim > 0 else 1
        return _Buf(x.__array_interface__["data"][0], x.size, x.nbytes, data_type(x.dtype), "cpu", rows, x)
    raise InvalidArgument(f"{caller}: {name} must be a torch.Tensor or numpy.ndarray, got {type(x).__name__}")


def _world() -> tuple[int, int]:
    return _C.shmem.my_pe(), _C.shmem.n_pes()


def check_group(group: Any, caller: str) -> None:
    """Accepts None or a torch process group that is the shmem world in PE order; raises otherwise."""
    if group is None:
        return
    me, n = _world()
    try:
        import torch.distributed as dist

        ranks = dist.get_process_group_ranks(group)
        rank = dist.get_rank(group)
    except Exception as exc:
        raise InvalidArgument(
            f"{caller}: group must be None or a torch.distributed ProcessGroup, got {type(group).__name__}"
        ) from exc
    if list(ranks) != list(range(n)) or rank != me:
        raise InvalidArgument(
            f"{caller}: group has ranks {list(ranks)[:8]}{'...' if len(ranks) > 8 else ''}; "
            f"mori.ccl runs on the whole shmem world (PEs 0..{n - 1} in order) only. "
            "Use torch.distributed for sub-groups."
        )


def _done(async_op: bool) -> Optional[Work]:
    return Work() if async_op else None


def _same_device(caller: str, *bufs: _Buf) -> str:
    devs = {b.device for b in bufs}
    if len(devs) != 1:
        raise InvalidArgument(f"{caller}: tensors are on different devices ({', '.join(sorted(devs))})")
    return devs.pop()


# ---------------------------------------------------------------- allgather


def all_gather_into_tensor(output: Any, input: Any, group: Any = None, async_op: bool = False) -> Optional[Work]:
    """``output`` (n * input.numel() elements, same dtype) = every PE's ``input`` in PE order."""
    caller = "mori.ccl.all_gather_into_tensor"
    check_group(group, caller)
    o, i = _buf(output, "output", caller, writable=True), _buf(input, "input", caller)
    _, n = _world()
    if o.dtype != i.dtype:
        raise InvalidArgument(f"{caller}: output dtype {o.dtype.name} differs from input dtype {i.dtype.name}")
    if o.numel != n * i.numel:
        raise InvalidArgument(f"{caller}: output has {o.numel} elements; expected {n} PEs x {i.numel} = {n * i.numel}")
    if _same_device(caller, o, i) == "cuda":
        gpu.all_gather(output, input)
    else:
        _native.allgather(o.addr, i.addr, i.nbytes)
    return _done(async_op)


def all_gather_single(output: Any, input: Any, group: Any = None, async_op: bool = False) -> Optional[Work]:
    """torch 2.13's name for :func:`all_gather_into_tensor`."""
    return all_gather_into_tensor(output, input, group=group, async_op=async_op)


def all_gather(tensor_list: Sequence[Any], tensor: Any, group: Any = None, async_op: bool = False) -> Optional[Work]:
    """torch.distributed.all_gather: ``tensor_list[pe]`` = PE pe's ``tensor``."""
    caller = "mori.ccl.all_gather"
    _, n = _world()
    if len(tensor_list) != n:
        raise InvalidArgument(f"{caller}: tensor_list has {len(tensor_list)} entries, the world has {n} PEs")
    flat = _empty_like(tensor, n)
    all_gather_into_tensor(flat, tensor, group)
    for pe, t in enumerate(tensor_list):
        _copy_into(t, flat[pe])
    return _done(async_op)


# ---------------------------------------------------------------- broadcast / reductions


def broadcast(tensor: Any, src: int = 0, group: Any = None, async_op: bool = False) -> Optional[Work]:
    """``tensor`` on every PE = ``tensor`` on PE ``src`` (any dtype, complex too)."""
    caller = "mori.ccl.broadcast"
    check_group(group, caller)
    b = _buf(tensor, "tensor", caller, writable=True)
    _, n = _world()
    if not 0 <= int(src) < n:
        raise InvalidArgument(f"{caller}: src={src} is not a PE (0..{n - 1})")
    if b.device == "cuda":
        gpu.broadcast(tensor, int(src))
    else:
        _native.broadcast(b.addr, b.nbytes, int(src))
    return _done(async_op)


def all_reduce(tensor: Any, op: Any = "sum", group: Any = None, async_op: bool = False) -> Optional[Work]:
    """``tensor`` (in place) = op over PEs of ``tensor``. op: sum, max, min (sum only for complex)."""
    caller = "mori.ccl.all_reduce"
    check_group(group, caller)
    b = _buf(tensor, "tensor", caller, writable=True)
    if b.device == "cuda":
        gpu.all_reduce(tensor, reduce_op(op))
    else:
        _native.allreduce(b.addr, b.addr, b.numel, int(b.dtype), int(reduce_op(op)))
    return _done(async_op)


def reduce_scatter_tensor(
    output: Any, input: Any, op: Any = "sum", group: Any = None, async_op: bool = False
) -> Optional[Work]:
    """``output`` (k elements) = op over PEs of block my_pe of ``input`` (n * k elements)."""
    caller = "mori.ccl.reduce_scatter_tensor"
    check_group(group, caller)
    o, i = _buf(output, "output", caller, writable=True), _buf(input, "input", caller)
    dev = _same_device(caller, o, i)
    _, n = _world()
    if o.dtype != i.dtype:
        raise InvalidArgument(f"{caller}: output dtype {o.dtype.name} differs from input dtype {i.dtype.name}")
    if i.numel != n * o.numel:
        raise InvalidArgument(f"{caller}: input has {i.numel} elements; expected {n} PEs x {o.numel} = {n * o.numel}")
    if dev == "cuda":
        gpu.reduce_scatter(output, input, reduce_op(op))
    else:
        _native.reduce_scatter(o.addr, i.addr, o.numel, int(o.dtype), int(reduce_op(op)))
    return _done(async_op)


def reduce_scatter_single(
    output: Any, input: Any, op: Any = "sum", group: Any = None, async_op: bool = False
) -> Optional[Work]:
    """torch 2.13's name for :func:`reduce_scatter_tensor`."""
    return reduce_scatter_tensor(output, input, op=op, group=group, async_op=async_op)


# ---------------------------------------------------------------- all-to-all


def all_to_all_single(
    output: Any,
    input: Any,
    output_split_sizes: Optional[Sequence[int]] = None,
    input_split_sizes: Optional[Sequence[int]] = None,
    group: Any = None,
    async_op: bool = False,
) -> Optional[Work]:
    """Rows ``input[sum(in_splits[:j]) : +in_splits[j]]`` go to PE j, which stores what PE i
    sent at ``output[sum(out_splits[:i]) : +out_splits[i]]``. Without splits, dim 0 is divided
    evenly. Splits count rows (dim 0), as in torch.distributed."""
    caller = "mori.ccl.all_to_all_single"
    check_group(group, caller)
    o, i = _buf(output, "output", caller, writable=True), _buf(input, "input", caller)
    dev = _same_device(caller, o, i)
    _, n = _world()
    if o.dtype != i.dtype:
        raise InvalidArgument(f"{caller}: output dtype {o.dtype.name} differs from input dtype {i.dtype.name}")
    in_row = i.nbytes // i.rows if i.rows else 0
    out_row = o.nbytes // o.rows if o.rows else 0
    send = _splits(input_split_sizes, i.rows, n, "input_split_sizes", caller)
    recv = _splits(output_split_sizes, o.rows, n, "output_split_sizes", caller)
    if i.rows and o.rows and in_row != out_row:
        raise InvalidArgument(f"{caller}: input rows are {in_row} bytes but output rows {out_row} bytes")
    row = in_row or out_row
    send_off = np.concatenate([[0], np.cumsum(send)[:-1]]).astype(np.int64)
    recv_off = np.concatenate([[0], np.cumsum(recv)[:-1]]).astype(np.int64)
    args = (
        [int(s) * row for s in send],
        [int(s) * row for s in send_off],
        [int(s) * row for s in recv],
        [int(s) * row for s in recv_off],
    )
    if dev == "cuda":
        gpu.all_to_all(output, input, *args, uniform=input_split_sizes is None and output_split_sizes is None)
    else:
        _native.alltoallv(o.addr, i.addr, *args)
    return _done(async_op)


def _splits(splits: Optional[Sequence[int]], rows: int, n: int, name: str, caller: str) -> list[int]:
    if splits is None:
        if rows % n:
            raise InvalidArgument(f"{caller}: dim 0 ({rows}) is not divisible by {n} PEs; pass {name}")
        return [rows // n] * n
    splits = [int(s) for s in splits]
    if len(splits) != n or any(s < 0 for s in splits) or sum(splits) != rows:
        raise InvalidArgument(f"{caller}: {name}={splits} must have {n} non-negative entries summing to dim 0 ({rows})")
    return splits


# ---------------------------------------------------------------- helpers


def _empty_like(t: Any, n: int) -> Any:
    if isinstance(t, np.ndarray):
        return np.empty((n,) + t.shape, t.dtype)
    import torch

    return torch.empty((n,) + tuple(t.shape), dtype=t.dtype, device=t.device)


def _copy_into(dst: Any, src: Any) -> None:
    if isinstance(dst, np.ndarray):
        dst[...] = src
    else:
        dst.copy_(src)


def stats() -> dict:
    """Counters of this process: host collectives and the copy-engine allgather."""
    return {"host": dict(_native.host_stats()), "gpu": gpu.stats()}


def release() -> None:
    """Free the collectives' symmetric buffers (collective). Optional before finalize."""
    gpu.release()
    _native.release()
