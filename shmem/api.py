# SPDX-License-Identifier: MIT
"""MORI's shmem host API (same names, arguments and return values as ROCm/mori's
``mori.shmem``), plus ``shmem_init()`` that finds the launcher by itself.

Addresses are Python ints. Allocation functions are collective: every PE calls
them in the same order with the same arguments.
"""

from __future__ import annotations

import operator
import os
import threading
from typing import Any, Callable, Optional

from mori import _C
from mori.core.bootstrap import LaunchInfo, MpiBootstrap, detect_launch, new_unique_id
from mori.core.env import setting
from mori.core.errors import InvalidArgument, InvalidUsage, OutOfMemory
from mori.shmem.gpu import bind_current_device, shmem_barrier_on_stream  # noqa: F401 (MORI exports it here)

MORI_SHMEM_INIT_WITH_MPI_COMM = 0
MORI_SHMEM_INIT_WITH_UNIQUEID = 1
UNIQUE_ID_BYTES = 128

_native = _C.shmem


def _torch_store_unique_id(info: LaunchInfo) -> bytes:
    """Under torchrun: rank 0 makes a unique id and publishes it in torchrun's own store."""
    from datetime import timedelta

    import torch.distributed as dist

    timeout = float(setting("MORI_BOOTSTRAP_TIMEOUT"))
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ.get("MASTER_PORT", "29500")),
        is_master=False,
        timeout=timedelta(seconds=timeout),
    )
    key = f"mori/uid/{os.environ.get('TORCHELASTIC_RUN_ID', '')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    if info.rank == 0:
        uid = new_unique_id()
        store.set(key, uid)
        return uid
    try:
        return bytes(store.get(key))
    except Exception as exc:  # torch raises a generic error on timeout
        raise TimeoutError(
            f"rank {info.rank}: rank 0 did not publish MORI's unique id in torchrun's store within {timeout:.0f} s"
        ) from exc


# One init per process (MORI's rule): a second init as the same PE returns 0; as another PE, over
# another torch group, or from another thread while one is in progress (threads as PEs, MORI's
# single-process multi-thread mode, which this runtime does not support) it is an error.
_init_guard = threading.Lock()
_init_pending: Optional[tuple[int, int]] = None  # (rank, nranks) of an init in progress
_init_group: Optional[str] = None  # torch process group of the current init


def _init_once(
    caller: str, rank: Optional[int], nranks: int, do_init: Callable[[], None], group: Optional[str] = None
) -> int:
    """Runs ``do_init`` unless this process is already initialized as PE ``rank`` of ``nranks``
    (``rank`` None: as any PE, for a process with no launcher to say which)."""
    global _init_pending, _init_group
    threads_hint = (
        "threads as PEs (MORI's single-process multi-thread mode) are not supported: start one process per PE"
    )
    with _init_guard:
        if _native.initialized():
            me, n = _native.my_pe(), _native.n_pes()
            if rank is not None and (rank, nranks) != (me, n):
                hint = threads_hint if nranks == n else "call shmem_finalize() before joining another job"
                raise InvalidUsage(
                    f"{caller}: this process is already PE {me} of {n}; a second init as PE {rank} of "
                    f"{nranks} is an error ({hint})"
                )
            if group is not None and _init_group is not None and group != _init_group:
                raise InvalidUsage(
                    f"{caller}: shmem is already initialized over torch process group "
                    f"{_init_group!r}; a second init over {group!r} is an error"
                )
            return 0
        if _init_pending is not None:
            r, n = _init_pending
            raise InvalidUsage(
                f"{caller}: another thread of this process is initializing shmem as PE {r} of {n}; {threads_hint}"
            )
        _init_pending = (0 if rank is None else rank, nranks)
    try:
        bind_current_device()
        do_init()
        _init_group = group
    finally:
        with _init_guard:
            _init_pending = None
    return 0


