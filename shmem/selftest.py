# SPDX-License-Identifier: MIT
"""ctypes front end of ``libmori_shmem_selftest.so``: kernels written against the public device
API (``mori/shmem/device.cuh``), used by the GPU tests and ``mori bench shmem --gpu``.

Every function takes device addresses as ints and a stream (see :func:`mori.shmem.gpu.stream_handle`)
and only enqueues work. The kernels get the heap through :func:`mori.shmem.gpu.device_state_ptr`.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache
from pathlib import Path
from typing import Any

from mori import _C
from mori.core.errors import DeviceError, InvalidArgument, Unavailable
from mori.shmem import gpu

THREAD, WARP, BLOCK = 0, 1, 2
SCOPES = {"thread": THREAD, "warp": WARP, "block": BLOCK}

_P, _I, _S, _U64, _I64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_int64
_SIGNATURES = {
    "mori_selftest_put": [_P, _I, _P, _P, _S, _I, _I, _I, _P],
    "mori_selftest_get": [_P, _I, _P, _P, _S, _I, _I, _I, _P],
    "mori_selftest_put_signal": [_P, _P, _P, _S, _P, _I, _I, _I, _P],
    "mori_selftest_p": [_P, _P, _P, _I, _I, _P],
    "mori_selftest_g": [_P, _P, _P, _I, _I, _P],
    "mori_selftest_atomics": [_P, _P, _P, _P, _P, _P, _I, _I, _I, _P],
    "mori_selftest_signal_rounds": [_P, _I, _I, _P, _P, _S, _P, _P, _I, _I, _P, _P],
    "mori_selftest_pingpong": [_P, _I, _P, _P, _I, _I, _P, _P],
    "mori_selftest_barrier_block": [_P, _P, _P, _I, _I, _U64, _P],
    "mori_selftest_allreduce_oneshot": [_P, _P, _P, _P, _P, _U64, _I64, _I, _I, _P],
    "mori_selftest_allreduce_ring": [_P, _P, _P, _P, _P, _P, _P, _P, _U64, _I64, _I, _I, _I, _P],
}


@lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL:
    path = Path(_C.__file__).resolve().parent / "lib" / "libmori_shmem_selftest.so"
    if not _C.shmem.built_with_cuda():
        raise Unavailable(
            f"the device-API selftest kernels are not built ({path} missing; MORI was built without CUDA)"
        )
    if not path.exists():
        raise Unavailable(
            f"the device-API selftest kernels are not installed ({path} missing): they are test code, "
            "installed by an editable install (pip install -e .) or with "
            "-C cmake.define.MORI_TEST_KERNELS=ON"
        )
    lib = ctypes.CDLL(str(path))
    for name, args in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = ctypes.c_int
    lib.mori_selftest_pattern.argtypes = [_U64, _U64]
    lib.mori_selftest_pattern.restype = _U64
    return lib


def _call(name: str, *args: Any) -> None:
    rc = getattr(_lib(), name)(gpu.device_state_ptr(), *args)
    if rc != 0:
        raise DeviceError(f"{name}: kernel launch failed with cudaError {rc}")


def put(
    scope: int, dst: int, src: int, nbytes: int, pe: int, blocks: int = 1, threads: int = 256, stream: Any = None
) -> None:
    """Each of ``blocks`` blocks puts its share of the bytes with putmem_{thread,warp,block}."""
    _call("mori_selftest_put", scope, dst, src, nbytes, pe, blocks, threads, gpu.stream_handle(stream))


def put_signal(
    dst: int, src: int, nbytes: int, sig: int, pe: int, blocks: int = 1, threads: int = 256, stream: Any = None
) -> None:
    """Each of ``blocks`` blocks puts its share with putmem_signal_block, then ADDs 1 to ``sig`` on ``pe``."""
    _call("mori_selftest_put_signal", dst, src, nbytes, sig, pe, blocks, threads, gpu.stream_handle(stream))


def get(
    scope: int, dst: int, src: int, nbytes: int, pe: int, blocks: int = 1, threads: int = 256, stream: Any = None
) -> None:
    _call("mori_selftest_get", scope, dst, src, nbytes, pe, blocks, threads, gpu.stream_handle(stream))


def p(dst: int, values: int, count: int, pe: int, stream: Any = None) -> None:
    """int64 ``values[i]`` -> ``dst[i]`` on ``pe``, one p() per thread."""
    _call("mori_selftest_p", dst, values, count, pe, gpu.stream_handle(stream))


def g(out: int, src: int, count: int, pe: int, stream: Any = None) -> None:
    """``out[i]`` = g(``src[i]`` on ``pe``), one per thread (int64)."""
    _call("mori_selftest_g", out, src, count, pe, gpu.stream_handle(stream))


def atomics(
    add64: int, add32: int, tickets: int, cas: int, out: int, iters: int, blocks: int, threads: int, stream: Any = None
) -> None:
    """Contended atomics from every thread (see selftest_kernels.cu for the exact totals)."""
    _call("mori_selftest_atomics", add64, add32, tickets, cas, out, iters, blocks, threads, gpu.stream_handle(stream))


def signal_rounds(
    role: int,
    scope: int,
    buf: int,
    staging: int,
    words: int,
    sig: int,
    ack: int,
    rounds: int,
    peer: int,
    errors: int,
    stream: Any = None,
) -> None:
    """Producer (role 0) / consumer (role 1) of ``rounds`` put-with-signal rounds; the consumer counts
    payload words that were not visible when the signal was."""
    _call(
        "mori_selftest_signal_rounds",
        role,
        scope,
        buf,
        staging,
        words,
        sig,
        ack,
        rounds,
        peer,
        errors,
        gpu.stream_handle(stream),
    )


def pingpong(role: int, data: int, sig: int, iters: int, peer: int, out: int, stream: Any = None) -> None:
    """8-byte put+signal ping-pong; role 0 writes ns per round trip to out[0]; out[1] = payload errors."""
    _call("mori_selftest_pingpong", role, data, sig, iters, peer, out, gpu.stream_handle(stream))


def barrier_block(sym: int, out: int, words: int, peer: int, round_: int, stream: Any = None) -> None:
    """p() a pattern into ``peer``'s ``sym``, barrier_all_block, copy the local ``sym`` to ``out``."""
    _call("mori_selftest_barrier_block", sym, out, words, peer, round_, gpu.stream_handle(stream))


