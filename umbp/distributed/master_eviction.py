# SPDX-License-Identifier: MIT
"""Master-driven eviction: peers own their pages, the master asks them to let go.

Every UMBP_EVICTION_CHECK_INTERVAL_SEC the manager looks at each live node's memory tiers; one
above the high watermark gets a list of victims (from the node's unleased keys, chosen by the
strategy) worth enough bytes to bring it down to the low watermark, sent as EvictKey. The peer
has the last word (it keeps keys it is serving) and ships REMOVE events for what it freed; the
index changes only through those events.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Optional, Protocol

import grpc

from mori.umbp.distributed.master_records import PUT_TIERS, EvictionCandidate
from mori.umbp.distributed.master_settings import MasterSettings
from mori.umbp.distributed.master_store import MetadataStore
from mori.umbp.proto import require

_peer_pb2 = require("umbp_peer_pb2")
log = logging.getLogger("mori.umbp.master")


class EvictionStrategy(Protocol):
    """Chooses victims among a node's unleased keys of one tier."""

    def select(self, candidates: list[EvictionCandidate], bytes_needed: int) -> list[EvictionCandidate]: ...


class LruStrategy:
    """Least recently routed first (a key never read counts from when it was indexed)."""

    def select(self, candidates: list[EvictionCandidate], bytes_needed: int) -> list[EvictionCandidate]:
        chosen, freed = [], 0
        for c in sorted(candidates, key=lambda c: (c.last_access, c.key)):
            if freed >= bytes_needed:
                break
            chosen.append(c)
            freed += c.size
        return chosen


class LargestFirstStrategy:
    """Biggest values first: fewest EvictKey entries for the bytes."""

    def select(self, candidates: list[EvictionCandidate], bytes_needed: int) -> list[EvictionCandidate]:
        chosen, freed = [], 0
        for c in sorted(candidates, key=lambda c: (-c.size, c.last_access, c.key)):
            if freed >= bytes_needed:
                break
            chosen.append(c)
            freed += c.size
        return chosen


_STRATEGIES: dict[str, Callable[[], EvictionStrategy]] = {"lru": LruStrategy, "largest_first": LargestFirstStrategy}


def register_strategy(name: str, factory: Callable[[], EvictionStrategy]) -> None:
    """Make a strategy selectable by UMBP_EVICTION_STRATEGY=name."""
    _STRATEGIES[name] = factory


def make_strategy(name: str) -> EvictionStrategy:
    try:
        return _STRATEGIES[name]()
    except KeyError:
        raise ValueError(f"UMBP_EVICTION_STRATEGY={name!r} is not one of {sorted(_STRATEGIES)}") from None


class EvictionManager:
    def __init__(
        self,
        store: MetadataStore,
        settings: MasterSettings,
        peers,
        metrics=None,
        strategy: Optional[EvictionStrategy] = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._peers = peers
        self._metrics = metrics
        self.strategy = strategy or make_strategy(settings.eviction_strategy)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def plan(self, now: float) -> dict[str, tuple[str, list[tuple[int, EvictionCandidate]]]]:
        """node_id -> (peer address, [(tier, victim)]) for the tiers above the high watermark."""
        plans: dict[str, tuple[str, list]] = {}
        for client in self._store.alive_clients():
            for tier in PUT_TIERS:
                cap = client.capacities.get(tier)
                if cap is None or cap.total == 0:
                    continue
                used = cap.total - cap.available
                if used <= self._settings.eviction_high_wm * cap.total:
                    continue
                need = int(used - self._settings.eviction_low_wm * cap.total)
                victims = self.strategy.select(self._store.eviction_candidates(client.node_id, tier, now), need)
                if victims:
                    plans.setdefault(client.node_id, (client.peer_address, []))[1].extend((tier, v) for v in victims)
        return plans

    def run_once(self, now: Optional[float] = None) -> dict[str, int]:
        """One round; returns node_id -> bytes the peer said it freed."""
        now = time.time() if now is None else now
        freed: dict[str, int] = {}
        for node_id, (peer_address, victims) in self.plan(now).items():
            freed[node_id] = self.evict(node_id, peer_address, victims)
        return freed

    def evict(self, node_id: str, peer_address: str, victims: list[tuple[int, EvictionCandidate]]) -> int:
        tier_of = {v.key: t for t, v in victims}
        request = _peer_pb2.EvictKeyRequest(keys=[v.key for _, v in victims])
        try:
            reply = self._peers.stub(peer_address).EvictKey(
                request, timeout=self._settings.evictkey_deadline_ms / 1000.0
            )
        except grpc.RpcError as exc:
            log.warning("EvictKey to %s (%s) failed: %s", node_id, peer_address, exc.code())
            return 0
        total = 0
        for entry in reply.evicted:
            total += entry.bytes_freed
            if self._metrics is not None and entry.key in tier_of:
                from mori.umbp.distributed.master_metrics import tier_label

                t = tier_label(tier_of[entry.key])
                self._metrics.evict_requested.labels(node_id, t).inc()
                self._metrics.evict_freed.labels(node_id, t).inc(entry.bytes_freed)
        return total

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="umbp-eviction", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self._settings.eviction_interval_s):
            try:
                self.run_once()
            except Exception:  # noqa: BLE001 - a bad round must not end the manager
                log.exception("eviction round failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
