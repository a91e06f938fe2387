# SPDX-License-Identifier: MIT
"""MORI-CCL on CUDA tensors: collectives built on one push primitive (``mori._C.collectives.CeEngine``).

Each PE pushes its bytes into its peers with ``cudaMemcpyAsync`` on dedicated streams (copy
engines; no SM touches remote data) and signals them stream-ordered; a push lands straight in
the peer's destination when that tensor lies in the GPU symmetric heap (``symmetric_empty``,
``mori_shmem_create_tensor``: zero extra copy), else in the peer's receive staging (also in the
GPU heap), which the peer copies out while later chunks are still in flight, or reduces with
torch ops (all-reduce, reduce-scatter). Everything is enqueued on torch's current stream and can
be captured in a CUDA graph. Every PE must make the same calls in the same order, with its
tensors symmetric on every PE or on none. Staging a caller reads (reductions) stays valid until
its next exchange: a peer pushes again only once this PE's stream has reached that exchange.

One engine per process, created on first use (collectively), bound to the runtime's GPU heap.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from mori import _C
from mori.collectives.dtypes import ReduceOp
from mori.core.errors import InvalidArgument, Unavailable

_native = _C.collectives
_engine: Optional[Any] = None
_engine_gen: Optional[int] = None
_world: Optional[tuple] = None  # (me, n, peers, GPU heap start, GPU heap end) of the engine's runtime
_slots: dict = {}
_counts = {"all_gather": 0, "broadcast": 0, "all_reduce": 0, "reduce_scatter": 0, "all_to_all": 0, "zero_copy": 0}


def available() -> bool:
    """True when this MORI was built with CUDA."""
    return bool(getattr(_native, "has_cuda", False))


def engine() -> Any:
    """The process's engine (created collectively on first use; every PE makes the same call)."""
    global _engine, _engine_gen, _world
    if not available():
        raise Unavailable(
            "mori.ccl: this MORI was built without CUDA; CUDA tensors cannot be used (rebuild where nvcc is installed)"
        )
    gen = _native.runtime_generation()
    if _engine is not None and _engine_gen != gen:
        _drop()
    if _engine is None:
        from mori.core.env import setting

        _engine = _native.CeEngine(int(setting("MORI_CCL_GPU_STAGING_SIZE")))
        _engine_gen = gen
        me, n = _C.shmem.my_pe(), _C.shmem.n_pes()
        base = int(_C.shmem.gpu_heap_base())
        _world = (me, n, [p for p in range(n) if p != me], base, base + int(_C.shmem.gpu_heap_size()))
    return _engine


def _drop() -> None:
    global _engine, _world
    _slots.clear()
    _world = None
    _engine = None  # the destructor frees the window (collectively while its runtime lives)


def release() -> None:
    """Drop the engine and give its staging back to the GPU heap (collective)."""
    if _engine is not None:
        import torch

        torch.cuda.synchronize(_engine.device)
    _drop()


def stats() -> dict:
    out = dict(_counts)
    out.update(_engine.stats() if _engine is not None else {"calls": 0, "direct_bytes": 0, "staged_bytes": 0})
    return out


def symmetric_empty(shape: Any, dtype: Any) -> Any:
    """An uninitialized CUDA tensor in the GPU symmetric heap (collective). Used as an output
    (or the all-reduce/broadcast tensor) on every PE, it is written by the peers directly."""
    from mori.shmem.tensor_utils import mori_shmem_create_tensor

    return mori_shmem_create_tensor(shape, dtype)


def is_symmetric(t: Any) -> bool:
    """Whether all of ``t``'s bytes lie in this PE's GPU symmetric heap."""
    nbytes = t.numel() * t.element_size()
    a = int(t.data_ptr())
    return bool(_C.shmem.gpu_contains(a)) and bool(_C.shmem.gpu_contains(a + max(nbytes, 1) - 1))


# ---------------------------------------------------------------- helpers


def _tensor_at(ptr: int, nbytes: int, device: int) -> Any:
    import torch

    class _Holder:
        def __init__(self) -> None:
            self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3}

    return torch.as_tensor(_Holder(), device=f"cuda:{device}")


def _slot(eng: Any, pe: int, numel: int, dtype: Any) -> Any:
    """The first ``numel`` elements of the staging slot that receives from ``pe``."""
    raw = _slots.get(pe)
    if raw is None:
        raw = _slots[pe] = _tensor_at(eng.slot(pe), eng.slot_bytes, eng.device)
    return raw[: numel * dtype.itemsize].view(dtype)


_raw_stream: Any = None


def _current_stream(device: int) -> int:
    """torch's current stream on ``device`` as a cudaStream_t integer."""
    global _raw_stream
    if _raw_stream is None:
        import torch

        # The raw getter (what torch.compile uses) skips building a torch.cuda.Stream per call.
        _raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
            lambda d: torch.cuda.current_stream(d).cuda_stream
        )
    return int(_raw_stream(device))


