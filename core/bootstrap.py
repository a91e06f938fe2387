# SPDX-License-Identifier: MIT
"""How a PE finds its peers: which launcher started us, and the Python-side bootstraps.

The native core owns the TCP store bootstrap (unique id, ``mori run``, env vars). The
bootstraps that need a Python library live here and are handed to the core as an
object with ``rank``, ``size``, ``name``, ``allgather(bytes) -> bytes`` and ``barrier()``.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Optional

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


def _int_env(*names: str) -> Optional[int]:
    for name in names:
        value = os.environ.get(name)
        if value not in (None, ""):
            return int(value)
    return None


_warned: set[str] = set()


def _warn_once(key: str, text: str) -> None:
    """One warning per process on the ``mori.core`` logger: a derived secret is weak, and saying
    so once is enough (with no logging configured it reaches stderr as before)."""
    if key not in _warned:
        _warned.add(key)
        _log.warning("mori: warning: %s", text)


def detect_launch() -> LaunchInfo:
    """Identify the launcher from its environment variables.

    Order: ``mori run`` (MORI_STORE_ADDR), ``mpirun`` (Open MPI / PMI / PMIx variables),
    torchrun (TORCHELASTIC_RUN_ID), plain ``MASTER_ADDR``/``RANK``/``WORLD_SIZE``, else one PE.
    """
    env = os.environ
    if env.get("MORI_STORE_ADDR"):
        host, _, port = env["MORI_STORE_ADDR"].rpartition(":")
        return LaunchInfo("mori-run", int(env["MORI_RANK"]), int(env["MORI_WORLD_SIZE"]),
                          int(env.get("MORI_LOCAL_RANK", 0)), int(env.get("MORI_LOCAL_WORLD_SIZE", 1)),
                          host, int(port), env["MORI_JOB_SECRET"])
    mpi_size = _int_env("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS")
    if mpi_size is not None and _int_env("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK") is not None:
        return LaunchInfo("mpi", _int_env("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK") or 0, mpi_size,
                          _int_env("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID") or 0,
                          _int_env("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS") or 1)
    if env.get("MASTER_ADDR") and env.get("RANK") and env.get("WORLD_SIZE"):
        kind = "torchrun" if env.get("TORCHELASTIC_RUN_ID") else "env"
        port = int(env.get("MASTER_PORT", "29500"))
        # torchrun's agent (or torch's own rank-0 store) owns MASTER_PORT; MORI's store uses the next port
        # unless MORI_MASTER_PORT says otherwise.
        store_port = int(env.get("MORI_MASTER_PORT", port + 1))
        local_rank = int(env.get("LOCAL_RANK", 0))
        local_size = _int_env("LOCAL_WORLD_SIZE")
        size = int(env["WORLD_SIZE"])
        # The one policy of the core (launch_secret.h): without MORI_JOB_SECRET, a job that may span
        # hosts is refused; a one-host job derives its secret and meets its store on loopback.
        secret, store_host, derived = _C.core.env_launch_secret(
            env.get("MORI_JOB_SECRET", ""), env["MASTER_ADDR"], store_port, env.get("TORCHELASTIC_RUN_ID", ""),
            size, -1 if local_size is None else local_size)
        if derived and local_rank == 0:
            if kind == "torchrun":
                _warn_once("torchrun", "MORI_JOB_SECRET is not set, so the job secret travels in MORI's unique id "
                           "through torchrun's store, which anyone who can reach MASTER_ADDR:MASTER_PORT can read; "
                           "set the same random MORI_JOB_SECRET (64 hex digits) on every node")
            else:
                _warn_once("env", "MORI_JOB_SECRET is not set, so the job secret is derived from MASTER_ADDR and "
                           "the port, and anyone on this host who knows them can join the job; set the same "
                           "random MORI_JOB_SECRET (64 hex digits) on every rank")
        return LaunchInfo(kind, int(env["RANK"]), size, local_rank, local_size or 1, store_host, store_port, secret)
    return LaunchInfo("single")


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
