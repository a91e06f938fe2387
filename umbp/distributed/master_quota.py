# SPDX-License-Identifier: MIT
"""Per-engine quotas: how many bytes of the pool one writer (engine) may hold.

A put routed for a writer is pending until the owner's heartbeat reports the key; the key's
bytes then count against that writer until its last copy goes. A writer at its quota gets
QUOTA_EXCEEDED for further puts (its client fails them and stores nothing), so one engine
cannot flood the pool and push out the others' blocks. Held by the master process (not the
metadata store): a restarted master starts with counts of zero and quotas from its command
line / admin calls.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Callable


@dataclasses.dataclass
class EngineUsage:
    quota: int = 0  # 0: unlimited
    used: int = 0
    pending: int = 0


class EngineQuotas:
    def __init__(self, pending_ttl_s: float = 30.0) -> None:
        self._lock = threading.Lock()
        self._usage: dict[str, EngineUsage] = {}
        self._owner: dict[str, tuple[str, int]] = {}  # key -> (engine, bytes)
        self._pending: dict[str, tuple[str, int, float]] = {}  # key -> (engine, bytes, expiry)
        self._pending_ttl = pending_ttl_s
        self._listeners: list[Callable[[], None]] = []

    def set_quota(self, engine: str, quota: int) -> None:
        if not engine:
            raise ValueError("engine_id must not be empty")
        if quota < 0:
            raise ValueError(f"quota_bytes must be >= 0, got {quota}")
        with self._lock:
            self._usage.setdefault(engine, EngineUsage()).quota = quota
            listeners = list(self._listeners) if quota else []
        for fn in listeners:
            fn()

    def when_set(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` whenever a quota is set (at once if one is): the grpc++ server's native put
        routes then leave puts to the Python handler, which keeps these counts."""
        with self._lock:
            self._listeners.append(fn)
            active = any(u.quota for u in self._usage.values())
        if active:
            fn()

    def usage(self, engine: str) -> EngineUsage:
        with self._lock:
            return dataclasses.replace(self._usage.get(engine, EngineUsage()))

    def _expire(self, now: float) -> None:
        for key in [k for k, (_, _, exp) in self._pending.items() if exp <= now]:
            engine, size, _ = self._pending.pop(key)
            self._usage[engine].pending -= size

    def admit(self, engine: str, key: str, size: int, now: float) -> bool:
        """Reserve ``size`` bytes of the engine's quota for a put of ``key``; False if over."""
        with self._lock:
            u = self._usage.get(engine)
            if u is None or u.quota == 0:
                return True
            self._expire(now)
            if key in self._pending or key in self._owner:
                return True
            if u.used + u.pending + size > u.quota:
                return False
            u.pending += size
            self._pending[key] = (engine, size, now + self._pending_ttl)
            return True

    def added(self, key: str, size: int) -> None:
        """The index gained ``key`` (a heartbeat ADD): a pending put becomes used bytes."""
        with self._lock:
            p = self._pending.pop(key, None)
            if p is None or key in self._owner:
                return
            engine, reserved, _ = p
            u = self._usage[engine]
            u.pending -= reserved
            u.used += size
            self._owner[key] = (engine, size)

    def removed(self, key: str) -> None:
        """The key's last copy went: its bytes leave its engine's count."""
        with self._lock:
            o = self._owner.pop(key, None)
            if o is not None:
                self._usage[o[0]].used -= o[1]
