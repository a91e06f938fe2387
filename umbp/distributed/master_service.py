# SPDX-License-Identifier: MIT
"""The gRPC handlers of umbp.UMBPMaster (MORI's 15 RPCs) and umbp.UMBPMasterAdmin (ours)."""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Optional, Sequence

import grpc

from mori import _C
from mori.umbp.distributed.master_eviction import EvictionManager
from mori.umbp.distributed.master_metrics import MasterMetrics, tier_label
from mori.umbp.distributed.master_quota import EngineQuotas
from mori.umbp.distributed.master_records import (
    ClientRecord,
    ClientStatus,
    EventBundle,
    KvEvent,
    RoutedGets,
    Tier,
    TierCapacity,
)
from mori.umbp.distributed.master_routing import GetRouter, PutRouter, PutTarget
from mori.umbp.distributed.master_settings import MasterSettings
from mori.umbp.distributed.master_store import MetadataStore
from mori.umbp.proto import require

pb = require("umbp_pb2")
pb_grpc = require("umbp_pb2_grpc")
admin_pb = require("umbp_admin_pb2")
admin_grpc = require("umbp_admin_pb2_grpc")
peer_pb = require("umbp_peer_pb2")
log = logging.getLogger("mori.umbp.master")

_ROUTED, _EXISTS, _UNAVAILABLE = (
    pb.ROUTE_PUT_OUTCOME_ROUTED,
    pb.ROUTE_PUT_OUTCOME_ALREADY_EXISTS,
    pb.ROUTE_PUT_OUTCOME_UNAVAILABLE,
)
_QUOTA_EXCEEDED = pb.ROUTE_PUT_OUTCOME_QUOTA_EXCEEDED


def _timed(method):
    """Latency histogram and error counter per RPC."""
    name = method.__name__

    @functools.wraps(method)
    def wrapper(self, request, context):
        start = time.perf_counter()
        try:
            return method(self, request, context)
        except Exception:
            code = context.code() if hasattr(context, "code") else None
            self.metrics.rpc_errors.labels(name, str(code.name if code else "UNKNOWN")).inc()
            raise
        finally:
            self.metrics.rpc_latency_of(name).observe(time.perf_counter() - start)

    return wrapper


def _capacities(tier_caps) -> dict[int, TierCapacity]:
    return {
        int(tc.tier): TierCapacity(tc.total_capacity_bytes, tc.available_capacity_bytes, tc.max_allocatable_bytes)
        for tc in tier_caps
    }


