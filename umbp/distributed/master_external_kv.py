# SPDX-License-Identifier: MIT
"""The in-memory external-KV index: which node holds which engine-managed block in which tier,
and how often routers matched each block (hit counters with a TTL)."""

from __future__ import annotations

import threading
from typing import Iterable

from mori.umbp.distributed.master_store import ExternalKvStore


class InMemoryExternalKv(ExternalKvStore):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_hash: dict[str, dict[str, set[int]]] = {}  # hash -> node -> tiers
        self._by_node: dict[str, dict[int, set[str]]] = {}  # node -> tier -> hashes
        self._hits: dict[str, list] = {}  # hash -> [total, last touched]

    def report(self, node_id: str, hashes: list[str], tier: int) -> None:
        with self._lock:
            node = self._by_node.setdefault(node_id, {}).setdefault(tier, set())
            for h in hashes:
                node.add(h)
                self._by_hash.setdefault(h, {}).setdefault(node_id, set()).add(tier)

    def _drop(self, node_id: str, h: str, tier: int) -> None:
        nodes = self._by_hash.get(h)
        if nodes is None or node_id not in nodes:
            return
        nodes[node_id].discard(tier)
        if not nodes[node_id]:
            del nodes[node_id]
        if not nodes:
            del self._by_hash[h]

    def revoke(self, node_id: str, hashes: list[str], tier: int) -> None:
        with self._lock:
            tiers = self._by_node.get(node_id)
            if tiers is None or tier not in tiers:
                return
            for h in hashes:
                tiers[tier].discard(h)
                self._drop(node_id, h, tier)
            if not tiers[tier]:
                del tiers[tier]

    def revoke_tier(self, node_id: str, tier: int) -> None:
        with self._lock:
            tiers = self._by_node.get(node_id)
            if tiers is None or tier not in tiers:
                return
            for h in tiers.pop(tier):
                self._drop(node_id, h, tier)

    def revoke_node(self, node_id: str) -> None:
        with self._lock:
            for tier, hashes in self._by_node.pop(node_id, {}).items():
                for h in hashes:
                    self._drop(node_id, h, tier)

    def match(self, hashes: list[str]) -> dict[str, dict[int, list[str]]]:
        out: dict[str, dict[int, list[str]]] = {}
        seen: set[str] = set()
        with self._lock:
            for h in hashes:
                if h in seen:
                    continue
                seen.add(h)
                for node_id, tiers in self._by_hash.get(h, {}).items():
                    per_node = out.setdefault(node_id, {})
                    for tier in sorted(tiers):
                        per_node.setdefault(tier, []).append(h)
        return out

    def count_hits(self, hashes: Iterable[str], now: float) -> None:
        with self._lock:
            for h in hashes:
                entry = self._hits.setdefault(h, [0, now])
                entry[0] += 1
                entry[1] = now

    def hit_counts(self, hashes: list[str]) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        seen: set[str] = set()
        with self._lock:
            for h in hashes:
                if h in seen or h not in self._hits:
                    continue
                seen.add(h)
                out.append((h, self._hits[h][0]))
        return out

    def drop_stale_hits(self, now: float, ttl: float) -> int:
        with self._lock:
            stale = [h for h, (_, touched) in self._hits.items() if now - touched > ttl]
            for h in stale:
                del self._hits[h]
        return len(stale)

    def clear(self) -> None:
        with self._lock:
            self._by_hash.clear()
            self._by_node.clear()

    def live_counts(self) -> dict[str, int]:
        with self._lock:
            return {node: len(set().union(*tiers.values())) for node, tiers in self._by_node.items() if tiers}
