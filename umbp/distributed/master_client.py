# SPDX-License-Identifier: MIT
"""UMBPMasterClient: the control-plane client of the UMBP master, under MORI's names.

For schedulers and routers: registration, the external-KV index and its hit counters, plus
(ours) lookups, routing, a cluster-wide clear and quotas. The channel is opened lazily (the
constructor never fails); every call has a deadline (``lookup_timeout_ms``, UMBP_LOOKUP_TIMEOUT_MS)
so a dead or hung master is an error naming it within that time, never a hang. Failures raise
MORI's errors, all RuntimeErrors: InvalidArgument (also ValueError), Timeout (also TimeoutError),
RemoteError. With a job secret (``secret_hex`` or MORI_JOB_SECRET) every call is signed.
"""

from __future__ import annotations

import threading
from typing import Optional

import grpc

from mori.core.errors import InvalidArgument, MoriError, RemoteError, Timeout
from mori.umbp import UMBPExternalKvHitCountEntry, UMBPExternalKvMatch, UMBPTierType
from mori.umbp.proto import require

pb = require("umbp_pb2")
pb_grpc = require("umbp_pb2_grpc")
admin_pb = require("umbp_admin_pb2")
admin_grpc = require("umbp_admin_pb2_grpc")

# MORI's mori.cpp names the control-plane match type UMBPExternalKvNodeMatch; it is the same
# record as the data-plane UMBPExternalKvMatch.
UMBPExternalKvNodeMatch = UMBPExternalKvMatch

__all__ = ["UMBPMasterClient", "UMBPExternalKvNodeMatch", "UMBPExternalKvHitCountEntry", "rpc_error"]


def rpc_error(address: str, method: str, exc: grpc.RpcError) -> MoriError:
    """A MORI error for a failed call to the master at ``address``."""
    code = exc.code() if hasattr(exc, "code") else None
    detail = exc.details() if hasattr(exc, "details") else str(exc)
    text = f"umbp master {address}: {method} failed: {detail}"
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidArgument(text)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return Timeout(f"umbp master {address}: {method} got no answer within the deadline")
    if code == grpc.StatusCode.UNAVAILABLE:
        return RemoteError(f"umbp master {address} unavailable: {method}: {detail}")
    return RemoteError(text)


def _tier(tier) -> int:
    value = int(tier)
    if value not in (1, 2, 3):
        raise InvalidArgument(f"tier must be UMBPTierType.HBM, DRAM or SSD, got {tier!r}")
    return value


def _hashes(hashes, what: str) -> list[str]:
    if isinstance(hashes, (str, bytes)):
        raise InvalidArgument(f"{what}: hashes must be a list of strings, not a single string")
    return [str(h) for h in hashes]


