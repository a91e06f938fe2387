# SPDX-License-Identifier: MIT
"""The master's records: tiers, client (peer) records, key locations and heartbeat events."""

from __future__ import annotations

import dataclasses
import enum
from typing import NamedTuple


class Tier(enum.IntEnum):
    """Tier numbers of the wire (umbp.TierType) and of mori.umbp.UMBPTierType."""

    UNKNOWN = 0
    HBM = 1
    DRAM = 2
    SSD = 3


# Get routing reads the fastest tier first; puts go to memory tiers only (SSD copies are the
# peer's own business).
GET_TIER_PRIORITY = (Tier.HBM, Tier.DRAM, Tier.SSD)
PUT_TIERS = (Tier.HBM, Tier.DRAM)


class ClientStatus(enum.IntEnum):
    UNKNOWN = 0
    ALIVE = 1
    EXPIRED = 2


@dataclasses.dataclass
class TierCapacity:
    total: int = 0
    available: int = 0
    max_allocatable: int = 0  # 0: not reported (any size up to `available`)

    def fits(self, size: int) -> bool:
        return self.available >= size and (self.max_allocatable == 0 or self.max_allocatable >= size)


@dataclasses.dataclass
class ClientRecord:
    """A registered peer: where it is, what it holds room for, where its event stream stands."""

    node_id: str
    node_address: str = ""
    peer_address: str = ""
    engine_desc: bytes = b""
    tags: list[str] = dataclasses.field(default_factory=list)
    capacities: dict[int, TierCapacity] = dataclasses.field(default_factory=dict)
    status: ClientStatus = ClientStatus.ALIVE
    last_heartbeat: float = 0.0  # time.monotonic() of the master that saw it (wall time in Redis)
    registered_at: float = 0.0
    acked_seq: int = 0


class Location(NamedTuple):
    """One copy of a key: on which node, in which tier, how many bytes, and for a DRAM copy its
    place in the owner's arena and its XXH3 (checksum 0: not known) (a tuple: the get path makes
    thousands per call)."""

    node_id: str
    tier: int
    size: int
    offset: int = 0
    checksum: int = 0


@dataclasses.dataclass
class RoutedGets:
    """One batch's routed gets, columnar like BatchRouteGetResponse: ``node_ref[i]`` is 0 for a
    miss, else a 1-based index into ``nodes`` (each serving node once, in first-use order), with
    ``hits`` keys routed to each."""

    nodes: list[str]
    hits: list[int]
    node_ref: list[int]
    tier: list[int]
    size: list[int]
    misses: int
    # The routed copy's offset in its owner's DRAM arena and its XXH3 (checksum 0: not known),
    # per key; empty when the store keeps no places (the reader then resolves at the owner).
    offset: list[int] = dataclasses.field(default_factory=list)
    checksum: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class KvEvent:
    add: bool
    key: str
    tier: int
    size: int = 0
    offset: int = 0  # a DRAM ADD's place in the owner's arena
    checksum: int = 0  # and the value's XXH3 (0: not known)


@dataclasses.dataclass
class EventBundle:
    seq: int
    events: list[KvEvent]


@dataclasses.dataclass
class HeartbeatOutcome:
    status: ClientStatus
    acked_seq: int = 0
    request_full_sync: bool = False
    # (key, size) of keys that gained their first copy / lost their last one (quota accounting).
    removed: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    added: list[tuple[str, int]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class EvictionCandidate:
    key: str
    size: int
    last_access: float
