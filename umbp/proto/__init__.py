# SPDX-License-Identifier: MIT
"""mori.umbp.proto: the generated gRPC modules of UMBP's control and data planes.

``umbp_pb2``/``umbp_pb2_grpc`` (service ``umbp.UMBPMaster``), ``umbp_peer_pb2``/``umbp_peer_pb2_grpc``
(service ``umbp.UMBPPeer``) and ``umbp_admin_pb2``/``umbp_admin_pb2_grpc`` (our extensions), made at
build time from the ``.proto`` files beside this one. ``require()`` imports them or raises an
ImportError that says what to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

_INSTALL_HINT = (
    "the UMBP control plane needs grpcio, grpcio-tools and protobuf at build and run "
    "time: pip install grpcio grpcio-tools protobuf, then rebuild mori "
    "(pip install --no-build-isolation -e .)"
)


def require(name: str) -> ModuleType:
    """Import the generated module ``name`` (e.g. ``"umbp_pb2_grpc"``) with a clear error if absent."""
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ImportError as exc:
        raise ImportError(f"mori.umbp.proto.{name} is unavailable ({exc}); {_INSTALL_HINT}") from exc
