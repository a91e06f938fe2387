# SPDX-License-Identifier: MIT
"""The master's Prometheus metrics, under MORI's family names (master_metrics.h).

Master-side families: route counters per serving node, RPC latency histograms, capacity by
node and tier, heartbeat events and seq gaps, external-KV calls and blocks, client count.
Families the peers push with ReportMetrics (SSD copy/read/evict counters, bandwidth histograms,
their own RPC latencies) are re-exported as they come, with a ``node`` label added.
"""

from __future__ import annotations

import re
import threading
from typing import Optional

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from mori.umbp.distributed.master_records import Tier

_LATENCY_BUCKETS = (5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1.0)
_NAME_OK = re.compile(r"[^a-zA-Z0-9_:]")


def tier_label(tier: int) -> str:
    try:
        return Tier(tier).name.lower()
    except ValueError:
        return "unknown"


class _ReportedMetrics:
    """A collector of the samples peers push: counters add deltas, gauges keep the last value,
    histograms add their cumulative buckets."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._help: dict[str, str] = {}
        self._counters: dict[str, dict[tuple, float]] = {}
        self._gauges: dict[str, dict[tuple, float]] = {}
        self._hists: dict[str, dict[tuple, list]] = {}  # labels -> [bounds, buckets, count, sum]

    def add(self, node_id: str, sample) -> None:
        name = _NAME_OK.sub("_", sample.name)
        if not name:
            return
        labels = tuple(
            sorted(
                [(_NAME_OK.sub("_", l.name), l.value) for l in sample.labels if l.name != "node"] + [("node", node_id)]
            )
        )
        kind = sample.WhichOneof("value")
        with self._lock:
            self._help.setdefault(name, sample.help or name)
            if kind == "counter_delta":
                fam = self._counters.setdefault(name, {})
                fam[labels] = fam.get(labels, 0.0) + max(sample.counter_delta, 0.0)
            elif kind == "gauge_value":
                self._gauges.setdefault(name, {})[labels] = sample.gauge_value
            elif kind == "histogram_aggregate":
                h = sample.histogram_aggregate
                if len(h.bounds) != len(h.bucket_counts):
                    return
                fam = self._hists.setdefault(name, {})
                cur = fam.get(labels)
                if cur is None or list(cur[0]) != list(h.bounds):
                    fam[labels] = [list(h.bounds), list(h.bucket_counts), h.count, h.sum]
                else:
                    cur[1] = [a + b for a, b in zip(cur[1], h.bucket_counts)]
                    cur[2] += h.count
                    cur[3] += h.sum

    def collect(self):
        with self._lock:
            for name, fam in self._counters.items():
                base = name[:-6] if name.endswith("_total") else name
                m = CounterMetricFamily(base, self._help[name], labels=None)
                for labels, value in fam.items():
                    m.add_sample(base + "_total", dict(labels), value)
                yield m
            for name, fam in self._gauges.items():
                m = GaugeMetricFamily(name, self._help[name])
                for labels, value in fam.items():
                    m.add_sample(name, dict(labels), value)
                yield m
            for name, fam in self._hists.items():
                m = HistogramMetricFamily(name, self._help[name])
                for labels, (bounds, buckets, count, total) in fam.items():
                    lab = dict(labels)
                    for bound, n in zip(bounds, buckets):
                        m.add_sample(name + "_bucket", {**lab, "le": repr(float(bound))}, n)
                    m.add_sample(name + "_bucket", {**lab, "le": "+Inf"}, count)
                    m.add_sample(name + "_count", lab, count)
                    m.add_sample(name + "_sum", lab, total)
                yield m


class _LiveExternalKv:
    """mori_umbp_external_kv_live_count{node}, read from the store when scraped."""

    def __init__(self, counts) -> None:
        self._counts = counts

    def collect(self):
        m = GaugeMetricFamily("mori_umbp_external_kv_live_count", "Live external KV block count", labels=["node"])
        try:
            counts = self._counts()
        except Exception:  # noqa: BLE001 - a store outage must not break the whole scrape
            counts = {}
        for node, n in sorted(counts.items()):
            m.add_metric([node], n)
        yield m


class _BeforeScrape:
    """Registered first in the master's registry: runs its hooks before any family is collected
    (the grpc++ server's native counts are added to the families there)."""

    def __init__(self) -> None:
        self.hooks: list = []

    def collect(self):
        for hook in self.hooks:
            hook()
        return iter(())


class MasterMetrics:
    """Every family the master exports, in its own registry."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self._before_scrape = _BeforeScrape()
        r.register(self._before_scrape)
        self.rpc_latency = Histogram(
            "mori_umbp_master_rpc_latency_seconds",
            "Latency of master RPC handlers (server side)",
            ["rpc"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self._rpc_latency_children: dict[str, Histogram] = {}
        self.rpc_errors = Counter(
            "mori_umbp_master_rpc_errors_total",
            "Master RPCs answered with a non-OK status",
            ["rpc", "code"],
            registry=r,
        )
        self.route_put = Counter(
            "mori_umbp_client_route_put_total", "Total RoutePut calls targeting client", ["node"], registry=r
        )
        self.route_get = Counter(
            "mori_umbp_client_route_get_total", "Total RouteGet hits served by client", ["node"], registry=r
        )
        self.lookup = Counter(
            "mori_umbp_client_lookup_total", "Total Lookup (exists) hits for keys on client", ["node"], registry=r
        )
        self.batch_route_put = Counter(
            "mori_umbp_client_batch_route_put_total",
            "Total BatchRoutePut entries targeting client",
            ["node"],
            registry=r,
        )
        self.batch_route_get = Counter(
            "mori_umbp_client_batch_route_get_total", "Total BatchRouteGet hits served by client", ["node"], registry=r
        )
        self.route_put_outcome = Counter(
            "mori_umbp_route_put_outcome_total",
            "Put routing outcomes (routed, already_exists, unavailable, quota)",
            ["outcome"],
            registry=r,
        )
        self.route_get_misses = Counter(
            "mori_umbp_route_get_miss_total", "Keys a RouteGet/BatchRouteGet did not find", registry=r
        )
        self.cap_total = Gauge(
            "mori_umbp_client_capacity_total_bytes", "Total capacity bytes", ["node", "tier"], registry=r
        )
        self.cap_avail = Gauge(
            "mori_umbp_client_capacity_available_bytes", "Available capacity bytes", ["node", "tier"], registry=r
        )
        self.cap_used = Gauge(
            "mori_umbp_client_capacity_used_bytes",
            "Used capacity bytes (total - available)",
            ["node", "tier"],
            registry=r,
        )
        self.cap_util = Gauge(
            "mori_umbp_client_capacity_utilization_ratio",
            "Capacity utilization ratio (used / total) in [0,1]",
            ["node", "tier"],
            registry=r,
        )
        self.client_count = Gauge(
            "mori_umbp_client_count", "Number of alive clients registered with the master", registry=r
        )
        self.kv_live = Gauge(
            "mori_umbp_client_kv_live_count",
            "Live KV key count owned by this client, reported by the client (per tier)",
            ["node", "tier"],
            registry=r,
        )
        self.kv_live_total = Gauge(
            "mori_umbp_client_kv_live_count_total",
            "Total live KV key count owned by this client (sum across tiers)",
            ["node"],
            registry=r,
        )
        self.hb_events = Counter(
            "mori_umbp_heartbeat_events_applied_total", "KvEvents applied to the block index via heartbeat", registry=r
        )
        self.hb_seq_gap = Counter(
            "mori_umbp_heartbeat_seq_gap_total", "Heartbeats rejected due to seq gap (full sync requested)", registry=r
        )
        self.ext_report = Counter(
            "mori_umbp_external_kv_report_total",
            "Total number of ReportExternalKvBlocks API calls received by the master",
            registry=r,
        )
        self.ext_revoke = Counter(
            "mori_umbp_external_kv_revoke_total",
            "Total number of RevokeExternalKvBlocks API calls received by the master",
            registry=r,
        )
        self.ext_match = Counter(
            "mori_umbp_external_kv_match_total",
            "Total number of MatchExternalKv API calls received by the master",
            registry=r,
        )
        self.ext_report_blocks = Counter(
            "mori_umbp_external_kv_report_blocks_total",
            "Total number of KV blocks received across all ReportExternalKvBlocks calls",
            registry=r,
        )
        self.ext_revoke_blocks = Counter(
            "mori_umbp_external_kv_revoke_blocks_total",
            "Total number of KV blocks revoked across all RevokeExternalKvBlocks calls",
            registry=r,
        )
        self.ext_match_queried = Counter(
            "mori_umbp_external_kv_match_queried_blocks_total",
            "Total number of KV blocks queried across all MatchExternalKv calls",
            registry=r,
        )
        self.ext_match_matched = Counter(
            "mori_umbp_external_kv_match_matched_blocks_total",
            "Total number of KV blocks matched across all MatchExternalKv calls",
            registry=r,
        )
        self.evict_requested = Counter(
            "mori_umbp_master_evict_keys_requested_total",
            "Keys the eviction manager asked peers to evict",
            ["node", "tier"],
            registry=r,
        )
        self.evict_freed = Counter(
            "mori_umbp_master_evict_bytes_freed_total",
            "Bytes peers reported freed by master-driven eviction",
            ["node", "tier"],
            registry=r,
        )
        self.reaped = Counter(
            "mori_umbp_master_clients_reaped_total",
            "Clients dropped (with their keys) after missing heartbeats",
            registry=r,
        )
        self.auth_refused = Counter(
            "mori_umbp_master_auth_refused_total",
            "RPCs refused for a missing, wrong, stale or replayed signature",
            registry=r,
        )
        self.reported = _ReportedMetrics()
        r.register(self.reported)
        self._server = None

    def watch_external_kv(self, counts) -> None:
        """Export the live external-KV block count per node, from ``counts()`` at scrape time."""
        self.registry.register(_LiveExternalKv(counts))

    def set_capacity(self, node_id: str, tier: int, total: int, available: int) -> None:
        t = tier_label(tier)
        self.cap_total.labels(node_id, t).set(total)
        self.cap_avail.labels(node_id, t).set(available)
        self.cap_used.labels(node_id, t).set(max(total - available, 0))
        self.cap_util.labels(node_id, t).set((total - available) / total if total else 0.0)

    def rpc_latency_of(self, rpc: str):
        """The latency histogram's child for ``rpc``, looked up once (label lookups cost more
        than the observation)."""
        child = self._rpc_latency_children.get(rpc)
        if child is None:
            child = self._rpc_latency_children[rpc] = self.rpc_latency.labels(rpc)
        return child

    def before_scrape(self, hook) -> None:
        """``hook()`` runs at every scrape before the families are read."""
        self._before_scrape.hooks.append(hook)

    def forget_node(self, node_id: str) -> None:
        for g in (self.cap_total, self.cap_avail, self.cap_used, self.cap_util, self.kv_live):
            for t in ("hbm", "dram", "ssd", "unknown"):
                try:
                    g.remove(node_id, t)
                except KeyError:
                    pass
        try:
            self.kv_live_total.remove(node_id)
        except KeyError:
            pass

    def serve(self, port: int, addr: str = "0.0.0.0") -> Optional[int]:
        """Start the /metrics HTTP endpoint; returns the bound port (port 0: any free one)."""
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        self._server = server
        return server.server_port

    def shutdown(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server = None
