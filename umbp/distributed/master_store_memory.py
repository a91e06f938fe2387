# SPDX-License-Identifier: MIT
"""The in-memory metadata store: one master's state, lost when it stops. The block index is
native (``mori._C.umbp.MasterIndex``, umbp/src/master_index.h); master_block_index.py is its
Python reference."""

from __future__ import annotations

import dataclasses
import threading
from typing import Collection, Optional, Sequence

from mori import _C
from mori.umbp.distributed.master_external_kv import InMemoryExternalKv
from mori.umbp.distributed.master_records import (
    GET_TIER_PRIORITY,
    ClientRecord,
    ClientStatus,
    EventBundle,
    EvictionCandidate,
    HeartbeatOutcome,
    Location,
    RoutedGets,
    TierCapacity,
)
from mori.umbp.distributed.master_store import MetadataStore


class InMemoryMetadataStore(MetadataStore):
    def __init__(self, index_shards: int = 32) -> None:
        self._lock = threading.Lock()  # membership and event cursors
        self._clients: dict[str, ClientRecord] = {}
        if index_shards < 1:
            raise ValueError(f"index_shards must be >= 1, got {index_shards}")
        self._index = _C.umbp.MasterIndex(index_shards, [int(t) for t in GET_TIER_PRIORITY])
        self.external_kv = InMemoryExternalKv()

    @property
    def native_index(self):
        """The block index (``mori._C.umbp.MasterIndex``), which the grpc++ server's native
        BatchRouteGet reads directly."""
        return self._index

    # -- membership ------------------------------------------------------------------------
    def register_client(self, record: ClientRecord, now: float, expiry: float) -> bool:
        with self._lock:
            old = self._clients.get(record.node_id)
            if old is not None and now - old.last_heartbeat <= expiry:
                return False
            record = dataclasses.replace(
                record, status=ClientStatus.ALIVE, last_heartbeat=now, registered_at=now, acked_seq=0
            )
            self._clients[record.node_id] = record
        if old is not None:
            self._index.remove_node(record.node_id)
            self.external_kv.revoke_node(record.node_id)
        return True

    def unregister_client(self, node_id: str) -> list[tuple[str, int]]:
        with self._lock:
            if self._clients.pop(node_id, None) is None:
                return []
        self.external_kv.revoke_node(node_id)
        return self._index.remove_node(node_id)

    def get_client(self, node_id: str) -> Optional[ClientRecord]:
        with self._lock:
            rec = self._clients.get(node_id)
            return dataclasses.replace(rec) if rec is not None else None

    def alive_clients(self) -> list[ClientRecord]:
        with self._lock:
            return [dataclasses.replace(r) for r in self._clients.values() if r.status == ClientStatus.ALIVE]

    def apply_heartbeat(
        self,
        node_id: str,
        now: float,
        capacities: dict[int, TierCapacity],
        bundles: list[EventBundle],
        is_full_sync: bool,
        baseline: int,
    ) -> HeartbeatOutcome:
        with self._lock:
            rec = self._clients.get(node_id)
            if rec is None:
                return HeartbeatOutcome(ClientStatus.UNKNOWN)
            rec.last_heartbeat = now
            rec.status = ClientStatus.ALIVE
            if capacities:
                rec.capacities = dict(capacities)
            if is_full_sync:
                to_apply = bundles
                rec.acked_seq = baseline
            else:
                to_apply = []
                gap = False
                for bundle in bundles:
                    if bundle.seq <= rec.acked_seq:
                        continue  # already applied; the reply that acked it was lost
                    if bundle.seq != rec.acked_seq + 1:
                        gap = True
                        break
                    to_apply.append(bundle)
                    rec.acked_seq = bundle.seq
            acked = rec.acked_seq
        out = HeartbeatOutcome(ClientStatus.ALIVE, acked_seq=acked, request_full_sync=(not is_full_sync and gap))
        if is_full_sync:
            # The snapshot is the node's whole truth: copies it no longer lists go.
            snapshot = {(ev.key, ev.tier) for b in to_apply for ev in b.events if ev.add}
            for key, tier in self._index.node_copies(node_id):
                if (key, tier) not in snapshot:
                    removed = self._index.remove(node_id, key, tier)
                    if removed is not None and removed[1]:
                        out.removed.append((key, removed[0]))
        for bundle in to_apply:
            for ev in bundle.events:
                if ev.add:
                    if self._index.add(node_id, ev.key, ev.tier, ev.size, now, ev.offset, ev.checksum):
                        out.added.append((ev.key, ev.size))
                elif not is_full_sync:
                    removed = self._index.remove(node_id, ev.key, ev.tier)
                    if removed is not None and removed[1]:
                        out.removed.append((ev.key, removed[0]))
        return out

    def reap_expired(self, now: float, expiry: float) -> list[str]:
        with self._lock:
            dead = [n for n, r in self._clients.items() if now - r.last_heartbeat > expiry]
            for n in dead:
                del self._clients[n]
        for n in dead:
            self._index.remove_node(n)
            self.external_kv.revoke_node(n)
        return dead

    # -- block index -----------------------------------------------------------------------
    def route_get_batch(
        self, keys: list[str], exclude: frozenset[str], now: float, lease_until: float
    ) -> list[Sequence[Location]]:
        return [
            tuple(Location(*c) for c in copies) for copies in self._index.route(keys, list(exclude), now, lease_until)
        ]

    def route_get_choose(
        self,
        keys: Sequence[str],
        exclude: Collection[str],
        alive: Collection[str],
        now: float,
        lease_until: float,
        router,
    ) -> RoutedGets:
        return RoutedGets(
            *self._index.route_choose(keys, exclude, alive, now, lease_until, router.strategy == "random")
        )

    def lookup_batch(self, keys: list[str]) -> list[bool]:
        return self._index.contains(keys)

    def eviction_candidates(self, node_id: str, tier: int, now: float) -> list[EvictionCandidate]:
        return [EvictionCandidate(k, size, last) for k, size, last in self._index.candidates(node_id, tier, now)]

    def node_keys(self, node_id: str) -> list[str]:
        return self._index.node_keys(node_id)

    def key_count(self) -> int:
        return len(self._index)
