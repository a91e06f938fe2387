# SPDX-License-Identifier: MIT
"""Routing: where a put should go (capacity, affinity) and which copy a get should read.

Put: memory tiers only, HBM before DRAM; ``most_available`` picks the node with the most free
bytes in the tier, ``random`` draws nodes weighted by free bytes. Affinity ``none`` considers
every node, ``same`` prefers the writer when it has room, ``local`` only the writer. Capacity is
what the last heartbeat said, minus what the master routed since (so one batch spreads out);
the router keeps the capacity of the heartbeats it saw itself, so the two always match.
Get: the fastest tier holding the key (HBM > DRAM > SSD), a random copy within it.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Iterable, Optional

from mori import _C

from mori.umbp.distributed.master_records import (
    ClientRecord,
    Location,
    TierCapacity,
)

PUT_ALGOS = ("most_available", "random")
AFFINITIES = ("none", "same", "local")
GET_STRATEGIES = ("tier_priority", "random")


@dataclasses.dataclass(frozen=True)
class PutTarget:
    node_id: str
    tier: int
    peer_address: str


class PutRouter:
    """Chooses put targets from a snapshot of the live clients: the master's one put-routing
    registry (``mori._C.umbp.PutRoutes``, which the grpc++ server's native BatchRoutePut routes
    against too), fed with the clients' records as Python holds them."""

    def __init__(self, algo: str = "most_available", affinity: str = "none") -> None:
        if algo not in PUT_ALGOS:
            raise ValueError(f"UMBP_ROUTE_PUT_SELECT_ALGO must be one of {PUT_ALGOS}, got {algo!r}")
        if affinity not in AFFINITIES:
            raise ValueError(f"UMBP_ROUTE_PUT_NODE_AFFINITY must be one of {AFFINITIES}, got {affinity!r}")
        self.algo = algo
        self.affinity = affinity
        self.native = _C.umbp.PutRoutes(algo, affinity)

    def capacity_reported(
        self, node_id: str, capacities: Optional[dict[int, TierCapacity]] = None, at: float = 0.0
    ) -> None:
        """A heartbeat (or registration, at wall time ``at``) brought fresh capacity: forget what
        was routed to the node before it, and route against this capacity from now on. The
        clients' records reach route() through the master's client cache (up to 0.2 s old): a
        record from before the report, less no routed bytes, would offer the room the routed
        puts took a second time (a 4 MiB HBM that took 3 MiB would be sent 3 MiB more)."""
        self.native.reported(node_id, _tiers(capacities or {}), at)

    def forget(self, node_id: str) -> None:
        """The node left (unregistered, or reaped): nothing of it is kept."""
        self.native.forget(node_id)

    @staticmethod
    def rooms(clients: Iterable[ClientRecord]):
        """The clients as the router takes them (convert once per batch)."""
        return _C.umbp.PutRoutes.rooms(room_tuples(clients))

    def route(self, writer: str, size: int, rooms, exclude: frozenset[str]) -> Optional[PutTarget]:
        """Where a put of ``size`` bytes goes among ``rooms`` (``rooms(clients)``) less ``exclude``;
        None when no node has room."""
        hit = self.native.route(writer, int(size), rooms, list(exclude))
        return None if hit is None else PutTarget(*hit)


def _tiers(capacities: dict[int, TierCapacity]) -> list[tuple[int, int, int, int]]:
    return [(int(t), int(c.total), int(c.available), int(c.max_allocatable)) for t, c in capacities.items()]


def room_tuples(clients: Iterable[ClientRecord]) -> list[tuple]:
    """[(node_id, peer_address, last_heartbeat, [(tier, total, available, max_allocatable)])]: the
    clients as the native put routes take them."""
    return [(c.node_id, c.peer_address, float(c.last_heartbeat), _tiers(c.capacities)) for c in clients]


class GetRouter:
    """Picks the copy a reader should use."""

    def __init__(self, strategy: str = "tier_priority", rng: Optional[random.Random] = None) -> None:
        if strategy not in GET_STRATEGIES:
            raise ValueError(f"UMBP_ROUTE_GET_STRATEGY must be one of {GET_STRATEGIES}, got {strategy!r}")
        self.strategy = strategy
        self._rng = rng or random.Random()

    def choose(self, copies, alive: dict[str, ClientRecord]) -> Optional[Location]:
        """``copies`` come fastest tier first (the stores keep them so)."""
        if len(copies) == 1:  # the common case
            return copies[0] if copies[0].node_id in alive else None
        live = [c for c in copies if c.node_id in alive]
        if not live:
            return None
        if self.strategy == "random":
            return self._rng.choice(live)
        best = live[0].tier
        in_tier = [c for c in live if c.tier == best]
        return in_tier[0] if len(in_tier) == 1 else self._rng.choice(in_tier)