def _prepare(caller: str, *tensors: Any) -> tuple[Any, int, int, list, int]:
    """(engine, me, n, peers, stream) after checking that the tensors are on this PE's GPU."""
    eng = engine()
    dev = eng.device
    for t in tensors:
        if t.get_device() != dev:
            raise InvalidArgument(
                f"{caller}: a tensor is on {t.device} but this PE's GPU is cuda:{dev} "
                "(torch.cuda.set_device before mori.shmem init)"
            )
    me, n, peers, _, _ = _world
    return eng, me, n, peers, _current_stream(dev)


def _in_heap(addr: int, nbytes: int) -> bool:
    """Whether [addr, addr + nbytes) lies in the GPU heap (``is_symmetric`` with the engine's cached bounds)."""
    return _world[3] <= addr and addr + max(nbytes, 1) <= _world[4]


def _pieces(total: int, step: int) -> list[tuple[int, int]]:
    """[lo, len) pieces of at most ``step`` covering [0, total)."""
    return [(lo, min(step, total - lo)) for lo in range(0, total, step)]


# ---------------------------------------------------------------- collectives


def all_gather(out: Any, inp: Any) -> None:
    """out (n * numel) = every PE's inp, in PE order."""
    eng, me, n, peers, stream = _prepare("mori.ccl.all_gather_into_tensor", out, inp)
    nbytes = inp.numel() * inp.element_size()
    _counts["all_gather"] += 1
    if nbytes == 0:
        return
    o, i = out.data_ptr(), inp.data_ptr()
    mine = o + me * nbytes
    if not peers:
        eng.local_copy(mine, i, nbytes, stream)
        return
    if _in_heap(o, n * nbytes):  # straight into every peer's output
        _counts["zero_copy"] += 1
        eng.exchange(
            [(p, i, mine, nbytes, True, 0) for p in peers],
            [(p, 0, nbytes, 0, True) for p in peers],
            mine,
            i,
            nbytes,
            stream,
        )
        return
    for k, (lo, ln) in enumerate(_pieces(nbytes, eng.slot_bytes)):
        eng.exchange(
            [(p, i + lo, 0, ln, False, 0) for p in peers],
            [(p, o + p * nbytes + lo, ln, 0, False) for p in peers],
            mine,
            i,
            nbytes if k == 0 else 0,
            stream,
        )


def broadcast(t: Any, src: int) -> None:
    """t on every PE = t on PE src."""
    eng, me, n, peers, stream = _prepare("mori.ccl.broadcast", t)
    nbytes = t.numel() * t.element_size()
    _counts["broadcast"] += 1
    if nbytes == 0 or n == 1:
        return
    a = t.data_ptr()
    direct = _in_heap(a, nbytes)
    if direct:
        _counts["zero_copy"] += 1
    step = nbytes if direct else eng.slot_bytes
    for lo, ln in _pieces(nbytes, step):
        if me == src:
            sends = [(p, a + lo, a + lo if direct else 0, ln, direct, 0) for p in peers]
            eng.exchange(sends, [], 0, 0, 0, stream)
        else:
            eng.exchange([], [(src, 0 if direct else a + lo, ln, 0, direct)], 0, 0, 0, stream)


def _combine(parts: Sequence[Any], op: ReduceOp) -> Any:
    """op over ``parts`` in order, with the host path's semantics: bool sum/max = or, min = and;
    integers wrap; float16/bfloat16 accumulate in float32 and round once."""
    import torch

    dtype = parts[0].dtype
    if dtype.is_complex and op != ReduceOp.SUM:
        raise InvalidArgument(f"mori.ccl: reduce op {op.name.lower()} is not defined for complex dtype {dtype}")
    if dtype == torch.bool:
        f = torch.logical_and if op == ReduceOp.MIN else torch.logical_or
        acc = parts[0]
        for x in parts[1:]:
            acc = f(acc, x)
        return acc
    unsigned = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}
    if dtype in unsigned:
        # Same-width signed ints: sums wrap identically; flipping the top bit maps unsigned order
        # onto signed order for max/min.
        sdt = unsigned[dtype]
        flip = -(1 << (torch.iinfo(sdt).bits - 1))
        xs = [x.view(sdt) for x in parts]
        if op == ReduceOp.SUM:
            return _fold(xs, torch.add).view(dtype)
        xs = [x ^ flip for x in xs]
        return (_fold(xs, torch.maximum if op == ReduceOp.MAX else torch.minimum) ^ flip).view(dtype)
    if dtype in (torch.float16, torch.bfloat16):
        xs = [x.float() for x in parts]
        f = torch.add if op == ReduceOp.SUM else torch.maximum if op == ReduceOp.MAX else torch.minimum
        return _fold(xs, f).to(dtype)
    f = torch.add if op == ReduceOp.SUM else torch.maximum if op == ReduceOp.MAX else torch.minimum
    return _fold(list(parts), f)


def _fold(xs: list, f: Any) -> Any:
    acc = xs[0]
    for x in xs[1:]:
        acc = f(acc, x)
    return acc


