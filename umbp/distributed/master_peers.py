# SPDX-License-Identifier: MIT
"""The master's channels to peers (UMBPPeer), one per peer address, signed when a secret is set."""

from __future__ import annotations

import threading
from typing import Optional

import grpc

from mori.umbp.proto import require

_peer_grpc = require("umbp_peer_pb2_grpc")


class PeerChannels:
    def __init__(self, secret: Optional[bytes] = None) -> None:
        self._secret = secret
        self._lock = threading.Lock()
        self._stubs: dict[str, tuple[grpc.Channel, object]] = {}

    def stub(self, peer_address: str):
        with self._lock:
            hit = self._stubs.get(peer_address)
            if hit is not None:
                return hit[1]
            channel = grpc.insecure_channel(peer_address)
            if self._secret is not None:
                from mori.umbp.distributed.master_auth import SigningInterceptor

                channel = grpc.intercept_channel(channel, SigningInterceptor(self._secret))
            stub = _peer_grpc.UMBPPeerStub(channel)
            self._stubs[peer_address] = (channel, stub)
            return stub

    def forget(self, peer_address: str) -> None:
        with self._lock:
            hit = self._stubs.pop(peer_address, None)
        if hit is not None:
            hit[0].close()

    def close(self) -> None:
        with self._lock:
            stubs, self._stubs = self._stubs, {}
        for channel, _ in stubs.values():
            channel.close()
