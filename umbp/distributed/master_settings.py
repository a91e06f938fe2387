# SPDX-License-Identifier: MIT
"""The master's settings, read from MORI's environment table (UMBP_* rows of env_defs.h)."""

from __future__ import annotations

import dataclasses

from mori.core.env import setting


@dataclasses.dataclass
class MasterSettings:
    heartbeat_ttl_s: float = 10.0
    max_missed_heartbeats: int = 3
    heartbeat_interval_divisor: int = 2
    reaper_interval_s: float = 5.0
    lease_duration_s: float = 2.0
    eviction_interval_s: float = 5.0
    eviction_high_wm: float = 0.9
    eviction_low_wm: float = 0.7
    eviction_strategy: str = "lru"
    evictkey_deadline_ms: int = 1000
    hit_index_ttl_s: float = 7200.0
    hit_index_gc_interval_s: float = 60.0
    hit_query_max_batch: int = 4096
    route_put_algo: str = "most_available"
    route_put_affinity: str = "none"
    route_get_strategy: str = "tier_priority"
    index_shards: int = 32
    metadata_backend: str = "memory"
    auth_window_ms: int = 30000

    @property
    def heartbeat_interval_s(self) -> float:
        return self.heartbeat_ttl_s / max(self.heartbeat_interval_divisor, 1)

    @property
    def expiry_s(self) -> float:
        """A client silent this long is dead: MORI's max(TTL, missed x interval)."""
        return max(self.heartbeat_ttl_s, self.max_missed_heartbeats * self.heartbeat_interval_s)

    @classmethod
    def from_environment(cls) -> "MasterSettings":
        s = cls(
            heartbeat_ttl_s=float(setting("UMBP_HEARTBEAT_TTL_SEC")),
            max_missed_heartbeats=int(setting("UMBP_MAX_MISSED_HEARTBEATS")),
            heartbeat_interval_divisor=int(setting("UMBP_HEARTBEAT_INTERVAL_DIVISOR")),
            reaper_interval_s=float(setting("UMBP_REAPER_INTERVAL_SEC")),
            lease_duration_s=float(setting("UMBP_LEASE_DURATION_SEC")),
            eviction_interval_s=float(setting("UMBP_EVICTION_CHECK_INTERVAL_SEC")),
            eviction_high_wm=float(setting("UMBP_EVICTION_HIGH_WM")),
            eviction_low_wm=float(setting("UMBP_EVICTION_LOW_WM")),
            eviction_strategy=str(setting("UMBP_EVICTION_STRATEGY")),
            evictkey_deadline_ms=int(setting("UMBP_EVICTKEY_DEADLINE_MS")),
            hit_index_ttl_s=float(setting("UMBP_HIT_INDEX_TTL_SEC")),
            hit_index_gc_interval_s=float(setting("UMBP_HIT_INDEX_GC_INTERVAL_SEC")),
            hit_query_max_batch=int(setting("UMBP_HIT_QUERY_MAX_BATCH")),
            route_put_algo=str(setting("UMBP_ROUTE_PUT_SELECT_ALGO")),
            route_put_affinity=str(setting("UMBP_ROUTE_PUT_NODE_AFFINITY")),
            route_get_strategy=str(setting("UMBP_ROUTE_GET_STRATEGY")),
            index_shards=int(setting("UMBP_MASTER_INDEX_SHARDS")),
            metadata_backend=str(setting("UMBP_METADATA_BACKEND")),
            auth_window_ms=int(setting("UMBP_AUTH_WINDOW_MS")),
        )
        s.validate()
        return s

    def validate(self) -> None:
        checks = [
            (self.heartbeat_ttl_s > 0, "UMBP_HEARTBEAT_TTL_SEC must be > 0"),
            (self.lease_duration_s >= 0, "UMBP_LEASE_DURATION_SEC must be >= 0"),
            (self.eviction_interval_s > 0, "UMBP_EVICTION_CHECK_INTERVAL_SEC must be > 0"),
            (
                0 < self.eviction_low_wm <= self.eviction_high_wm <= 1,
                "need 0 < UMBP_EVICTION_LOW_WM <= UMBP_EVICTION_HIGH_WM <= 1",
            ),
            (self.hit_query_max_batch > 0, "UMBP_HIT_QUERY_MAX_BATCH must be > 0"),
            (self.index_shards > 0, "UMBP_MASTER_INDEX_SHARDS must be > 0"),
            (self.metadata_backend in ("memory", "redis"), "UMBP_METADATA_BACKEND must be memory or redis"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(msg)
