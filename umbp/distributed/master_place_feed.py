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

Entries are numbered from 1; the log keeps the latest ``capacity`` of them. Over the in-memory
store each master process has its own feed (``feed_id``, random): a worker that reaches another
process starts over. Over Redis the feed is the store's, one for every master process
(master_place_feed_redis.py, same numbering and rules).

The log itself is native (``mori._C.umbp.PlaceFeed``, umbp/src/master_place_feed.h), so that the
grpc++ server answers workers' polls without the interpreter lock; this module is its Python face
for the heartbeat handler and the Python PlaceFeed handler.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from mori import _C
from mori.umbp.distributed.master_records import KvEvent

_Native = _C.umbp.PlaceFeed
DEFAULT_CAPACITY: int = _Native.DEFAULT_CAPACITY
MAX_ENTRIES_PER_REPLY: int = _Native.MAX_ENTRIES_PER_REPLY


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


@dataclasses.dataclass
class FeedColumns:
    """A FeedSlice as columns (what the PlaceFeed reply carries)."""

    feed_id: int
    next_seq: int
    gap: bool
    more: bool
    node_ids: list[str]
    keys: list[str]
    added: list[bool]
    offsets: list[int]
    sizes: list[int]
    checksums: list[int]

    def as_slice(self) -> FeedSlice:
        cols = zip(self.node_ids, self.keys, self.added, self.offsets, self.sizes, self.checksums)
        return FeedSlice(self.feed_id, self.next_seq, self.gap, self.more, [FedPlace(*c) for c in cols])


class PlaceFeed:
    """The log; thread-safe (heartbeats append from the server's threads while workers read)."""

    def __init__(self, dram_tier: int, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"PlaceFeed: capacity must be >= 1, got {capacity}")
        self.native = _Native(int(dram_tier), capacity)

    @property
    def feed_id(self) -> int:
        return self.native.feed_id

    @property
    def capacity(self) -> int:
        return self.native.capacity

    def record(self, node_id: str, events: Iterable[KvEvent]) -> int:
        """Appends an owner's DRAM events: an ADD with its checksum (a place a reader can check),
        every REMOVE. Returns how many were appended."""
        events = list(events)
        if not events:
            return 0
        return self.native.record(
            node_id,
            [e.key for e in events],
            [e.add for e in events],
            [e.tier for e in events],
            [e.offset for e in events],
            [e.size for e in events],
            [e.checksum for e in events],
        )

    def since(self, feed_id: int, seq: int, max_entries: int = 0) -> FeedSlice:
        """Entries from number ``seq`` on (0, or another feed's id: from the oldest held), at
        most ``max_entries`` (0 or more than MAX_ENTRIES_PER_REPLY: that cap)."""
        return self.since_columns(feed_id, seq, max_entries).as_slice()

    def since_columns(self, feed_id: int, seq: int, max_entries: int = 0) -> FeedColumns:
        """``since`` as columns."""
        limit = min(max(int(max_entries), 0), MAX_ENTRIES_PER_REPLY)
        fid, next_seq, gap, more, entries = self.native.since(feed_id, seq, limit)
        cols = [list(c) for c in zip(*entries)] if entries else [[] for _ in range(6)]
        return FeedColumns(fid, next_seq, gap, more, *cols)
