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
import threading
from typing import Optional

from mori.umbp.distributed.master_records import (
    PUT_TIERS,
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
    """Chooses put targets from a snapshot of the live clients."""

    def __init__(
        self, algo: str = "most_available", affinity: str = "none", rng: Optional[random.Random] = None
    ) -> None:
        if algo not in PUT_ALGOS:
            raise ValueError(f"UMBP_ROUTE_PUT_SELECT_ALGO must be one of {PUT_ALGOS}, got {algo!r}")
        if affinity not in AFFINITIES:
            raise ValueError(f"UMBP_ROUTE_PUT_NODE_AFFINITY must be one of {AFFINITIES}, got {affinity!r}")
        self.algo = algo
        self.affinity = affinity
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        # Bytes routed to (node, tier) since that node's capacity was last reported.
        self._routed: dict[tuple[str, int], int] = {}
        # node -> (when, capacities) of the last report this master saw.
        self._reported: dict[str, tuple[float, dict[int, TierCapacity]]] = {}

    def capacity_reported(
        self, node_id: str, capacities: Optional[dict[int, TierCapacity]] = None, at: float = 0.0
    ) -> None:
        """A heartbeat (or registration, at wall time ``at``) brought fresh capacity: forget what
        was routed to the node before it, and route against this capacity from now on. The
        clients' records reach route() through the master's client cache (up to 0.2 s old): a
        record from before the report, less no routed bytes, would offer the room the routed
        puts took a second time (a 4 MiB HBM that took 3 MiB would be sent 3 MiB more)."""
        with self._lock:
            for k in [k for k in self._routed if k[0] == node_id]:
                del self._routed[k]
            last = self._reported.get(node_id)
            if capacities and (last is None or at >= last[0]):  # heartbeats may be served out of order
                self._reported[node_id] = (at, dict(capacities))

    def forget(self, node_id: str) -> None:
        """The node left (unregistered, or reaped): nothing of it is kept."""
        with self._lock:
            self._reported.pop(node_id, None)
            for k in [k for k in self._routed if k[0] == node_id]:
                del self._routed[k]

    def _capacities(self, client: ClientRecord) -> dict[int, TierCapacity]:
        # A record newer than this master's last report (another master of a shared store saw a
        # later heartbeat) wins over it.
        r = self._reported.get(client.node_id)
        return r[1] if r is not None and r[0] >= client.last_heartbeat else client.capacities

    def _free(self, client: ClientRecord, tier: int) -> int:
        cap = self._capacities(client).get(tier)
        if cap is None:
            return 0
        return cap.available - self._routed.get((client.node_id, tier), 0)

    def route(
        self, writer: str, size: int, clients: list[ClientRecord], exclude: frozenset[str]
    ) -> Optional[PutTarget]:
        candidates = [c for c in clients if c.node_id not in exclude]
        if self.affinity == "local":
            candidates = [c for c in candidates if c.node_id == writer]
        with self._lock:
            if self.affinity == "same":
                mine = [c for c in candidates if c.node_id == writer]
                target = self._pick(mine, size)
                if target is not None:
                    return target
            return self._pick(candidates, size)

    def _pick(self, candidates: list[ClientRecord], size: int) -> Optional[PutTarget]:
        for tier in PUT_TIERS:
            fitting = []
            for c in candidates:
                cap = self._capacities(c).get(tier)
                free = self._free(c, tier)
                if cap is None or free < size or (cap.max_allocatable and cap.max_allocatable < size):
                    continue
                fitting.append((free, c))
            if not fitting:
                continue
            if self.algo == "most_available":
                free, chosen = max(fitting, key=lambda fc: (fc[0], fc[1].node_id))
            else:
                weights = [max(free, 1) for free, _ in fitting]
                free, chosen = self._rng.choices(fitting, weights=weights)[0]
            self._routed[(chosen.node_id, tier)] = self._routed.get((chosen.node_id, tier), 0) + size
            return PutTarget(chosen.node_id, tier, chosen.peer_address)
        return None


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
