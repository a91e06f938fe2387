# SPDX-License-Identifier: MIT
"""mori.umbp.distributed: MORI-UMBP's distributed pool, control plane first.

The master (``umbp_master`` / ``mori umbp-master``) speaks MORI's ``umbp.UMBPMaster`` gRPC service:
peers register, ship their key events on heartbeats, and ask where to put and where to read; the
master holds an index fed by those events (in memory or in Redis/Valkey), grants short leases on
routed gets, evicts through the peers when a tier runs full, and keeps the external-KV index that
schedulers query. ``UMBPMasterClient`` is the scheduler-side client.

The gRPC modules are generated at build time (``mori.umbp.proto``); without grpcio, grpcio-tools
and protobuf importing this package raises an ImportError saying what to install.
"""

from mori.umbp.proto import require as _require

_require("umbp_pb2_grpc")  # fail here, clearly, when the build had no grpcio-tools

from mori.umbp.distributed.master_client import (  # noqa: E402
    UMBPExternalKvHitCountEntry,
    UMBPExternalKvNodeMatch,
    UMBPMasterClient,
)

__all__ = ["UMBPExternalKvHitCountEntry", "UMBPExternalKvNodeMatch", "UMBPMasterClient"]