class MasterState:
    """What the handlers share: the store, routers, quotas, metrics and settings."""

    def __init__(
        self,
        store: MetadataStore,
        settings: MasterSettings,
        metrics: MasterMetrics,
        peers,
        quotas: Optional[EngineQuotas] = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.metrics = metrics
        self.peers = peers
        self.quotas = quotas or EngineQuotas(pending_ttl_s=4 * settings.heartbeat_interval_s)
        self.put_router = PutRouter(settings.route_put_algo, settings.route_put_affinity)
        self.get_router = GetRouter(settings.route_get_strategy)
        self.eviction = EvictionManager(store, settings, peers, metrics)
        # Keys routed for a put but not yet in the index (their owner's ADD event is on its way, in
        # the heartbeat its commit wakes): a second writer of the same key is sent to the same
        # node, where the peer's own dedup answers ALREADY_EXISTS; gets and lookups of the key
        # are answered from here, so a put costs its writer one master RPC and a reader finds
        # the value as soon as the put returned. The owner's ADD replaces the record; one whose
        # put failed after the route runs out after two heartbeat intervals. The registry is
        # C++ (umbp/src/master_pending.h): the grpc++ server's native get path reads this same one.
        self.pending = _C.umbp.PendingPuts()
        # Where owners' DRAM values lie, for workers' first reads (master_place_feed.py).
        self.place_feed = store.new_place_feed(int(Tier.DRAM))
        self._clients_cache: tuple[float, dict[str, ClientRecord]] = (0.0, {})
        self._clients_lock = threading.Lock()

    def alive(self, max_age_s: float = 0.2) -> dict[str, ClientRecord]:
        """Live clients, cached briefly (a Redis store would be asked on every route otherwise)."""
        now = time.monotonic()
        with self._clients_lock:
            stamp, cached = self._clients_cache
            if now - stamp <= max_age_s:
                return cached
        fresh = {c.node_id: c for c in self.store.alive_clients()}
        with self._clients_lock:
            self._clients_cache = (now, fresh)
        return fresh

    def invalidate_clients(self) -> None:
        with self._clients_lock:
            self._clients_cache = (0.0, {})

    def pending_target(self, key: str, now: float) -> Optional[PutTarget]:
        hit = self.pending_puts([key], now)[0]
        return None if hit is None else hit[0]

    def pending_puts(self, keys: Sequence[str], now: float) -> list[Optional[tuple[PutTarget, int]]]:
        """Per key its routed, not yet reported put: (target, size), or None."""
        if not len(self.pending):
            return [None] * len(keys)
        return [
            None if hit is None else (PutTarget(hit[0], hit[1], hit[2]), hit[3])
            for hit in self.pending.find_batch(list(keys), now)
        ]

    @property
    def pending_ttl_s(self) -> float:
        """How long a routed put stays pending without its owner's report: two heartbeats."""
        return 2 * self.settings.heartbeat_interval_s

    def remember_pending(self, key: str, target: PutTarget, now: float, size: int = 0) -> None:
        expires = now + self.pending_ttl_s
        self.pending.add(key, target.node_id, int(target.tier), target.peer_address, int(size), expires, now)

    def reported(self, keys: Sequence[str]) -> None:
        """Keys an owner's ADD events put in the index: their pending records are done."""
        if len(self.pending):
            self.pending.done(list(keys))


class UMBPMasterServicer(pb_grpc.UMBPMasterServicer):
    def __init__(self, state: MasterState) -> None:
        self.state = state
        self.metrics = state.metrics

    # -- membership ------------------------------------------------------------------------
    @_timed
    def RegisterClient(self, request, context):
        s = self.state
        if not request.node_id:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "RegisterClient: node_id must not be empty")
        record = ClientRecord(
            node_id=request.node_id,
            node_address=request.node_address,
            peer_address=request.peer_address,
            engine_desc=bytes(request.engine_desc),
            tags=list(request.tags),
            capacities=_capacities(request.tier_capacities),
        )
        now = time.time()
        if not s.store.register_client(record, now, s.settings.expiry_s):
            context.abort(
                grpc.StatusCode.ALREADY_EXISTS, f"RegisterClient: node_id {request.node_id!r} is registered and alive"
            )
        s.invalidate_clients()
        s.put_router.capacity_reported(request.node_id, record.capacities, now)
        for tier, cap in record.capacities.items():
            self.metrics.set_capacity(request.node_id, tier, cap.total, cap.available)
        self.metrics.client_count.set(len(s.alive(0)))
        log.info("registered %s (peer %s)", request.node_id, request.peer_address)
        return pb.RegisterClientResponse(
            heartbeat_interval_ms=int(s.settings.heartbeat_interval_s * 1000),
            ack_seq=0,
            supports_max_allocatable_bytes=True,
            supports_logical_tiers=False,
        )

    @_timed
    def UnregisterClient(self, request, context):
        s = self.state
        for key, _size in s.store.unregister_client(request.node_id):
            s.quotas.removed(key)
        s.put_router.forget(request.node_id)
        s.invalidate_clients()
        self.metrics.forget_node(request.node_id)
        self.metrics.client_count.set(len(s.alive(0)))
        return pb.UnregisterClientResponse()

    @_timed
    def Heartbeat(self, request, context):
        s = self.state
        caps = _capacities(request.tier_capacities)
        bundles = [
            EventBundle(
                b.seq,
                [KvEvent(e.kind == pb.KvEvent.ADD, e.key, int(e.tier), e.size, e.offset, e.checksum) for e in b.events],
            )
            for b in request.bundles
        ]
        now = time.time()
        out = s.store.apply_heartbeat(
            request.node_id, now, caps, bundles, request.is_full_sync, request.delta_seq_baseline
        )
        if out.status == ClientStatus.UNKNOWN:
            return pb.HeartbeatResponse(status=pb.CLIENT_STATUS_UNKNOWN, acked_seq=0, request_full_sync=False)
        s.reported([e.key for b in bundles for e in b.events if e.add])
        if not request.is_full_sync:  # a full sync restates every key: no news for readers
            s.place_feed.record(request.node_id, (e for b in bundles for e in b.events))
        if caps:
            s.put_router.capacity_reported(request.node_id, caps, now)
            for tier, cap in caps.items():
                self.metrics.set_capacity(request.node_id, tier, cap.total, cap.available)
        if request.tier_kv_counts:
            total = 0
            for c in request.tier_kv_counts:
                total += c.count
                self.metrics.kv_live.labels(request.node_id, tier_label(c.tier)).set(c.count)
            self.metrics.kv_live_total.labels(request.node_id).set(total)
        n_events = sum(len(b.events) for b in bundles)
        if n_events:
            self.metrics.hb_events.inc(n_events)
        if out.request_full_sync:
            self.metrics.hb_seq_gap.inc()
        for key, _size in out.removed:
            s.quotas.removed(key)
        for key, size in out.added:
            s.quotas.added(key, size)
        return pb.HeartbeatResponse(
            status=pb.CLIENT_STATUS_ALIVE, acked_seq=out.acked_seq, request_full_sync=out.request_full_sync
        )

    # -- routing ---------------------------------------------------------------------------
    def _route_put_one(
        self, writer: str, key: str, size: int, exclude: frozenset[str], clients: list[ClientRecord], rooms, now: float
    ):
        """(outcome, target) of one key's put; ``rooms``: ``PutRouter.rooms(clients)``."""
        s = self.state
        pending = s.pending_target(key, now)
        if pending is not None and pending.node_id not in exclude:
            return _ROUTED, pending
        if not s.quotas.admit(writer, key, size, now):
            # Its own outcome, not UNAVAILABLE: the writer must drop the value, not keep it in
            # its own store (which would put it past its quota all the same).
            self.metrics.route_put_outcome.labels("quota").inc()
            return _QUOTA_EXCEEDED, None
        target = s.put_router.route(writer, size, rooms, exclude)
        if target is None:
            self.metrics.route_put_outcome.labels("unavailable").inc()
            # The writer keeps the value in its own store: gets are routed there meanwhile.
            here = next((c for c in clients if c.node_id == writer), None)
            if here is not None:
                s.remember_pending(key, PutTarget(writer, int(Tier.DRAM), here.peer_address), now, size)
            return _UNAVAILABLE, None
        s.remember_pending(key, target, now, size)
        self.metrics.route_put_outcome.labels("routed").inc()
        return _ROUTED, target

    def _quota_of(self, writer: str, outcome: int) -> int:
        """The writer's quota, told back with QUOTA_EXCEEDED so its log can name it."""
        return self.state.quotas.usage(writer).quota if outcome == _QUOTA_EXCEEDED else 0

    @_timed
    def RoutePut(self, request, context):
        s = self.state
        if not request.key:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "RoutePut: key must not be empty")
        if s.store.lookup_batch([request.key])[0]:
            self.metrics.route_put_outcome.labels("already_exists").inc()
            return pb.RoutePutResponse(outcome=_EXISTS)
        clients = list(s.alive().values())
        outcome, target = self._route_put_one(
            request.node_id,
            request.key,
            request.block_size,
            frozenset(request.exclude_nodes),
            clients,
            s.put_router.rooms(clients),
            time.time(),
        )
        if target is None:
            return pb.RoutePutResponse(outcome=outcome, quota_bytes=self._quota_of(request.node_id, outcome))
        self.metrics.route_put.labels(target.node_id).inc()
        return pb.RoutePutResponse(
            outcome=outcome, node_id=target.node_id, tier=target.tier, peer_address=target.peer_address
        )

    @_timed
    def BatchRoutePut(self, request, context):
        s = self.state
        keys, sizes = list(request.keys), list(request.block_sizes)
        if len(keys) != len(sizes):
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"BatchRoutePut: {len(keys)} keys but {len(sizes)} block_sizes"
            )
        exists = s.store.lookup_batch(keys) if keys else []
        clients = list(s.alive().values())
        rooms = s.put_router.rooms(clients)
        exclude = frozenset(request.exclude_nodes)
        now = time.time()
        seen: set[str] = set()
        entries = []
        for key, size, known in zip(keys, sizes, exists):
            if known or key in seen:
                self.metrics.route_put_outcome.labels("already_exists").inc()
                entries.append(pb.BatchRoutePutEntry(outcome=_EXISTS))
                continue
            seen.add(key)
            outcome, target = self._route_put_one(request.node_id, key, size, exclude, clients, rooms, now)
            if target is None:
                entries.append(
                    pb.BatchRoutePutEntry(outcome=outcome, quota_bytes=self._quota_of(request.node_id, outcome))
                )
            else:
                self.metrics.batch_route_put.labels(target.node_id).inc()
                entries.append(
                    pb.BatchRoutePutEntry(
                        outcome=outcome, node_id=target.node_id, tier=target.tier, peer_address=target.peer_address
                    )
                )
        return pb.BatchRoutePutResponse(entries=entries)

    def _route_get(self, keys, exclude):
        """The store's batched get path; also returns the live clients it routed over."""
        s = self.state
        now = time.time()
        alive = s.alive()
        routed = s.store.route_get_choose(keys, exclude, alive, now, now + s.settings.lease_duration_s, s.get_router)
        return routed, alive

    @_timed
    def RouteGet(self, request, context):
        routed, alive = self._route_get([request.key], request.exclude_nodes)
        if routed.misses:
            self.metrics.route_get_misses.inc()
            return pb.RouteGetResponse(found=False)
        node_id = routed.nodes[0]
        self.metrics.route_get.labels(node_id).inc()
        client = alive.get(node_id)
        return pb.RouteGetResponse(
            found=True,
            node_id=node_id,
            tier=routed.tier[0],
            size=routed.size[0],
            peer_address=client.peer_address if client else "",
        )

    @_timed
    def BatchRouteGet(self, request, context):
        keys = list(request.keys)
        for _look in range(3):
            # A key its owner reported between the index's answer and the pending look is in
            # neither: the route looks again when a report came meanwhile (PendingPuts.dones).
            dones = self.state.pending.dones()
            routed, alive = self._route_get(keys, request.exclude_nodes)
            if routed.misses:
                self._route_pending(keys, routed, alive, frozenset(request.exclude_nodes))
            if not routed.misses or self.state.pending.dones() == dones:
                break
        offsets = routed.offset or [0] * len(keys)
        checksums = routed.checksum or [0] * len(keys)
        if len(offsets) < len(routed.node_ref):
            offsets += [0] * (len(routed.node_ref) - len(offsets))
        if len(checksums) < len(routed.node_ref):
            checksums += [0] * (len(routed.node_ref) - len(checksums))
        nodes = []
        for node_id, n in zip(routed.nodes, routed.hits):
            client = alive.get(node_id)
            nodes.append(pb.NodeInfo(node_id=node_id, peer_address=client.peer_address if client else ""))
            self.metrics.batch_route_get.labels(node_id).inc(n)
        if routed.misses:
            self.metrics.route_get_misses.inc(routed.misses)
        return pb.BatchRouteGetResponse(
            nodes=nodes,
            node_ref=routed.node_ref,
            tier=routed.tier,
            size=routed.size,
            offset=offsets,
            checksum=checksums,
        )

    def _route_pending(self, keys: list[str], routed: RoutedGets, alive: dict, exclude: frozenset[str]) -> None:
        """Misses with a routed put not yet reported: sent to the put's target (a DRAM copy of
        unknown place: the reader resolves it there)."""
        miss = [i for i, ref in enumerate(routed.node_ref) if ref == 0]
        for i, hit in zip(miss, self.state.pending_puts([keys[i] for i in miss], time.time())):
            if hit is None or hit[0].node_id not in alive or hit[0].node_id in exclude:
                continue
            target, size = hit
            if target.node_id in routed.nodes:
                ref = routed.nodes.index(target.node_id) + 1
            else:
                routed.nodes.append(target.node_id)
                routed.hits.append(0)
                ref = len(routed.nodes)
            routed.hits[ref - 1] += 1
            routed.node_ref[i] = ref
            routed.tier[i] = int(Tier.DRAM)
            routed.size[i] = size
            routed.misses -= 1

    @_timed
    def BatchLookup(self, request, context):
        keys = list(request.keys)
        for _look in range(3):
            dones = self.state.pending.dones()  # as in BatchRouteGet: a report meanwhile, look again
            found = self.state.store.lookup_batch(keys) if keys else []
            if not all(found):  # a routed put not yet reported counts: its put returned, or will
                miss = [i for i, f in enumerate(found) if not f]
                for i, hit in zip(miss, self.state.pending_puts([keys[i] for i in miss], time.time())):
                    if hit is not None:
                        found[i] = True
            if all(found) or self.state.pending.dones() == dones:
                break
        return pb.BatchLookupResponse(found=found)

    # -- external KV -----------------------------------------------------------------------
    def _alive_node(self, node_id: str) -> bool:
        rec = self.state.store.get_client(node_id)
        return rec is not None and time.time() - rec.last_heartbeat <= self.state.settings.expiry_s

    @_timed
    def ReportExternalKvBlocks(self, request, context):
        if not request.node_id:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "ReportExternalKvBlocks: node_id must not be empty")
        if not request.hashes:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "ReportExternalKvBlocks: hashes must not be empty")
        self.metrics.ext_report.inc()
        self.metrics.ext_report_blocks.inc(len(request.hashes))
        if self._alive_node(request.node_id):  # reports of unknown or expired nodes are dropped
            self.state.store.external_kv.report(request.node_id, list(request.hashes), int(request.tier))
        return pb.ReportExternalKvBlocksResponse()

    @_timed
    def RevokeExternalKvBlocks(self, request, context):
        if not request.node_id:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "RevokeExternalKvBlocks: node_id must not be empty")
        self.metrics.ext_revoke.inc()
        self.metrics.ext_revoke_blocks.inc(len(request.hashes))
        if request.hashes:
            self.state.store.external_kv.revoke(request.node_id, list(request.hashes), int(request.tier))
        return pb.RevokeExternalKvBlocksResponse()

    @_timed
    def RevokeAllExternalKvBlocksAtTier(self, request, context):
        if not request.node_id:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "RevokeAllExternalKvBlocksAtTier: node_id must not be empty"
            )
        self.state.store.external_kv.revoke_tier(request.node_id, int(request.tier))
        return pb.RevokeAllExternalKvBlocksAtTierResponse()

    @_timed
    def RevokeAllExternalKvBlocksForNode(self, request, context):
        if not request.node_id:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "RevokeAllExternalKvBlocksForNode: node_id must not be empty"
            )
        self.state.store.external_kv.revoke_node(request.node_id)
        return pb.RevokeAllExternalKvBlocksForNodeResponse()

    @_timed
    def MatchExternalKv(self, request, context):
        hashes = list(request.hashes)
        self.metrics.ext_match.inc()
        self.metrics.ext_match_queried.inc(len(hashes))
        matches = self.state.store.external_kv.match(hashes) if hashes else {}
        alive = self.state.alive()
        resp = pb.MatchExternalKvResponse()
        matched: set[str] = set()
        for node_id in sorted(matches):
            m = resp.matches.add(node_id=node_id, peer_address=alive[node_id].peer_address if node_id in alive else "")
            for tier, hs in sorted(matches[node_id].items()):
                m.hashes_by_tier.add(tier=tier, hashes=hs)
                matched.update(hs)
        self.metrics.ext_match_matched.inc(len(matched))
        if request.count_as_hit and matched:
            self.state.store.external_kv.count_hits([h for h in dict.fromkeys(hashes) if h in matched], time.time())
        return resp

    @_timed
    def GetExternalKvHitCounts(self, request, context):
        limit = self.state.settings.hit_query_max_batch
        if len(request.hashes) > limit:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"GetExternalKvHitCounts: {len(request.hashes)} hashes exceed UMBP_HIT_QUERY_MAX_BATCH ({limit})",
            )
        counts = self.state.store.external_kv.hit_counts(list(request.hashes)) if request.hashes else []
        return pb.GetExternalKvHitCountsResponse(
            entries=[pb.HitCountEntry(hash=h, hit_count_total=n) for h, n in counts]
        )

    @_timed
    def ReportMetrics(self, request, context):
        for sample in request.metrics:
            self.metrics.reported.add(request.node_id, sample)
        return pb.ReportMetricsResponse()