def _allreduce_pes(caller: str) -> int:
    """The job's PE count, which the all-reduce kernels are compiled for (2 to 8)."""
    from mori.shmem.api import shmem_npes

    n = shmem_npes()
    if not 2 <= n <= 8:
        raise InvalidArgument(f"{caller}: the CUDA C++ all-reduces are built for 2 to 8 PEs, this job has {n}")
    return n


def allreduce_oneshot(
    data: int, gather: int, sig: int, out: int, epoch: int, count: int, threads: int = 256, stream: Any = None
) -> None:
    """bf16 one-shot all-reduce of ``count`` elements over every PE, one block: the CUDA C++ twin of
    ``apps/bench/ir_kernels.oneshot_allreduce_kernel``. ``gather``: symmetric, ``npes * count``
    elements; ``sig``: symmetric uint64, zero before epoch 1; ``epoch`` counts calls from 1."""
    _call(
        "mori_selftest_allreduce_oneshot",
        data,
        gather,
        sig,
        out,
        epoch,
        count,
        _allreduce_pes("allreduce_oneshot"),
        threads,
        gpu.stream_handle(stream),
    )


def allreduce_ring(
    data: int,
    work: int,
    rs: int,
    ag: int,
    sig: int,
    ack: int,
    out: int,
    epoch: int,
    count: int,
    blocks: int = 1,
    threads: int = 256,
    stream: Any = None,
) -> None:
    """bf16 ring all-reduce of ``count`` elements over every PE, ``blocks`` blocks: the CUDA C++ twin
    of ``apps/bench/ir_kernels.ring_allreduce_kernel``. ``rs``, ``ag``: symmetric, ``count`` elements;
    ``sig``, ``ack``: symmetric uint64, one per block, zero before epoch 1 (and whenever ``blocks``
    changes); ``data``, ``work``, ``out``: local; ``epoch`` counts calls from 1."""
    _call(
        "mori_selftest_allreduce_ring",
        data,
        work,
        rs,
        ag,
        sig,
        ack,
        out,
        epoch,
        count,
        _allreduce_pes("allreduce_ring"),
        blocks,
        threads,
        gpu.stream_handle(stream),
    )


def pattern(round_: int, index: int) -> int:
    return int(_lib().mori_selftest_pattern(round_, index))