def shmem_init(launch: Optional[LaunchInfo] = None) -> int:
    """Initialize from whatever launched this process (``mori run``, ``mpirun``, torchrun,
    MASTER_ADDR/RANK/WORLD_SIZE, or nothing: a job of one PE). Collective. Returns 0; a second
    call in an initialized process returns 0 as well (MORI's rule)."""
    info = launch or detect_launch()
    if info.kind == "mpi":
        return shmem_mpi_init()

    def run() -> None:
        if info.kind == "mori-run":
            _native.init_store(info.store_host, info.store_port, info.secret_hex, info.rank, info.size)
        elif info.kind == "torchrun":
            _native.init_unique_id(_torch_store_unique_id(info), info.rank, info.size)
        elif info.kind == "env":
            _native.init_store(
                info.store_host,
                info.store_port,
                info.secret_hex,
                info.rank,
                info.size,
                host_locally=(info.rank == 0),
                store_rank=0,
            )
        else:
            _native.init_single()

    if info.kind in ("mori-run", "torchrun", "env"):
        return _init_once("shmem_init", info.rank, info.size, run)
    return _init_once("shmem_init", None, 1, run)  # no launcher: a job of one, or whatever came first


def shmem_mpi_init(comm: Any = None) -> int:
    """Initialize over MPI (mpi4py's ``COMM_WORLD`` unless ``comm`` is given). Collective. Returns 0."""
    boot = MpiBootstrap(comm)
    return _init_once("shmem_mpi_init", boot.rank, boot.size, lambda: _native.init_python(boot))


def shmem_get_unique_id() -> bytes:
    """A 128-byte id naming a bootstrap store hosted by this process (call on one rank, share it)."""
    return new_unique_id()


def shmem_init_attr(flags: int, rank: int, nranks: int, unique_id: bytes, *, comm: Any = None) -> int:
    """Initialize with explicit attributes.

    Args:
        flags: ``MORI_SHMEM_INIT_WITH_UNIQUEID`` (use ``unique_id``) or
            ``MORI_SHMEM_INIT_WITH_MPI_COMM`` (use ``comm``, default ``MPI.COMM_WORLD``;
            ``unique_id`` is then ignored, pass ``b""``).
        rank, nranks: this PE's rank and the number of PEs.
        unique_id: 128 bytes from ``shmem_get_unique_id()`` on one rank.
    Returns 0; also when this process is already initialized as PE ``rank`` of ``nranks``.
    """
    if flags == MORI_SHMEM_INIT_WITH_UNIQUEID:
        if not isinstance(unique_id, (bytes, bytearray)) or len(unique_id) != UNIQUE_ID_BYTES:
            raise InvalidArgument(
                f"unique_id must be {UNIQUE_ID_BYTES} bytes from shmem_get_unique_id(), "
                f"got {type(unique_id).__name__} of length {len(unique_id) if unique_id else 0}"
            )
        uid = bytes(unique_id)
        return _init_once(
            "shmem_init_attr", int(rank), int(nranks), lambda: _native.init_unique_id(uid, int(rank), int(nranks))
        )
    elif flags == MORI_SHMEM_INIT_WITH_MPI_COMM:
        boot = MpiBootstrap(comm)
        if boot.rank != rank or boot.size != nranks:
            raise InvalidArgument(
                f"rank/nranks ({rank}/{nranks}) disagree with the MPI communicator ({boot.rank}/{boot.size})"
            )
        return _init_once("shmem_init_attr", int(rank), int(nranks), lambda: _native.init_python(boot))
    else:
        raise InvalidArgument(
            f"flags must be MORI_SHMEM_INIT_WITH_UNIQUEID (1) or MORI_SHMEM_INIT_WITH_MPI_COMM (0), got {flags}"
        )
    return 0


def shmem_torch_process_group_init(group_name: str) -> int:
    """Initialize over a torch process group registered under ``group_name``
    (``torch._C._distributed_c10d._register_process_group(name, group)``).
    Rank 0 of the group makes a unique id and broadcasts it through the group. Returns 0."""
    import torch
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise InvalidUsage("shmem_torch_process_group_init: torch.distributed is not initialized")
    try:
        group = torch._C._distributed_c10d._resolve_process_group(group_name)
    except Exception as exc:
        raise InvalidArgument(
            f"shmem_torch_process_group_init: no process group registered as {group_name!r}; "
            "register it with torch._C._distributed_c10d._register_process_group"
        ) from exc
    rank, world = dist.get_rank(group), dist.get_world_size(group)

    def run() -> None:
        payload = [shmem_get_unique_id() if rank == 0 else None]
        dist.broadcast_object_list(payload, src=dist.get_global_rank(group, 0), group=group)
        _native.init_unique_id(bytes(payload[0]), rank, world)

    # Already initialized as this PE of this group: 0 without a broadcast (every PE skips it alike).
    return _init_once("shmem_torch_process_group_init", rank, world, run, group=group_name)