class UMBPMasterAdminServicer(admin_grpc.UMBPMasterAdminServicer):
    """Cluster-wide clear and per-engine quotas."""

    EVICT_CHUNK = 4096

    def __init__(self, state: MasterState) -> None:
        self.state = state
        self.metrics = state.metrics

    @_timed
    def PlaceFeed(self, request, context):
        got = self.state.place_feed.since_columns(request.feed_id, request.since_seq, request.max_entries)
        resp = admin_pb.PlaceFeedResponse(feed_id=got.feed_id, next_seq=got.next_seq, gap=got.gap, more=got.more)
        if not got.keys:
            return resp
        alive = self.state.alive()
        refs: dict[str, int] = {}
        for node_id in dict.fromkeys(got.node_ids):  # owners in first-use order
            client = alive.get(node_id)
            if client is not None:  # an owner gone: its places are of no use
                resp.nodes.add(node_id=node_id, peer_address=client.peer_address)
                refs[node_id] = len(resp.nodes)
        cols = (got.keys, got.added, got.offsets, got.sizes, got.checksums)
        if len(refs) < len(set(got.node_ids)):
            keep = [i for i, n in enumerate(got.node_ids) if n in refs]
            node_ids = [got.node_ids[i] for i in keep]
            cols = tuple([c[i] for i in keep] for c in cols)
        else:
            node_ids = got.node_ids
        resp.node_ref.extend([refs[n] for n in node_ids])
        for field, values in zip((resp.keys, resp.added, resp.offset, resp.size, resp.checksum), cols):
            field.extend(values)
        return resp

    @_timed
    def ClearCluster(self, request, context):
        s = self.state
        resp = admin_pb.ClearClusterResponse()
        deadline = s.settings.evictkey_deadline_ms / 1000.0
        for client in s.store.alive_clients():
            keys = s.store.node_keys(client.node_id)
            try:
                stub = s.peers.stub(client.peer_address)
                for i in range(0, len(keys), self.EVICT_CHUNK):
                    chunk = keys[i : i + self.EVICT_CHUNK]
                    reply = stub.EvictKey(peer_pb.EvictKeyRequest(keys=chunk, clear=True), timeout=deadline)
                    freed = {e.key: e.bytes_freed for e in reply.evicted}
                    for key in chunk:
                        if freed.get(key, 0) > 0:
                            resp.keys_evicted += 1
                            resp.bytes_freed += freed[key]
                        else:
                            resp.keys_refused += 1
            except grpc.RpcError as exc:
                log.warning("ClearCluster: EvictKey to %s failed: %s", client.node_id, exc.code())
                resp.unreachable_nodes.append(client.node_id)
        if request.include_external_kv:
            s.store.external_kv.clear()
        log.info(
            "cluster cleared by %r: %d evicted, %d refused, %d unreachable",
            request.node_id,
            resp.keys_evicted,
            resp.keys_refused,
            len(resp.unreachable_nodes),
        )
        return resp

    @_timed
    def SetEngineQuota(self, request, context):
        try:
            self.state.quotas.set_quota(request.engine_id, request.quota_bytes)
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"SetEngineQuota: {exc}")
        return admin_pb.SetEngineQuotaResponse()

    @_timed
    def GetEngineUsage(self, request, context):
        u = self.state.quotas.usage(request.engine_id)
        return admin_pb.GetEngineUsageResponse(quota_bytes=u.quota, used_bytes=u.used, pending_bytes=u.pending)
