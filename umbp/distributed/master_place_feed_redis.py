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
appends interleave whole. A reader behind the trimmed part is told of the gap. Polls are read by
one script (_SINCE), which the master's grpc++ worker runs too (RedisRoutes.place_feed).
"""

from __future__ import annotations

import logging
import secrets
from typing import Iterable

import redis

from mori.umbp.distributed.master_place_feed import DEFAULT_CAPACITY, MAX_ENTRIES_PER_REPLY, FeedColumns, FeedSlice
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


# KEYS: as _RECORD. ARGV: the asked feed id, the asked number, the most entries, a feed id to set
# if none is. Returns {feed id, next number, gap, more, then (node, key, added, offset, size,
# checksum) per entry}, the rules of PlaceFeed.since (the feed id is compared as text: Lua's
# numbers would round it).
_SINCE = """
local fid = redis.call('GET', KEYS[3])
if not fid then
  redis.call('SET', KEYS[3], ARGV[4], 'NX')
  fid = redis.call('GET', KEYS[3])
end
local nxt = tonumber(redis.call('GET', KEYS[2]) or '0') + 1
local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
local oldest = nxt
if #first > 0 then oldest = tonumber(string.match(first[1][1], '^(%d+)')) end
local seq = tonumber(ARGV[2])
local fresh = ARGV[1] ~= fid or seq == 0
local gap = (not fresh) and seq < oldest
local start = oldest
if not (fresh or gap) then start = math.min(seq, nxt) end
local limit = tonumber(ARGV[3])
local out = {fid, start, gap and 1 or 0, 0}
if start < nxt then
  local rows = redis.call('XRANGE', KEYS[1], start .. '-0', '+', 'COUNT', limit + 1)
  local n = math.min(#rows, limit)
  if #rows > limit then out[4] = 1 end
  for i = 1, n do
    local f = rows[i][2]  -- n, k, a, o, s, c as _RECORD adds them
    for j = 2, 12, 2 do out[#out + 1] = f[j] end
  end
  if n > 0 then out[2] = tonumber(string.match(rows[n][1], '^(%d+)')) + 1 end
end
return out
"""


class RedisPlaceFeed:
    """The feed as a Redis stream; thread- and process-safe (the script appends a batch whole)."""

    native = None  # no in-process log: the native path runs the store's _SINCE script instead

    def __init__(self, client, prefix: str, dram_tier: int, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"RedisPlaceFeed: capacity must be >= 1, got {capacity}")
        self._r = client
        self.keys = [f"{prefix}:placefeed", f"{prefix}:placefeed:n", f"{prefix}:placefeed:id"]
        self._record = client.register_script(_RECORD)
        self.since_script = client.register_script(_SINCE)  # the native path runs it too
        self._dram = dram_tier
        self.capacity = capacity

    @property
    def feed_id(self) -> int:
        return self._feed_id(self._r.get(self.keys[2]))

    def _feed_id(self, stored) -> int:
        if stored is not None:
            return int(stored)
        self._r.set(self.keys[2], secrets.randbits(63) | 1, nx=True)  # the first process to ask sets it
        return int(self._r.get(self.keys[2]))

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
            return int(self._record(keys=self.keys, args=args))
        except redis.RedisError as exc:  # a hint lost, never a failed heartbeat
            log.warning("place feed: %d places not recorded in Redis (%s)", (len(args) - 2) // 6, exc)
            return 0

    def since_columns(self, feed_id: int, seq: int, max_entries: int = 0) -> FeedColumns:
        """``since`` as columns, in one round trip (the _SINCE script)."""
        limit = MAX_ENTRIES_PER_REPLY if max_entries <= 0 else min(max_entries, MAX_ENTRIES_PER_REPLY)
        out = self.since_script(keys=self.keys, args=[int(feed_id), int(seq), limit, secrets.randbits(63) | 1])
        flat = out[4:]
        return FeedColumns(
            int(out[0]),
            int(out[1]),
            bool(out[2]),
            bool(out[3]),
            [b.decode() for b in flat[0::6]],
            [b.decode() for b in flat[1::6]],
            [b == b"1" for b in flat[2::6]],
            list(map(int, flat[3::6])),
            list(map(int, flat[4::6])),
            list(map(int, flat[5::6])),
        )

    def since(self, feed_id: int, seq: int, max_entries: int = 0) -> FeedSlice:
        """Entries from number ``seq`` on (0, or another feed's id: from the oldest held), at
        most ``max_entries`` (0 or more than MAX_ENTRIES_PER_REPLY: that cap)."""
        return self.since_columns(feed_id, seq, max_entries).as_slice()
