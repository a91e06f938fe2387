# SPDX-License-Identifier: MIT
"""The master's place feed: a bounded log of where owners' DRAM values lie and which left.

A worker's first get of a key costs a master round trip (``BatchRouteGet``) before its read; at
64 KiB that round trip takes as long as the read itself. Owners already tell the master each
DRAM value's place (arena offset and checksum) in their heartbeats' ADD events; the feed keeps
those, with the REMOVE events, in the order this master applied them, and workers poll it
(``UMBPMasterAdmin.PlaceFeed``, every ``UMBP_PLACE_FEED_MS``) into the same location cache that
routed reads fill. A get of a fed key is then one MORI-IO read from its owner, checked against
the checksum; a place gone stale (evicted, moved, the block reused) fails that check and the key
takes the routed path, so the feed is a hint that can be late or lost, never wrong bytes.

Entries are numbered from 1; the log keeps the latest ``capacity`` of them. Each master process
has its own feed (``feed_id``, random): a worker that reaches another process starts over.
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
from typing import Iterable, Optional

from mori.umbp.distributed.master_records import KvEvent

# Entries held: at ~200 bytes each, 13 MiB; a worker polling every 20 ms keeps up with 3 M
# events a second before it misses any.
DEFAULT_CAPACITY = 1 << 16
# The most entries one reply carries (a worker that is behind asks again at once).
MAX_ENTRIES_PER_REPLY = 4096


@dataclasses.dataclass(frozen=True)
class FedPlace:
    node_id: str
    key: str
    added: bool
    offset: int = 0
    size: int = 0
    checksum: int = 0


@dataclasses.dataclass
class FeedSlice:
    feed_id: int
    next_seq: int
    gap: bool
    more: bool  # entries wait after next_seq
    entries: list[FedPlace]


class PlaceFeed:
    """The log; thread-safe (heartbeats append from the server's threads while workers read)."""

    def __init__(self, dram_tier: int, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"PlaceFeed: capacity must be >= 1, got {capacity}")
        self.feed_id = secrets.randbits(63) | 1  # never 0: a request's 0 means "no feed yet"
        self._dram = dram_tier
        self._ring: list[Optional[FedPlace]] = [None] * capacity
        self._next = 1  # the number the next entry gets
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        return len(self._ring)

    def record(self, node_id: str, events: Iterable[KvEvent]) -> int:
        """Appends an owner's DRAM events: an ADD with its checksum (a place a reader can check),
        every REMOVE. Returns how many were appended."""
        fed = [
            FedPlace(node_id, e.key, True, e.offset, e.size, e.checksum) if e.add else FedPlace(node_id, e.key, False)
            for e in events
            if e.tier == self._dram and (e.checksum or not e.add)
        ]
        if not fed:
            return 0
        with self._lock:
            n = len(self._ring)
            for place in fed:
                self._ring[self._next % n] = place
                self._next += 1
        return len(fed)

    def since(self, feed_id: int, seq: int, max_entries: int = 0) -> FeedSlice:
        """Entries from number ``seq`` on (0, or another feed's id: from the oldest held), at
        most ``max_entries`` (0 or more than MAX_ENTRIES_PER_REPLY: that cap)."""
        limit = MAX_ENTRIES_PER_REPLY if max_entries <= 0 else min(max_entries, MAX_ENTRIES_PER_REPLY)
        with self._lock:
            n = len(self._ring)
            oldest = max(1, self._next - n)
            fresh = feed_id != self.feed_id or seq == 0
            gap = not fresh and seq < oldest
            start = oldest if fresh or gap else min(seq, self._next)
            stop = min(self._next, start + limit)
            entries = [self._ring[s % n] for s in range(start, stop)]
            more = stop < self._next
        return FeedSlice(self.feed_id, stop, gap, more, entries)  # type: ignore[arg-type]
