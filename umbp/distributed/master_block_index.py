# SPDX-License-Identifier: MIT
"""The in-memory block index: key -> copies, sharded by key hash so threads rarely contend.

Each entry also carries the key's last routed access (LRU eviction) and its lease (a routed get
protects the key from master eviction for UMBP_LEASE_DURATION_SEC). A per-node view lists what a
node holds, for eviction, unregistration and full syncs.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Optional

from mori.umbp.distributed.master_records import GET_TIER_PRIORITY, EvictionCandidate, Location

_TIER_RANK = {int(t): i for i, t in enumerate(GET_TIER_PRIORITY)}


@dataclasses.dataclass
class _Entry:
    copies: dict[tuple[str, int], int] = dataclasses.field(default_factory=dict)  # (node, tier) -> size
    last_access: float = 0.0
    lease_until: float = 0.0
    # The copies as Locations, fastest tier first: rebuilt on (rare) change, handed out as is
    # on (frequent) gets.
    locations: tuple = ()

    def rebuild(self) -> None:
        self.locations = tuple(
            sorted(
                (Location(n, t, s) for (n, t), s in self.copies.items()), key=lambda loc: _TIER_RANK.get(loc.tier, 9)
            )
        )


class _Shard:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: dict[str, _Entry] = {}
        self.by_node: dict[str, dict[str, set[int]]] = {}  # node -> key -> tiers


class BlockIndex:
    """Sharded key -> copies map (UMBP_MASTER_INDEX_SHARDS lock shards)."""

    def __init__(self, shards: int = 32) -> None:
        if shards < 1:
            raise ValueError(f"shards must be >= 1, got {shards}")
        self._shards = [_Shard() for _ in range(shards)]

    def _shard(self, key: str) -> _Shard:
        # str hashes are cached on the object and stable within the process: all this index needs
        return self._shards[hash(key) % len(self._shards)]

    def add(self, node_id: str, key: str, tier: int, size: int, now: float) -> bool:
        """Record a copy; True if the key had no copy before."""
        shard = self._shard(key)
        with shard.lock:
            entry = shard.entries.get(key)
            new_key = entry is None
            if entry is None:
                entry = shard.entries[key] = _Entry(last_access=now)
            entry.copies[(node_id, tier)] = size
            entry.rebuild()
            shard.by_node.setdefault(node_id, {}).setdefault(key, set()).add(tier)
            return new_key

    def remove(self, node_id: str, key: str, tier: int) -> Optional[tuple[int, bool]]:
        """Drop a copy; (its size, whether it was the key's last copy), or None if unknown."""
        shard = self._shard(key)
        with shard.lock:
            return self._remove_locked(shard, node_id, key, tier)

    @staticmethod
    def _remove_locked(shard: _Shard, node_id: str, key: str, tier: int) -> Optional[tuple[int, bool]]:
        entry = shard.entries.get(key)
        if entry is None or (node_id, tier) not in entry.copies:
            return None
        size = entry.copies.pop((node_id, tier))
        node_keys = shard.by_node.get(node_id)
        if node_keys is not None and key in node_keys:
            node_keys[key].discard(tier)
            if not node_keys[key]:
                del node_keys[key]
            if not node_keys:
                del shard.by_node[node_id]
        if entry.copies:
            entry.rebuild()
            return size, False
        del shard.entries[key]
        return size, True

    def remove_node(self, node_id: str) -> list[tuple[str, int]]:
        """Drop every copy the node holds; returns (key, size) of the keys left with no copy."""
        gone: list[tuple[str, int]] = []
        for shard in self._shards:
            with shard.lock:
                node_keys = shard.by_node.get(node_id)
                if not node_keys:
                    continue
                for key, tiers in list(node_keys.items()):
                    for tier in list(tiers):
                        removed = self._remove_locked(shard, node_id, key, tier)
                        if removed is not None and removed[1]:
                            gone.append((key, removed[0]))
        return gone

    def route(self, keys: list[str], exclude: frozenset[str], now: float, lease_until: float) -> list[tuple]:
        """Per key its copies (fastest tier first), or () on a miss; found keys are touched
        and leased."""
        out: list[tuple] = []
        append = out.append
        shards, nshards = self._shards, len(self._shards)
        for key in keys:
            shard = shards[hash(key) % nshards]
            with shard.lock:
                entry = shard.entries.get(key)
                if entry is None:
                    append(())
                    continue
                locs = entry.locations
                if exclude:
                    locs = tuple(loc for loc in locs if loc.node_id not in exclude)
                    if not locs:
                        append(())
                        continue
                entry.last_access = now
                if lease_until > entry.lease_until:
                    entry.lease_until = lease_until
                append(locs)
        return out

    def contains(self, keys: list[str]) -> list[bool]:
        out = []
        for key in keys:
            shard = self._shard(key)
            with shard.lock:
                out.append(key in shard.entries)
        return out

    def candidates(self, node_id: str, tier: int, now: float) -> list[EvictionCandidate]:
        out: list[EvictionCandidate] = []
        for shard in self._shards:
            with shard.lock:
                for key, tiers in shard.by_node.get(node_id, {}).items():
                    if tier not in tiers:
                        continue
                    entry = shard.entries[key]
                    if entry.lease_until > now:
                        continue
                    out.append(EvictionCandidate(key, entry.copies[(node_id, tier)], entry.last_access))
        return out

    def node_copies(self, node_id: str) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        for shard in self._shards:
            with shard.lock:
                for key, tiers in shard.by_node.get(node_id, {}).items():
                    out.extend((key, t) for t in tiers)
        return out

    def node_keys(self, node_id: str) -> list[str]:
        out: list[str] = []
        for shard in self._shards:
            with shard.lock:
                out.extend(shard.by_node.get(node_id, {}).keys())
        return out

    def __len__(self) -> int:
        return sum(len(s.entries) for s in self._shards)
