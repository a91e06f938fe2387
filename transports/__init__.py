# SPDX-License-Identifier: MIT
"""mori.transports: how PEs reach each other. Selection is automatic (per peer pair,
from the topology); this module reports it."""

from __future__ import annotations

from mori import _C


def transport_name(pe: int) -> str:
    """Name of the transport this PE uses to reach ``pe`` ("shm" on the same host)."""
    return _C.shmem.transport_name(pe)


def transport_matrix() -> list[str]:
    """Transport name for every PE, as seen from this PE."""
    return [_C.shmem.transport_name(pe) for pe in range(_C.shmem.n_pes())]


def transport_endpoint(pe: int) -> str:
    """Where this PE's transport reaches ``pe``: "ip:port" of its tcp listener, "" for shm."""
    return _C.shmem.transport_endpoint(pe)


def ucx_library() -> dict:
    """The UCX library MORI loads at run time (``MORI_UCX_LIBRARY``, else ``libucp.so.0``):
    ``{"available", "version", "path", "why"}``; ``why`` says why when it is unavailable."""
    return dict(_C.ucx.library())
