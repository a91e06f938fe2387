# SPDX-License-Identifier: MIT
"""The master's channels to peers (UMBPPeer), one per peer address, signed when a secret is set."""

from __future__ import annotations

import threading
from typing import Optional

from mori.umbp.distributed.grpc_channels import Channel
from mori.umbp.proto import require

_peer_pb = require("umbp_peer_pb2")
_peer_grpc = require("umbp_peer_pb2_grpc")


class PeerChannels:
    def __init__(self, secret: Optional[bytes] = None) -> None:
        self._secret = secret
        self._lock = threading.Lock()
        self._channels: dict[str, Channel] = {}

    def stub(self, peer_address: str):
        with self._lock:
            hit = self._channels.get(peer_address)
            if hit is None:
                service = _peer_pb.DESCRIPTOR.services_by_name["UMBPPeer"]
                hit = Channel(peer_address, [(_peer_grpc.UMBPPeerStub, service, _peer_pb)], secret=self._secret)
                self._channels[peer_address] = hit
            return hit.stubs[0]

    def forget(self, peer_address: str) -> None:
        with self._lock:
            hit = self._channels.pop(peer_address, None)
        if hit is not None:
            hit.close()

    def close(self) -> None:
        with self._lock:
            channels, self._channels = self._channels, {}
        for channel in channels.values():
            channel.close()
