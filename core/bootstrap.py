# SPDX-License-Identifier: MIT
"""How a PE finds its peers: which launcher started us, and the Python-side bootstraps.

The native core owns the TCP store bootstrap (unique id, ``mori run``, env vars). The
bootstraps that need a Python library live here and are handed to the core as an
object with ``rank``, ``size``, ``name``, ``allgather(bytes) -> bytes`` and ``barrier()``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from mori import _C

_log = logging.getLogger("mori.core")


@dataclass(frozen=True)
class LaunchInfo:
    """What the environment says about this process's place in a job."""

    kind: str  # "mori-run", "mpi", "torchrun", "env" or "single"
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    store_host: str = ""
    store_port: int = 0
    secret_hex: str = ""


_warned: set[str] = set()


def _warn_once(key: str, text: str) -> None:
    """One warning per process on the ``mori.core`` logger: a derived secret is weak, and saying
    so once is enough (with no logging configured it reaches stderr as before)."""
    if key not in _warned:
        _warned.add(key)
        _log.warning("mori: warning: %s", text)


def detect_launch() -> LaunchInfo:
    """Identify the launcher from its environment variables (the native core's detection,
    ``core/launch.h``, the same that ``shmem_init`` uses in C programs).

    Order: ``mori run`` (MORI_STORE_ADDR), ``mpirun`` (Open MPI / PMI / PMIx variables),
    torchrun (TORCHELASTIC_RUN_ID), plain ``MASTER_ADDR``/``RANK``/``WORLD_SIZE``, else one PE.
    Without MORI_JOB_SECRET a job that may span hosts is refused (``InvalidArgument``); a
    one-host job derives its secret and meets its store on loopback.
    """
    found = _C.core.detect_launch()
    derived = found.pop("derived_secret")
    info = LaunchInfo(**found)
    if derived and info.local_rank == 0:
        if info.kind == "torchrun":
            _warn_once(
                "torchrun",
                "MORI_JOB_SECRET is not set, so the job secret travels in MORI's unique id "
                "through torchrun's store, which anyone who can reach MASTER_ADDR:MASTER_PORT can read; "
                "set the same random MORI_JOB_SECRET (64 hex digits) on every node",
            )
        else:
            _warn_once(
                "env",
                "MORI_JOB_SECRET is not set, so the job secret is derived from MASTER_ADDR and "
                "the port, and anyone on this host who knows them can join the job; set the same "
                "random MORI_JOB_SECRET (64 hex digits) on every rank",
            )
    return info


class MpiBootstrap:
    """Bootstrap over an mpi4py communicator (``MPI.COMM_WORLD`` unless given)."""

    name = "mpi"

    def __init__(self, comm: Any = None) -> None:
        try:
            from mpi4py import MPI
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError("the MPI bootstrap needs mpi4py: pip install mpi4py") from exc
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()

    def allgather(self, data: bytes) -> bytes:
        return b"".join(self.comm.allgather(data))

    def barrier(self) -> None:
        self.comm.Barrier()


def new_unique_id() -> bytes:
    """A fresh 128-byte unique id; this process hosts the bootstrap store it names."""
    return _C.core.create_unique_id()
