# SPDX-License-Identifier: MIT
"""The Redis/Valkey metadata store: the master's state outside the master.

A restarted master, or a second one, serves at once from it. Modes (MORI's settings): one
endpoint (UMBP_REDIS_URI); several endpoints (UMBP_REDIS_SHARD_URIS, the block index spread
over them, the first also holding membership and the external-KV index); Redis Cluster
(UMBP_REDIS_CLUSTER=1, UMBP_REDIS_URI a seed node). The block index is cut into
UMBP_REDIS_BLOCK_SHARDS hash-tagged shards; route_get_batch, heartbeat application and
registration are one server-side Lua script each (EVALSHA) per shard touched.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import zlib
from concurrent import futures
from typing import Iterable, Optional, Sequence

import redis

from mori.umbp.distributed import master_store_redis_scripts as lua
from mori.umbp.distributed.master_records import (
    GET_TIER_PRIORITY,
    ClientRecord,
    ClientStatus,
    EventBundle,
    EvictionCandidate,
    HeartbeatOutcome,
    Location,
    Tier,
    TierCapacity,
)
from mori.umbp.distributed.master_store import ExternalKvStore, MetadataStore


log = logging.getLogger("mori.umbp.master")

_TIER_RANK = {int(t): i for i, t in enumerate(GET_TIER_PRIORITY)}


@dataclasses.dataclass
class RedisSettings:
    uri: str = "redis://127.0.0.1:6379"
    namespace: str = "umbp"
    cluster: bool = False
    required: bool = True
    shard_uris: list[str] = dataclasses.field(default_factory=list)
    block_shards: int = 16
    pool_size: int = 16
    connect_timeout_ms: int = 1000
    socket_timeout_ms: int = 1000
    password: str = ""

    @classmethod
    def from_environment(cls) -> "RedisSettings":
        from mori.core.env import setting

        shard_uris = [u.strip() for u in str(setting("UMBP_REDIS_SHARD_URIS")).split(",") if u.strip()]
        s = cls(
            uri=str(setting("UMBP_REDIS_URI")),
            namespace=str(setting("UMBP_REDIS_NAMESPACE")),
            cluster=bool(setting("UMBP_REDIS_CLUSTER")),
            required=bool(setting("UMBP_REDIS_REQUIRED")),
            shard_uris=shard_uris,
            block_shards=int(setting("UMBP_REDIS_BLOCK_SHARDS")),
            pool_size=int(setting("UMBP_REDIS_POOL_SIZE")),
            connect_timeout_ms=int(setting("UMBP_REDIS_CONNECT_TIMEOUT_MS")),
            socket_timeout_ms=int(setting("UMBP_REDIS_SOCKET_TIMEOUT_MS")),
            password=str(setting("UMBP_REDIS_PASSWORD")),
        )
        return s

    def validate(self) -> None:
        if self.block_shards < 1:
            raise ValueError(f"UMBP_REDIS_BLOCK_SHARDS must be >= 1, got {self.block_shards}")
        if self.cluster and self.shard_uris:
            raise ValueError("UMBP_REDIS_CLUSTER and UMBP_REDIS_SHARD_URIS are exclusive")
        if not self.namespace or any(c in self.namespace for c in "{}"):
            raise ValueError(f"UMBP_REDIS_NAMESPACE must be non-empty without braces, got {self.namespace!r}")


def _caps_json(caps: dict[int, TierCapacity]) -> str:
    return json.dumps({str(t): [c.total, c.available, c.max_allocatable] for t, c in caps.items()})


def _caps_from_json(text: Optional[bytes]) -> dict[int, TierCapacity]:
    if not text:
        return {}
    return {int(t): TierCapacity(*v) for t, v in json.loads(text).items()}


def _record_json(r: ClientRecord) -> str:
    return json.dumps(
        {
            "node_address": r.node_address,
            "peer_address": r.peer_address,
            "engine_desc": r.engine_desc.hex(),
            "tags": r.tags,
            "registered_at": r.registered_at,
        }
    )


class RedisMetadataStore(MetadataStore):
    def __init__(self, settings: RedisSettings) -> None:
        settings.validate()
        self.settings = settings
        kw = dict(
            socket_timeout=settings.socket_timeout_ms / 1000.0,
            socket_connect_timeout=settings.connect_timeout_ms / 1000.0,
            password=settings.password or None,
            max_connections=settings.pool_size,
        )
        if settings.cluster:
            from redis.cluster import RedisCluster

            self._clients = [RedisCluster.from_url(settings.uri, **kw)]
        else:
            uris = settings.shard_uris or [settings.uri]
            self._clients = [redis.Redis.from_url(u, **kw) for u in uris]
        for c in self._clients:
            c.ping()  # fail now, naming the endpoint, rather than on the first RPC
        ns = settings.namespace
        self._ctl_prefix = f"{{{ns}:ctl}}"
        self._ctl = self._clients[0]
        self._nshards = settings.block_shards
        self._shard_prefix = [f"{{{ns}:b{i}}}" for i in range(self._nshards)]
        self._scripts = {
            name: self._ctl.register_script(getattr(lua, name))
            for name in (
                "REGISTER_CLIENT",
                "HEARTBEAT_CONTROL",
                "APPLY_EVENTS",
                "DROP_NODE",
                "ROUTE_GET_BATCH",
                "EVICTION_CANDIDATES",
                "EXTERNAL_KV",
                "EXTERNAL_KV_MATCH",
                "COUNT_HITS",
                "DROP_STALE_HITS",
            )
        }
        self._pool = futures.ThreadPoolExecutor(
            max_workers=max(2, min(len(self._clients) * 2, 16)), thread_name_prefix="umbp-redis"
        )
        self.external_kv = RedisExternalKv(self)
        self._place_feed = None  # new_place_feed()'s, made once

    # -- plumbing ----------------------------------------------------------------------------
    def new_place_feed(self, dram_tier: int):
        """The place feed as a stream next to the client records: one for every master process
        over this store, and it outlives them (master_place_feed_redis.py). One object per store:
        the native path (``native_routes``) runs the same feed's script."""
        if self._place_feed is None:
            from mori.umbp.distributed.master_place_feed_redis import RedisPlaceFeed

            self._place_feed = RedisPlaceFeed(self._ctl, self._ctl_prefix, dram_tier)
        return self._place_feed

    def _shard_of(self, key: str) -> int:
        return zlib.crc32(key.encode()) % self._nshards

    def _conn(self, shard: int):
        return self._clients[0] if len(self._clients) == 1 else self._clients[shard % len(self._clients)]

    def _run(self, name: str, conn, key: str, args: list):
        return self._scripts[name](keys=[key], args=args, client=conn)

    def _shard_run(self, name: str, shard: int, args: list):
        p = self._shard_prefix[shard]
        return self._run(name, self._conn(shard), f"{p}:count", [p, *args])

    def _ctl_run(self, name: str, args: list):
        return self._run(name, self._ctl, f"{self._ctl_prefix}:clients", [self._ctl_prefix, *args])

    def _each_shard(self, fn) -> list:
        """fn(shard) for every shard, concurrently when the shards live on several endpoints."""
        if len(self._clients) == 1 and not self.settings.cluster:
            return [fn(s) for s in range(self._nshards)]
        return list(self._pool.map(fn, range(self._nshards)))

    def native_routes(self, mod):
        """The get path (``route_get_batch`` and the copy choice) in C++ for the master's grpc++
        server: ``mod.RedisRoutes`` (``mod``: ``mori.umbp._master_server``) over the same
        endpoints, shards and ROUTE_GET_BATCH script (in a cluster: each shard's slot on the node
        that holds it now), or None where it cannot serve (no hiredis in the build, a URI form it
        does not read): this store serves then."""
        if not mod.HAVE_NATIVE_REDIS:
            return None
        script = self._scripts["ROUTE_GET_BATCH"]
        uris, shard_endpoint = self.settings.shard_uris or [self.settings.uri], []
        if self.settings.cluster:
            uris = []
            for p in self._shard_prefix:
                node = self._clients[0].get_node_from_key(f"{p}:count")
                uri = f"redis://{node.host}:{node.port}"
                if uri not in uris:
                    uris.append(uri)
                shard_endpoint.append(uris.index(uri))
        try:
            return mod.RedisRoutes(
                uris=uris,
                password=self.settings.password,
                shard_prefixes=self._shard_prefix,
                script=lua.ROUTE_GET_BATCH,
                sha=script.sha,
                tier_priority=[int(t) for t in GET_TIER_PRIORITY],
                connect_timeout_s=self.settings.connect_timeout_ms / 1000.0,
                socket_timeout_s=self.settings.socket_timeout_ms / 1000.0,
                pool_size=self.settings.pool_size,
                shard_endpoint=shard_endpoint,
                # Workers' place-feed polls too (the store's _SINCE script on the control
                # endpoint); in a cluster they stay Python's.
                **({} if self.settings.cluster else self._place_feed_native_args()),
            )
        except ValueError as exc:  # a URI the C++ side does not read: Python serves
            log.warning("umbp master: Redis get path stays in Python, at far more CPU per call (%s)", exc)
            return None

    def _place_feed_native_args(self) -> dict:
        feed = self.new_place_feed(int(Tier.DRAM))
        return dict(
            feed_script=feed.since_script.script, feed_sha=feed.since_script.sha, feed_keys=feed.keys, feed_endpoint=0
        )

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        for c in self._clients:
            c.close()

    # -- membership ------------------------------------------------------------------------
    def register_client(self, record: ClientRecord, now: float, expiry: float) -> bool:
        rc = int(self._ctl_run("REGISTER_CLIENT", [record.node_id, _record_json(record), repr(now), repr(expiry)]))
        if rc == 0:
            return False
        if rc == 2:  # an expired holder of the id: its copies and external KV go
            self._drop_node(record.node_id)
            self.external_kv.revoke_node(record.node_id)
        if record.capacities:
            self._ctl.hset(f"{self._ctl_prefix}:caps", record.node_id, _caps_json(record.capacities))
        return True

    def _drop_node(self, node_id: str, keep_by_shard: Optional[dict[int, list[str]]] = None) -> list[tuple[str, int]]:
        def one(shard: int):
            keep = (keep_by_shard or {}).get(shard)
            args = [node_id, "1" if keep_by_shard is not None else "0", *(keep or [])]
            flat = self._shard_run("DROP_NODE", shard, args)
            return [(flat[i].decode(), int(flat[i + 1])) for i in range(0, len(flat), 2)]

        return [kv for part in self._each_shard(one) for kv in part]

    def unregister_client(self, node_id: str) -> list[tuple[str, int]]:
        p = self._ctl_prefix
        pipe = self._ctl.pipeline()
        pipe.hdel(f"{p}:clients", node_id)
        pipe.hdel(f"{p}:hb", node_id)
        pipe.hdel(f"{p}:seq", node_id)
        pipe.hdel(f"{p}:caps", node_id)
        existed = pipe.execute()[0]
        if not existed:
            return []
        self.external_kv.revoke_node(node_id)
        return self._drop_node(node_id)

    def _records(self, node_ids: Optional[list[str]] = None) -> list[ClientRecord]:
        p = self._ctl_prefix
        if node_ids is None:
            recs = self._ctl.hgetall(f"{p}:clients")
            ids = [k.decode() for k in recs]
            raw = [recs[k.encode()] for k in ids]
        else:
            ids = node_ids
            raw = self._ctl.hmget(f"{p}:clients", ids) if ids else []
        if not ids:
            return []
        hbs = self._ctl.hmget(f"{p}:hb", ids)
        seqs = self._ctl.hmget(f"{p}:seq", ids)
        caps = self._ctl.hmget(f"{p}:caps", ids)
        out = []
        for node_id, r, hb, seq, cap in zip(ids, raw, hbs, seqs, caps):
            if r is None:
                continue
            d = json.loads(r)
            out.append(
                ClientRecord(
                    node_id=node_id,
                    node_address=d["node_address"],
                    peer_address=d["peer_address"],
                    engine_desc=bytes.fromhex(d["engine_desc"]),
                    tags=d["tags"],
                    capacities=_caps_from_json(cap),
                    status=ClientStatus.ALIVE,
                    last_heartbeat=float(hb or 0),
                    registered_at=d["registered_at"],
                    acked_seq=int(seq or 0),
                )
            )
        return out

    def get_client(self, node_id: str) -> Optional[ClientRecord]:
        recs = self._records([node_id])
        return recs[0] if recs else None

    def alive_clients(self) -> list[ClientRecord]:
        return self._records()

    def apply_heartbeat(
        self,
        node_id: str,
        now: float,
        capacities: dict[int, TierCapacity],
        bundles: list[EventBundle],
        is_full_sync: bool,
        baseline: int,
    ) -> HeartbeatOutcome:
        res = self._ctl_run(
            "HEARTBEAT_CONTROL",
            [
                node_id,
                repr(now),
                _caps_json(capacities) if capacities else "",
                "1" if is_full_sync else "0",
                str(baseline),
                *[str(b.seq) for b in bundles],
            ],
        )
        status, acked, gap, count, first = (int(x) for x in res)
        if status == 0:
            return HeartbeatOutcome(ClientStatus.UNKNOWN)
        out = HeartbeatOutcome(ClientStatus.ALIVE, acked_seq=acked, request_full_sync=bool(gap))
        to_apply = bundles[first : first + count]
        per_shard: dict[int, list[str]] = {}
        for bundle in to_apply:
            for ev in bundle.events:
                if is_full_sync and not ev.add:
                    continue
                per_shard.setdefault(self._shard_of(ev.key), []).extend(
                    (
                        "A" if ev.add else "R",
                        str(int(ev.tier)),
                        ev.key,
                        str(int(ev.size)),
                        str(int(ev.offset)),
                        str(int(ev.checksum)),
                    )
                )
        if is_full_sync:
            keep: dict[int, list[str]] = {}
            for shard, flat in per_shard.items():
                keep[shard] = [f"{flat[i + 1]}|{flat[i + 2]}" for i in range(0, len(flat), 6)]
            re_added = {flat[i + 2] for flat in per_shard.values() for i in range(0, len(flat), 6)}
            out.removed.extend(kv for kv in self._drop_node(node_id, keep) if kv[0] not in re_added)

        def one(item):
            shard, flat = item
            return self._shard_run("APPLY_EVENTS", shard, [node_id, repr(now), *flat])

        items = list(per_shard.items())
        results = (
            list(self._pool.map(one, items)) if len(items) > 1 and len(self._clients) > 1 else [one(i) for i in items]
        )
        for flat in results:
            for i in range(0, len(flat), 3):
                kv = (flat[i].decode(), int(flat[i + 1]))
                (out.added if int(flat[i + 2]) == 1 else out.removed).append(kv)
        return out

    def reap_expired(self, now: float, expiry: float) -> list[str]:
        hbs = self._ctl.hgetall(f"{self._ctl_prefix}:hb")
        dead = [n.decode() for n, t in hbs.items() if now - float(t) > expiry]
        for node_id in dead:
            self.unregister_client(node_id)
        return dead

    # -- block index -----------------------------------------------------------------------
    def _group(self, keys: list[str]) -> dict[int, list[tuple[int, str]]]:
        """(index, full hash name) of each key, by the unit one script call can cover: the
        endpoint (every shard of one Redis instance at once), or the shard's slot in a cluster."""
        groups: dict[int, list[tuple[int, str]]] = {}
        n = len(self._clients)
        cluster = self.settings.cluster
        prefixes, nshards = self._shard_prefix, self._nshards
        for i, key in enumerate(keys):
            shard = zlib.crc32(key.encode()) % nshards
            groups.setdefault(shard if cluster else shard % n, []).append((i, f"{prefixes[shard]}:k:{key}"))
        return groups

    def _parallel(self, fn, items: list) -> list:
        if len(items) > 1 and (len(self._clients) > 1 or self.settings.cluster):
            return list(self._pool.map(fn, items))
        return [fn(i) for i in items]

    def route_get_batch(
        self, keys: list[str], exclude: frozenset[str], now: float, lease_until: float
    ) -> list[Sequence[Location]]:
        out: list[Sequence[Location]] = [()] * len(keys)
        excl = "\n".join(sorted(exclude))

        def one(item):
            group, members = item
            conn = self._conn(group) if not self.settings.cluster else self._clients[0]
            names = "\n".join(name for _, name in members)
            return (
                [i for i, _ in members],
                self._run("ROUTE_GET_BATCH", conn, members[0][1], [repr(now), repr(lease_until), excl, names]),
            )

        for idx, text in self._parallel(one, list(self._group(keys).items())):
            for i, line in zip(idx, text.decode().split("\n")):
                if not line:
                    continue
                locs = []
                for copy in line.split("\x1e"):
                    f = copy.split("\x1f")  # node, tier, size[, offset, checksum]
                    locs.append(
                        Location(f[0], int(f[1]), int(f[2]))
                        if len(f) == 3
                        else Location(f[0], int(f[1]), int(f[2]), int(f[3]), int(f[4]))
                    )
                out[i] = (
                    tuple(sorted(locs, key=lambda loc: _TIER_RANK.get(loc.tier, 9))) if len(locs) > 1 else tuple(locs)
                )
        return out

    def lookup_batch(self, keys: list[str]) -> list[bool]:
        out = [False] * len(keys)

        def one(item):
            group, members = item
            conn = self._conn(group) if not self.settings.cluster else self._clients[0]
            pipe = conn.pipeline(transaction=False)
            for _, name in members:
                pipe.exists(name)
            return [i for i, _ in members], pipe.execute()

        for idx, found in self._parallel(one, list(self._group(keys).items())):
            for i, f in zip(idx, found):
                out[i] = bool(f)
        return out

    def eviction_candidates(self, node_id: str, tier: int, now: float) -> list[EvictionCandidate]:
        def one(shard: int):
            flat = self._shard_run("EVICTION_CANDIDATES", shard, [node_id, str(int(tier)), repr(now)])
            return [
                EvictionCandidate(flat[i].decode(), int(flat[i + 1]), float(flat[i + 2]))
                for i in range(0, len(flat), 3)
            ]

        return [c for part in self._each_shard(one) for c in part]

    def node_keys(self, node_id: str) -> list[str]:
        def one(shard: int):
            members = self._conn(shard).smembers(f"{self._shard_prefix[shard]}:n:{node_id}")
            return [m.decode().split("|", 1)[1] for m in members]

        return list(dict.fromkeys(k for part in self._each_shard(one) for k in part))

    def key_count(self) -> int:
        return sum(int(self._conn(s).get(f"{self._shard_prefix[s]}:count") or 0) for s in range(self._nshards))