def reduce_scatter(out: Any, inp: Any, op: ReduceOp) -> None:
    """out (k) = op over PEs of block me of inp (n * k); blocks reduced in PE order."""
    eng, me, n, peers, stream = _prepare("mori.ccl.reduce_scatter_tensor", out, inp)
    _counts["reduce_scatter"] += 1
    k, elem = out.numel(), out.element_size()
    if k == 0:
        return
    _combine([inp.view(-1)[:1]], op)  # dtype/op check before any PE enqueues anything
    flat_in, flat_out = inp.view(-1), out.view(-1)
    if n == 1:
        flat_out.copy_(flat_in)
        return
    a = inp.data_ptr()
    for lo, m in _pieces(k, max(1, eng.slot_bytes // elem)):
        # The staging read below stays ours until our next exchange starts (peers wait for that).
        eng.exchange(
            [(p, a + (p * k + lo) * elem, 0, m * elem, False, 0) for p in peers],
            [(p, 0, m * elem, 0, False) for p in peers],
            0,
            0,
            0,
            stream,
        )
        parts = [flat_in[me * k + lo : me * k + lo + m] if q == me else _slot(eng, q, m, out.dtype) for q in range(n)]
        flat_out[lo : lo + m].copy_(_combine(parts, op))


def all_reduce(t: Any, op: ReduceOp) -> None:
    """t (in place) = op over PEs: a reduce-scatter (each PE reduces one block in PE order) then an
    all-gather of the blocks, so every PE ends with the same bits."""
    eng, me, n, peers, stream = _prepare("mori.ccl.all_reduce", t)
    _counts["all_reduce"] += 1
    total, elem = t.numel(), t.element_size()
    if total == 0:
        return
    _combine([t.view(-1)[:1]], op)
    if n == 1:
        return
    flat = t.view(-1)
    a = t.data_ptr()
    direct = _in_heap(a, total * elem)
    max_blk = max(1, eng.slot_bytes // elem)
    base = 0
    while base < total:
        blk = min(max_blk, -(-(total - base) // n))
        span = min(n * blk, total - base)
        bounds = [(base + min(q * blk, span), base + min((q + 1) * blk, span)) for q in range(n)]
        lo_me, hi_me = bounds[me]
        eng.exchange(
            [(p, a + bounds[p][0] * elem, 0, (bounds[p][1] - bounds[p][0]) * elem, False, 0) for p in peers],
            [(p, 0, (hi_me - lo_me) * elem, 0, False) for p in peers],
            0,
            0,
            0,
            stream,
        )
        if hi_me > lo_me:  # staging is ours until the next exchange
            parts = [flat[lo_me:hi_me] if q == me else _slot(eng, q, hi_me - lo_me, t.dtype) for q in range(n)]
            flat[lo_me:hi_me].copy_(_combine(parts, op))
        mine = a + lo_me * elem
        eng.exchange(
            [(p, mine, mine if direct else 0, (hi_me - lo_me) * elem, direct, 0) for p in peers],
            [
                (p, 0 if direct else a + bounds[p][0] * elem, (bounds[p][1] - bounds[p][0]) * elem, 0, direct)
                for p in peers
            ],
            0,
            0,
            0,
            stream,
        )
        base += span
    if direct:
        _counts["zero_copy"] += 1


def all_to_all(
    out: Any,
    inp: Any,
    send: Sequence[int],
    send_off: Sequence[int],
    recv: Sequence[int],
    recv_off: Sequence[int],
    uniform: bool,
) -> None:
    """Bytes inp[send_off[p]: +send[p]] go to PE p, which stores them at out[recv_off[me]: +recv[me]].
    ``uniform``: every pair moves the same bytes (no explicit splits), so large calls may run in rounds."""
    caller = "mori.ccl.all_to_all_single"
    eng, me, n, peers, stream = _prepare(caller, out, inp)
    _counts["all_to_all"] += 1
    if send[me] != recv[me]:
        raise InvalidArgument(f"{caller}: PE {me} sends itself {send[me]} bytes but expects {recv[me]}")
    o, i = out.data_ptr(), inp.data_ptr()
    if not peers:
        eng.local_copy(o + recv_off[me], i + send_off[me], send[me], stream)
        return
    biggest = max([send[p] for p in peers] + [recv[p] for p in peers])
    if biggest > eng.slot_bytes and not uniform:
        raise InvalidArgument(
            f"{caller}: a split of {biggest} bytes exceeds the {eng.slot_bytes}-byte GPU staging "
            "slot per peer; raise MORI_CCL_GPU_STAGING_SIZE (same on every PE)"
        )
    for k, (lo, ln) in enumerate(_pieces(max(biggest, 1), eng.slot_bytes)):
        sends = [(p, i + send_off[p] + lo, 0, max(0, min(ln, send[p] - lo)), False, 0) for p in peers]
        recvs = [(p, o + recv_off[p] + lo, max(0, min(ln, recv[p] - lo)), 0, False) for p in peers]
        first = k == 0
        eng.exchange(
            sends,
            recvs,
            o + recv_off[me] if first else 0,
            i + send_off[me] if first else 0,
            send[me] if first else 0,
            stream,
        )
