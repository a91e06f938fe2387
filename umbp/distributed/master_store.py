# SPDX-License-Identifier: MIT
"""The master's metadata store interface: membership, the block index with leases, external KV.

Two implementations: ``InMemoryMetadataStore`` (master_store_memory.py, lost on restart) and
``RedisMetadataStore`` (master_store_redis.py, shared by masters, survives them). All state is
soft: a wiped store is rebuilt within one heartbeat, when the peers are asked for a full sync.
Times are wall-clock seconds (``time.time()``) so that several masters agree on them.
"""

from __future__ import annotations

import abc
from typing import Collection, Iterable, Optional, Sequence

from mori.umbp.distributed.master_records import (
    ClientRecord,
    EventBundle,
    EvictionCandidate,
    HeartbeatOutcome,
    Location,
    RoutedGets,
    TierCapacity,
)


class ExternalKvStore(abc.ABC):
    """Placement of blocks engines manage themselves (hash -> node -> tiers) and hit counters."""

    @abc.abstractmethod
    def report(self, node_id: str, hashes: list[str], tier: int) -> None: ...

    @abc.abstractmethod
    def revoke(self, node_id: str, hashes: list[str], tier: int) -> None: ...

    @abc.abstractmethod
    def revoke_tier(self, node_id: str, tier: int) -> None: ...

    @abc.abstractmethod
    def revoke_node(self, node_id: str) -> None: ...

    @abc.abstractmethod
    def match(self, hashes: list[str]) -> dict[str, dict[int, list[str]]]:
        """node_id -> tier -> matched hashes (query order, each once)."""

    @abc.abstractmethod
    def count_hits(self, hashes: Iterable[str], now: float) -> None:
        """Add one hit to each hash (the caller passes each matched hash once)."""

    @abc.abstractmethod
    def hit_counts(self, hashes: list[str]) -> list[tuple[str, int]]:
        """(hash, total) for the known hashes among ``hashes``, each once, in query order."""

    @abc.abstractmethod
    def drop_stale_hits(self, now: float, ttl: float) -> int: ...

    @abc.abstractmethod
    def clear(self) -> None: ...

    @abc.abstractmethod
    def live_counts(self) -> dict[str, int]:
        """node_id -> distinct hashes it holds (any tier)."""


class MetadataStore(abc.ABC):
    """What the master keeps. Implementations are safe to call from many threads."""

    external_kv: ExternalKvStore

    # -- membership ------------------------------------------------------------------------
    @abc.abstractmethod
    def register_client(self, record: ClientRecord, now: float, expiry: float) -> bool:
        """Add ``record``; False if a live client (heartbeat within ``expiry``) holds the id.
        An expired holder is replaced and its keys dropped."""

    @abc.abstractmethod
    def unregister_client(self, node_id: str) -> list[tuple[str, int]]:
        """Remove the client and its copies; returns the (key, size) copies dropped."""

    @abc.abstractmethod
    def get_client(self, node_id: str) -> Optional[ClientRecord]: ...

    @abc.abstractmethod
    def alive_clients(self) -> list[ClientRecord]: ...

    @abc.abstractmethod
    def apply_heartbeat(
        self,
        node_id: str,
        now: float,
        capacities: dict[int, TierCapacity],
        bundles: list[EventBundle],
        is_full_sync: bool,
        baseline: int,
    ) -> HeartbeatOutcome:
        """Record liveness and capacity and apply the event bundles in seq order.

        A bundle at ``acked + 1`` is applied, older ones are skipped (re-sent after a lost
        reply), a later one is a gap: nothing more is applied and the peer is asked for a full
        sync. A full sync replaces the node's copies by the bundles' ADD events and resumes
        from ``baseline``. An unknown node gets status UNKNOWN (it must register again)."""

    @abc.abstractmethod
    def reap_expired(self, now: float, expiry: float) -> list[str]:
        """Drop clients silent for longer than ``expiry`` with their keys; returns their ids."""

    # -- block index -----------------------------------------------------------------------
    @abc.abstractmethod
    def route_get_batch(
        self, keys: list[str], exclude: frozenset[str], now: float, lease_until: float
    ) -> list[Sequence[Location]]:
        """Copies of each key on non-excluded nodes, fastest tier first (HBM, DRAM, SSD), each
        with the place its owner's ADD event gave where this path keeps it (offset, checksum;
        0s: not known; the native index gives places through ``route_get_choose``); a key
        found is marked accessed at ``now`` and leased (protected from master eviction) until
        ``lease_until``."""

    def route_get_choose(
        self,
        keys: Sequence[str],
        exclude: Collection[str],
        alive: Collection[str],
        now: float,
        lease_until: float,
        router,
    ) -> RoutedGets:
        """The get path of one batch: ``route_get_batch`` and then, per key, the copy
        ``router`` (a ``GetRouter``) picks among those on ``alive`` nodes, as columns. Stores with
        a native index answer it in one native call; this default goes key by key."""
        keys = list(keys)
        copies = self.route_get_batch(keys, frozenset(exclude), now, lease_until) if keys else []
        out = RoutedGets([], [], [], [], [], 0, [], [])
        ref_of: dict[str, int] = {}
        for c in copies:
            loc = router.choose(c, alive) if c else None
            if loc is None:
                out.misses += 1
                out.node_ref.append(0)
                out.tier.append(0)
                out.size.append(0)
                out.offset.append(0)
                out.checksum.append(0)
                continue
            ref = ref_of.get(loc.node_id)
            if ref is None:
                out.nodes.append(loc.node_id)
                out.hits.append(0)
                ref = ref_of[loc.node_id] = len(out.nodes)
            out.hits[ref - 1] += 1
            out.node_ref.append(ref)
            out.tier.append(loc.tier)
            out.size.append(loc.size)
            out.offset.append(loc.offset)
            out.checksum.append(loc.checksum)
        return out

    @abc.abstractmethod
    def lookup_batch(self, keys: list[str]) -> list[bool]:
        """Whether each key has a copy; no lease, no access-time update."""

    @abc.abstractmethod
    def eviction_candidates(self, node_id: str, tier: int, now: float) -> list[EvictionCandidate]:
        """The node's keys in ``tier`` that hold no lease at ``now`` (any order)."""

    @abc.abstractmethod
    def node_keys(self, node_id: str) -> list[str]:
        """Every key the node holds a copy of."""

    @abc.abstractmethod
    def key_count(self) -> int: ...

    def new_place_feed(self, dram_tier: int):
        """The master's place feed (master_place_feed.py): this process's own log in memory; a
        store shared by several master processes (Redis) keeps one log for all of them."""
        from mori.umbp.distributed.master_place_feed import PlaceFeed

        return PlaceFeed(dram_tier)

    def close(self) -> None:
        """Release connections (Redis); the in-memory store has none."""