class UMBPMasterClient:
    """``UMBPMasterClient(master_address, node_id="", node_address="")`` (MORI's signature).

    Ours, keyword-only: ``lookup_timeout_ms`` (deadline of every call; default
    UMBP_LOOKUP_TIMEOUT_MS), ``secret_hex`` (job secret; default MORI_JOB_SECRET),
    ``peer_address`` (sent on registration).
    """

    def __init__(
        self,
        master_address: str,
        node_id: str = "",
        node_address: str = "",
        *,
        lookup_timeout_ms: Optional[int] = None,
        secret_hex: Optional[str] = None,
        peer_address: str = "",
    ) -> None:
        from mori.core.env import setting

        self.master_address = master_address
        self.node_id = node_id
        self.node_address = node_address
        self.peer_address = peer_address
        timeout_ms = int(setting("UMBP_LOOKUP_TIMEOUT_MS")) if lookup_timeout_ms is None else lookup_timeout_ms
        if timeout_ms <= 0:
            raise InvalidArgument(f"lookup_timeout_ms must be > 0, got {timeout_ms}")
        self.timeout_s = timeout_ms / 1000.0
        if secret_hex is None:
            secret_hex = str(setting("MORI_JOB_SECRET"))
        self._secret: Optional[bytes] = None
        if secret_hex:
            from mori.umbp.distributed.master_auth import secret_from_hex

            self._secret = secret_from_hex(secret_hex)
        self._lock = threading.Lock()
        self._channel = None  # grpc_channels.Channel
        self._stub = None
        self._admin = None
        self._registered = False

    # -- plumbing ----------------------------------------------------------------------------
    def _stubs(self):
        with self._lock:
            if self._stub is None:
                from mori.umbp.distributed.grpc_channels import Channel

                channel = Channel(
                    self.master_address,
                    [
                        (pb_grpc.UMBPMasterStub, pb.DESCRIPTOR.services_by_name["UMBPMaster"], pb),
                        (
                            admin_grpc.UMBPMasterAdminStub,
                            admin_pb.DESCRIPTOR.services_by_name["UMBPMasterAdmin"],
                            admin_pb,
                        ),
                    ],
                    secret=self._secret,
                    options=[("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 1000)],
                )
                self._channel = channel
                self._stub, self._admin = channel.stubs
            return self._stub, self._admin

    def _call(self, method: str, request, admin: bool = False):
        stub, admin_stub = self._stubs()
        fn = getattr(admin_stub if admin else stub, method)
        try:
            return fn(request, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise rpc_error(self.master_address, method, exc) from None

    def close(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
            self._channel = self._stub = self._admin = None

    def __enter__(self) -> "UMBPMasterClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<UMBPMasterClient master={self.master_address!r} node_id={self.node_id!r} registered={self._registered}>"
        )

    # -- registration --------------------------------------------------------------------------
    def register_self(self, tier_capacities: Optional[dict] = None) -> None:
        """Register ``node_id`` with ``{UMBPTierType: (total_bytes, available_bytes)}``."""
        if not self.node_id:
            raise InvalidArgument("register_self: node_id must not be empty (pass node_id= to the constructor)")
        caps = []
        for tier, value in (tier_capacities or {}).items():
            try:
                total, available = (int(v) for v in value)
            except (TypeError, ValueError):
                raise InvalidArgument(f"tier_capacities[{tier!r}] must be (total_bytes, available_bytes)") from None
            if total < 0 or available < 0 or available > total:
                raise InvalidArgument(f"tier_capacities[{tier!r}] = {value!r}: need 0 <= available <= total")
            caps.append(
                pb.TierCapacity(tier=_tier(tier), total_capacity_bytes=total, available_capacity_bytes=available)
            )
        self._call(
            "RegisterClient",
            pb.RegisterClientRequest(
                node_id=self.node_id,
                node_address=self.node_address,
                tier_capacities=caps,
                peer_address=self.peer_address,
            ),
        )
        self._registered = True

    def unregister_self(self) -> None:
        """Leave the pool (the master drops this node's keys and external KV); no-op if not registered."""
        if not self._registered:
            return
        self._call("UnregisterClient", pb.UnregisterClientRequest(node_id=self.node_id))
        self._registered = False

    def is_registered(self) -> bool:
        return self._registered

    # -- external KV -----------------------------------------------------------------------------
    def _check_node(self, node_id: str, what: str) -> None:
        if not node_id:
            raise InvalidArgument(f"{what}: node_id must not be empty")

    def report_external_kv_blocks(self, node_id: str, hashes: list[str], tier) -> None:
        """Record that ``node_id`` holds ``hashes`` in ``tier`` (ignored for unregistered nodes)."""
        self._check_node(node_id, "report_external_kv_blocks")
        hs = _hashes(hashes, "report_external_kv_blocks")
        if not hs:
            raise InvalidArgument("report_external_kv_blocks: hashes must not be empty")
        self._call(
            "ReportExternalKvBlocks", pb.ReportExternalKvBlocksRequest(node_id=node_id, hashes=hs, tier=_tier(tier))
        )

    def revoke_external_kv_blocks(self, node_id: str, hashes: list[str], tier) -> None:
        self._check_node(node_id, "revoke_external_kv_blocks")
        self._call(
            "RevokeExternalKvBlocks",
            pb.RevokeExternalKvBlocksRequest(
                node_id=node_id, hashes=_hashes(hashes, "revoke_external_kv_blocks"), tier=_tier(tier)
            ),
        )

    def revoke_all_external_kv_blocks_at_tier(self, node_id: str, tier) -> None:
        self._check_node(node_id, "revoke_all_external_kv_blocks_at_tier")
        self._call(
            "RevokeAllExternalKvBlocksAtTier",
            pb.RevokeAllExternalKvBlocksAtTierRequest(node_id=node_id, tier=_tier(tier)),
        )

    def revoke_all_external_kv_blocks_for_node(self, node_id: str) -> None:
        self._check_node(node_id, "revoke_all_external_kv_blocks_for_node")
        self._call("RevokeAllExternalKvBlocksForNode", pb.RevokeAllExternalKvBlocksForNodeRequest(node_id=node_id))

    def match_external_kv(self, hashes: list[str], count_as_hit: bool = False) -> list:
        """Nodes holding any of ``hashes``, each with its hashes by tier; ``count_as_hit`` adds one
        hit to each matched unique hash."""
        hs = _hashes(hashes, "match_external_kv")
        if not hs:
            return []
        reply = self._call("MatchExternalKv", pb.MatchExternalKvRequest(hashes=hs, count_as_hit=count_as_hit))
        out = []
        for m in reply.matches:
            match = UMBPExternalKvNodeMatch()
            match.node_id = m.node_id
            match.peer_address = m.peer_address
            match.hashes_by_tier = {UMBPTierType(th.tier): list(th.hashes) for th in m.hashes_by_tier}
            out.append(match)
        return out

    def get_external_kv_hit_counts(self, hashes: list[str]) -> list:
        """Hit totals of the known hashes among ``hashes`` (unknown ones are left out)."""
        hs = _hashes(hashes, "get_external_kv_hit_counts")
        if not hs:
            return []
        reply = self._call("GetExternalKvHitCounts", pb.GetExternalKvHitCountsRequest(hashes=hs))
        out = []
        for e in reply.entries:
            entry = UMBPExternalKvHitCountEntry()
            entry.hash = e.hash
            entry.hit_count_total = e.hit_count_total
            out.append(entry)
        return out

    # -- lookups and routing (ours) ------------------------------------------------------------
    def batch_lookup(self, keys: list[str]) -> list[bool]:
        """Whether each key is in the pool's index (no lease)."""
        return list(self._call("BatchLookup", pb.BatchLookupRequest(node_id=self.node_id, keys=list(keys))).found)

    def batch_route_get(self, keys: list[str], exclude_nodes: Optional[list[str]] = None) -> list:
        """Per key: None (miss) or (node_id, peer_address, tier, size); leases the keys found."""
        reply = self._call(
            "BatchRouteGet",
            pb.BatchRouteGetRequest(node_id=self.node_id, keys=list(keys), exclude_nodes=list(exclude_nodes or [])),
        )
        nodes = [(n.node_id, n.peer_address) for n in reply.nodes]
        return [
            None if ref == 0 else (nodes[ref - 1][0], nodes[ref - 1][1], int(t), int(s))
            for ref, t, s in zip(reply.node_ref, reply.tier, reply.size)
        ]

    def batch_route_put(self, keys: list[str], sizes: list[int], exclude_nodes: Optional[list[str]] = None) -> list:
        """Per key: "already_exists", None (no room / quota) or (node_id, peer_address, tier)."""
        if len(keys) != len(sizes):
            raise InvalidArgument(f"batch_route_put: {len(keys)} keys but {len(sizes)} sizes")
        reply = self._call(
            "BatchRoutePut",
            pb.BatchRoutePutRequest(
                node_id=self.node_id, keys=list(keys), block_sizes=list(sizes), exclude_nodes=list(exclude_nodes or [])
            ),
        )
        out = []
        for e in reply.entries:
            if e.outcome == pb.ROUTE_PUT_OUTCOME_ALREADY_EXISTS:
                out.append("already_exists")
            elif e.outcome == pb.ROUTE_PUT_OUTCOME_ROUTED:
                out.append((e.node_id, e.peer_address, int(e.tier)))
            else:
                out.append(None)
        return out

    # -- administration (ours) -------------------------------------------------------------------
    def clear_cluster(self, include_external_kv: bool = True) -> dict:
        """Ask every live peer to evict every key; returns the tallies."""
        r = self._call(
            "ClearCluster",
            admin_pb.ClearClusterRequest(node_id=self.node_id, include_external_kv=include_external_kv),
            admin=True,
        )
        return {
            "keys_evicted": r.keys_evicted,
            "keys_refused": r.keys_refused,
            "bytes_freed": r.bytes_freed,
            "unreachable_nodes": list(r.unreachable_nodes),
        }

    def set_engine_quota(self, engine_id: str, quota_bytes: int) -> None:
        """Cap the pool bytes ``engine_id``'s puts may hold (0: no cap)."""
        self._call(
            "SetEngineQuota", admin_pb.SetEngineQuotaRequest(engine_id=engine_id, quota_bytes=quota_bytes), admin=True
        )

    def get_engine_usage(self, engine_id: str) -> dict:
        r = self._call("GetEngineUsage", admin_pb.GetEngineUsageRequest(engine_id=engine_id), admin=True)
        return {"quota_bytes": r.quota_bytes, "used_bytes": r.used_bytes, "pending_bytes": r.pending_bytes}
