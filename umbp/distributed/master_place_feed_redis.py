# SPDX-License-Identifier: MIT
"""The place feed (master_place_feed.py) kept in Redis, for a master over the Redis store.

The in-memory log is one per master process: behind one address, `umbp_master --workers N`
processes each fed only the heartbeats that reached them, and a restarted master began a new
feed. Over Redis the log is a stream in the store's control slot (``{ns:ctl}:placefeed``,
trimmed to ``capacity`` entries), so every master process appends to and reads the same
one, and a restarted master goes on with it. The feed id is the store's (a random number set once,
next to the stream): the same for every process, new only when Redis loses it.

Entries are numbered from 1 as in memory: a counter next to the stream numbers them, and each
entry's stream id is its number (``N-0``), appended by one script so that the processes'
appends interleave whole. A reader behind the trimmed part is told of the gap. Answered by the
Python handler (the native path serves the in-memory log only).
"""

from __future__ import annotations

import logging
import secrets
from typing import Iterable

import redis

from mori.umbp.distributed.master_place_feed import DEFAULT_CAPACITY, MAX_ENTRIES_PER_REPLY, FeedSlice, FedPlace
from mori.umbp.distributed.master_records import KvEvent

log = logging.getLogger("mori.umbp.master")

# KEYS: the stream, its counter, the feed id. ARGV: the capacity, a feed id to set if none is,
# then (node, key, added, offset, size, checksum) per entry. Returns how many were appended.
_RECORD = """
redis.call('SET', KEYS[3], ARGV[2], 'NX')
local n = 0
for i = 3, #ARGV, 6 do
  local seq = redis.call('INCR', KEYS[2])
  redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[1], seq .. '-0', 'n', ARGV[i], 'k', ARGV[i + 1], 'a', ARGV[i + 2],
             'o', ARGV[i + 3], 's', ARGV[i + 4], 'c', ARGV[i + 5])
  n = n + 1
end
return n
"""


def _number(stream_id: bytes) -> int:
    return int(stream_id.split(b"-", 1)[0])


class RedisPlaceFeed:
    """The feed as a Redis stream; thread- and process-safe (the script appends a batch whole)."""

    native = None  # no native log: PlaceFeed is the Python handler's

    def __init__(self, client, prefix: str, dram_tier: int, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"RedisPlaceFeed: capacity must be >= 1, got {capacity}")
        self._r = client
        self._keys = [f"{prefix}:placefeed", f"{prefix}:placefeed:n", f"{prefix}:placefeed:id"]
        self._record = client.register_script(_RECORD)
        self._dram = dram_tier
        self.capacity = capacity

    @property
    def feed_id(self) -> int:
        return self._feed_id(self._r.get(self._keys[2]))

    def _feed_id(self, stored) -> int:
        if stored is not None:
            return int(stored)
        self._r.set(self._keys[2], secrets.randbits(63) | 1, nx=True)  # the first process to ask sets it
        return int(self._r.get(self._keys[2]))

    def record(self, node_id: str, events: Iterable[KvEvent]) -> int:
        """Appends an owner's DRAM events (an ADD with its checksum, every REMOVE) in one round
        trip. Returns how many were appended."""
        args: list = [self.capacity, secrets.randbits(63) | 1]
        for e in events:
            if e.tier == self._dram and (e.checksum or not e.add):
                args += [node_id, e.key, 1, e.offset, e.size, e.checksum] if e.add else [node_id, e.key, 0, 0, 0, 0]
        if len(args) == 2:
            return 0
        try:
            return int(self._record(keys=self._keys, args=args))
        except redis.RedisError as exc:  # a hint lost, never a failed heartbeat
            log.warning("place feed: %d places not recorded in Redis (%s)", (len(args) - 2) // 6, exc)
            return 0

    def since(self, feed_id: int, seq: int, max_entries: int = 0) -> FeedSlice:
        """Entries from number ``seq`` on (0, or another feed's id: from the oldest held), at
        most ``max_entries`` (0 or more than MAX_ENTRIES_PER_REPLY: that cap)."""
        limit = MAX_ENTRIES_PER_REPLY if max_entries <= 0 else min(max_entries, MAX_ENTRIES_PER_REPLY)
        stream, counter, id_key = self._keys
        pipe = self._r.pipeline(transaction=False)
        pipe.get(id_key)
        pipe.get(counter)
        pipe.xrange(stream, min="-", max="+", count=1)
        stored, last, first = pipe.execute()
        fid = self._feed_id(stored)
        nxt = int(last or 0) + 1  # the number the next entry gets
        oldest = _number(first[0][0]) if first else nxt
        fresh = feed_id != fid or seq == 0
        gap = not fresh and seq < oldest
        start = oldest if fresh or gap else min(seq, nxt)
        rows = self._r.xrange(stream, min=f"{start}-0", max="+", count=limit + 1) if start < nxt else []
        more = len(rows) > limit
        rows = rows[:limit]
        entries = []
        for _id, f in rows:
            added = f[b"a"] == b"1"
            entries.append(
                FedPlace(f[b"n"].decode(), f[b"k"].decode(), added, int(f[b"o"]), int(f[b"s"]), int(f[b"c"]))
            )
        next_seq = _number(rows[-1][0]) + 1 if rows else start
        return FeedSlice(fid, next_seq, gap, more, entries)