def shmem_finalize() -> int:
    """Collective tear-down; a later init starts afresh. Returns 0."""
    _native.finalize()
    return 0


def shmem_initialized() -> bool:
    return _native.initialized()


def shmem_mype() -> int:
    return _native.my_pe()


def shmem_npes() -> int:
    return _native.n_pes()


def _size(size: Any, caller: str) -> int:
    """A byte count as the native calls take it (size_t); InvalidArgument naming it otherwise."""
    try:
        size = operator.index(size)
    except TypeError:
        raise InvalidArgument(f"{caller}: size must be an integer, got {type(size).__name__}") from None
    if size < 0:
        raise InvalidArgument(f"{caller}: size must be >= 0, got {size}")
    if size >= 1 << 64:
        raise OutOfMemory(f"{caller}: {size} bytes is more than any address space")
    return size


def _alignment(alignment: Any, caller: str) -> int:
    try:
        alignment = operator.index(alignment)
    except TypeError:
        raise InvalidArgument(f"{caller}: alignment must be an integer, got {type(alignment).__name__}") from None
    if alignment <= 0 or alignment & (alignment - 1):
        raise InvalidArgument(f"{caller}: alignment must be a power of two, got {alignment}")
    if alignment >= 1 << 63:  # the native call names the real limit for smaller ones
        raise InvalidArgument(f"{caller}: alignment {alignment} exceeds the largest supported")
    return alignment


def shmem_malloc(size: int) -> int:
    """Allocate ``size`` symmetric bytes; returns the address (0 for size 0). Collective.
    Raises MemoryError (mori.core.OutOfMemory) naming the free space when the heap is exhausted."""
    size = _size(size, "shmem_malloc")
    if _native.gpu_bound("shmem_malloc"):  # bound to a GPU: MORI's shmem_malloc hands out device memory
        return _native.gpu_malloc(size, 256)
    return _native.malloc(size, 64)


def shmem_malloc_align(alignment: int, size: int) -> int:
    """Allocate ``size`` symmetric bytes aligned to ``alignment`` (a power of two). Collective."""
    alignment = _alignment(alignment, "shmem_malloc_align")
    size = _size(size, "shmem_malloc_align")
    if _native.gpu_bound("shmem_malloc_align"):
        return _native.gpu_malloc(size, max(alignment, 256))
    return _native.malloc(size, alignment)


def shmem_ext_malloc_with_flags(size: int, flags: int = 0) -> int:
    """MORI's flagged allocation; host heaps have no memory flavours, so flags are accepted and ignored."""
    return shmem_malloc(size)


def shmem_free(ptr: int) -> None:
    """Free a symmetric allocation. Collective."""
    if _native.gpu_contains(int(ptr), "shmem_free"):
        _native.gpu_free(int(ptr))
        return
    _native.free(int(ptr))


def shmem_ptr_p2p(dest_ptr: int, my_pe: int, dest_pe: int) -> int:
    """Address at which this process can load/store ``dest_ptr``'s counterpart on
    ``dest_pe``; 0 when that PE is reachable only through a remote transport."""
    if my_pe != shmem_mype():
        raise InvalidArgument(f"shmem_ptr_p2p: my_pe={my_pe} but this is PE {shmem_mype()}")
    return _native.ptr(int(dest_ptr), int(dest_pe))


def shmem_barrier_all() -> None:
    """Complete outstanding operations and wait for every PE."""
    _native.barrier_all()


def shmem_buffer_register(ptr: int, size: int) -> int:
    """Register a local buffer for remote access by this PE's transports. Returns 0."""
    _native.buffer_register(int(ptr), int(size))
    return 0


def shmem_buffer_deregister(ptr: int, size: int) -> int:
    _native.buffer_deregister(int(ptr), int(size))
    return 0


def shmem_num_qp_per_pe() -> int:
    """Queue pairs per peer: MORI's RDMA notion; our transports use one connection per peer."""
    return 1


# The address-level RMA calls are the native functions themselves: on small messages the
# cost of a Python wrapper would be most of the latency.
shmem_putmem = _native.putmem
shmem_putmem_nbi = _native.putmem_nbi
shmem_getmem = _native.getmem
shmem_quiet = _native.quiet
shmem_fence = _native.fence