class RedisExternalKv(ExternalKvStore):
    """External KV index and hit counters on the control endpoint (they survive the master)."""

    def __init__(self, store: RedisMetadataStore) -> None:
        self._s = store

    def _op(self, op: str, node_id: str, tier: int, hashes: Iterable[str] = ()) -> None:
        self._s._ctl_run("EXTERNAL_KV", [op, node_id, str(int(tier)), *hashes])

    def report(self, node_id: str, hashes: list[str], tier: int) -> None:
        self._op("report", node_id, tier, hashes)

    def revoke(self, node_id: str, hashes: list[str], tier: int) -> None:
        self._op("revoke", node_id, tier, hashes)

    def revoke_tier(self, node_id: str, tier: int) -> None:
        self._op("revoke_tier", node_id, tier)

    def revoke_node(self, node_id: str) -> None:
        self._op("revoke_node", node_id, 0)

    def match(self, hashes: list[str]) -> dict[str, dict[int, list[str]]]:
        unique = list(dict.fromkeys(hashes))
        flat = self._s._ctl_run("EXTERNAL_KV_MATCH", unique)
        found: dict[str, list[tuple[str, int]]] = {}
        for i in range(0, len(flat), 2):
            node, _, tier = flat[i + 1].decode().rpartition("|")
            found.setdefault(flat[i].decode(), []).append((node, int(tier)))
        out: dict[str, dict[int, list[str]]] = {}
        for h in unique:
            for node, tier in sorted(found.get(h, ())):
                out.setdefault(node, {}).setdefault(tier, []).append(h)
        return out

    def count_hits(self, hashes: Iterable[str], now: float) -> None:
        hs = list(hashes)
        if hs:
            self._s._ctl_run("COUNT_HITS", [repr(now), *hs])

    def hit_counts(self, hashes: list[str]) -> list[tuple[str, int]]:
        unique = list(dict.fromkeys(hashes))
        values = self._s._ctl.hmget(f"{self._s._ctl_prefix}:hits", unique) if unique else []
        return [(h, int(v)) for h, v in zip(unique, values) if v is not None]

    def drop_stale_hits(self, now: float, ttl: float) -> int:
        return int(self._s._ctl_run("DROP_STALE_HITS", [repr(now - ttl)]))

    def clear(self) -> None:
        c, p = self._s._ctl, self._s._ctl_prefix
        for pattern in (f"{p}:xh:*", f"{p}:xn:*", f"{p}:xnodes:*"):
            keys = list(c.scan_iter(match=pattern, count=1000))
            for i in range(0, len(keys), 500):
                c.delete(*keys[i : i + 500])

    def live_counts(self) -> dict[str, int]:
        c, p = self._s._ctl, self._s._ctl_prefix
        out: dict[str, int] = {}
        marker = f"{p}:xnodes:"
        for name in c.scan_iter(match=f"{marker}*", count=1000):
            node = name.decode()[len(marker) :]
            tiers = [t.decode() for t in c.smembers(name)]
            sets = [f"{p}:xn:{node}:{t}" for t in tiers]
            n = c.scard(sets[0]) if len(sets) == 1 else (len(c.sunion(sets)) if sets else 0)
            if n:
                out[node] = n
        return out
