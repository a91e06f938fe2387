# SPDX-License-Identifier: MIT
"""The UMBP master process: gRPC server, background duties (reaper, hit-counter GC, eviction),
Prometheus endpoint. ``umbp_master [listen_address] [metrics_port]`` runs one."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent import futures
from typing import Optional, Sequence

import grpc

from mori.core.env import setting
from mori.umbp.distributed.grpc_servers import SERVER_NAMES, GrpcDispatcher, cpp_server, server_kind
from mori.umbp.distributed.master_metrics import MasterMetrics
from mori.umbp.distributed.master_peers import PeerChannels
from mori.umbp.distributed.master_routing import room_tuples
from mori.umbp.distributed.master_service import (
    MasterState,
    UMBPMasterAdminServicer,
    UMBPMasterServicer,
    admin_grpc,
    admin_pb,
    pb,
    pb_grpc,
)
from mori.umbp.distributed.master_settings import MasterSettings
from mori.umbp.distributed.master_store import MetadataStore
from mori.umbp.distributed.master_store_memory import InMemoryMetadataStore

log = logging.getLogger("mori.umbp.master")


def make_store(settings: MasterSettings, redis_settings=None) -> MetadataStore:
    """The store UMBP_METADATA_BACKEND names (redis: from the UMBP_REDIS_* settings unless given)."""
    if settings.metadata_backend == "redis":
        from mori.umbp.distributed.master_store_redis import RedisMetadataStore, RedisSettings

        redis_settings = redis_settings or RedisSettings.from_environment()
        try:
            return RedisMetadataStore(redis_settings)
        except Exception as exc:
            if redis_settings.required:
                raise RuntimeError(
                    f"umbp master: Redis metadata store unreachable ({exc}); "
                    "set UMBP_REDIS_REQUIRED=0 to fall back to memory"
                ) from exc
            log.warning("Redis unreachable (%s): falling back to the in-memory store", exc)
    return InMemoryMetadataStore(settings.index_shards)


def handler_threads_setting() -> int:
    """UMBP_MASTER_HANDLER_THREADS: a count, or ``auto`` (the default): 4 where this process may
    run on 8 or more CPUs, else 2. Over Redis each handler thread waits out one ``EVALSHA`` at a
    time: on a 16-core host 4 of them served 49-52 k RouteGet/s from 8 clients where 2 served
    19-33 k, and 6 or 8 cost more CPU per call and served fewer over four Redis (73-76 k against
    84-85 k on another such host; docs/umbp-master.md)."""
    text = setting("UMBP_MASTER_HANDLER_THREADS").strip().lower()
    if text in ("", "auto"):
        return 4 if len(os.sched_getaffinity(0)) >= 8 else 2
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"UMBP_MASTER_HANDLER_THREADS must be auto or a count >= 0, got {text!r}") from None


class MasterServer:
    """One master: ``start()`` binds and serves, ``stop()`` ends everything it started."""

    def __init__(
        self,
        listen_address: str = "0.0.0.0:50051",
        settings: Optional[MasterSettings] = None,
        store: Optional[MetadataStore] = None,
        metrics_port: Optional[int] = None,
        secret: Optional[bytes] = None,
        max_workers: Optional[int] = None,
        reuse_port: bool = False,
        duties: bool = True,
        server: Optional[str] = None,
        handler_threads: Optional[int] = None,
    ) -> None:
        """``reuse_port``: share the port with sibling master processes (SO_REUSEPORT; they must
        share a Redis store). ``duties``: run the reaper, hit-counter GC and eviction manager
        (one process of such a group does). ``server``: which gRPC server serves the handlers,
        ``cpp`` (grpc++ in this process), ``python`` (grpcio) or ``auto`` (cpp when built);
        default UMBP_MASTER_SERVER. ``max_workers``: the threads polling for calls and answering
        the in-memory routes (grpc++: at most the cores); default UMBP_MASTER_THREADS.
        ``handler_threads``: the grpc++ server's threads for calls that may wait (the Python
        handlers, routes over Redis; 0: those run on the polling threads too); default
        UMBP_MASTER_HANDLER_THREADS. grpcio's server runs both numbers' worth of threads."""
        if max_workers is None:
            max_workers = int(setting("UMBP_MASTER_THREADS"))
        if max_workers < 1:
            raise ValueError(f"UMBP_MASTER_THREADS (max_workers) must be >= 1, got {max_workers}")
        if handler_threads is None:
            handler_threads = handler_threads_setting()
        if handler_threads < 0:
            raise ValueError(f"UMBP_MASTER_HANDLER_THREADS (handler_threads) must be >= 0, got {handler_threads}")
        # In-memory routes whose request is larger run on the handler threads (-1: none do).
        self._inline_bytes = int(setting("UMBP_MASTER_INLINE_BYTES"))
        if self._inline_bytes < -1:
            raise ValueError(f"UMBP_MASTER_INLINE_BYTES must be -1 (none) or >= 0, got {self._inline_bytes}")
        self.settings = settings or MasterSettings.from_environment()
        self.server_kind = server_kind(server)
        self.settings.validate()
        self.listen_address = listen_address
        self.store = store or make_store(self.settings)
        self.metrics = MasterMetrics()
        self.metrics.watch_external_kv(self.store.external_kv.live_counts)
        self.peers = PeerChannels(secret)
        self.state = MasterState(self.store, self.settings, self.metrics, self.peers)
        self._metrics_port = metrics_port
        self._secret = secret
        self._max_workers = max_workers
        self._handler_threads = handler_threads
        self._reuse_port = reuse_port
        self._duties = duties
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._server = None  # grpc.Server or mori.umbp._master_server.MasterGrpcServer
        # mori.umbp._master_server.NativeRoutes when BatchRouteGet and RouteGet run in C++
        self.native_routes = None
        self.port = 0
        self.metrics_port: Optional[int] = None

    def start(self) -> int:
        verifier = None
        if self._secret is not None:
            from mori.umbp.distributed.master_auth import VerifyingInterceptor

            verifier = VerifyingInterceptor(
                self._secret,
                self.settings.auth_window_ms / 1000.0,
                on_refused=lambda why: self.metrics.auth_refused.inc(),
            )
        master = UMBPMasterServicer(self.state)
        admin = UMBPMasterAdminServicer(self.state)
        if self.server_kind == "cpp":
            dispatch = GrpcDispatcher()
            dispatch.add(master, pb.DESCRIPTOR.services_by_name["UMBPMaster"], pb)
            dispatch.add(admin, admin_pb.DESCRIPTOR.services_by_name["UMBPMasterAdmin"], admin_pb)
            server = cpp_server().MasterGrpcServer(
                self.listen_address,
                dispatch,
                workers=self._max_workers,
                reuse_port=self._reuse_port,
                max_message_bytes=256 << 20,
            )
            server.set_handler_threads(self._handler_threads)
            if self._inline_bytes >= 0:
                server.set_inline_bytes(self._inline_bytes)
            if verifier is not None:  # every call checked in C++ first, natively routed or not
                server.verify_calls(verifier.verifier, dispatch.methods, verifier.on_refused)
            self._route_natively(server)
            try:
                self.port = server.start()
            except Exception as exc:  # noqa: BLE001 - mori's error says why; this names the address
                raise OSError(f"umbp master: cannot listen on {self.listen_address} ({exc})") from None
        else:
            server = grpc.server(
                futures.ThreadPoolExecutor(max_workers=max(2, self._max_workers + self._handler_threads)),
                interceptors=[verifier] if verifier is not None else [],
                options=[
                    ("grpc.max_receive_message_length", 256 << 20),
                    ("grpc.max_send_message_length", 256 << 20),
                    ("grpc.so_reuseport", 1 if self._reuse_port else 0),
                ],
            )
            pb_grpc.add_UMBPMasterServicer_to_server(master, server)
            admin_grpc.add_UMBPMasterAdminServicer_to_server(admin, server)
            self.port = server.add_insecure_port(self.listen_address)
            if self.port == 0:
                raise OSError(f"umbp master: cannot listen on {self.listen_address}")
            server.start()
        self._server = server
        if self._metrics_port is not None:
            self.metrics_port = self.metrics.serve(self._metrics_port)
        if self._duties:
            self._every(self.settings.reaper_interval_s, self._reap, "umbp-reaper")
            self._every(self.settings.hit_index_gc_interval_s, self._gc_hits, "umbp-hit-gc")
            self.state.eviction.start()
        log.info(
            "umbp master on %s (port %d), %s gRPC server, store %s, get path in %s, metrics %s",
            self.listen_address,
            self.port,
            SERVER_NAMES[self.server_kind],
            type(self.store).__name__,
            "C++" if self.native_routes is not None else "Python",
            self.metrics_port,
        )
        return self.port

    def _route_natively(self, server) -> None:
        """BatchRouteGet and RouteGet answered in C++ by the grpc++ server, signed or not (the
        server checks signatures first), from the in-memory store's native index or the Redis
        store's scripts (``RedisMetadataStore.native_routes``, when it can: hiredis built, no
        cluster); BatchLookup and BatchRoutePut too (existence from the index, or by EXISTS over
        Redis), and workers' PlaceFeed polls. Their route counters and latencies are added to the
        metrics at each scrape."""
        mod = cpp_server()
        if not mod.HAVE_NATIVE_ROUTES:
            return
        if isinstance(self.store, InMemoryMetadataStore):
            source = self.store.native_index
        else:
            source = getattr(self.store, "native_routes", lambda _mod: None)(mod)
            if source is None:
                return
        state = self.state
        bounds = list(self.metrics.rpc_latency_of("BatchRouteGet")._upper_bounds)
        self.native_routes = native = mod.NativeRoutes(
            source,
            self.settings.lease_duration_s,
            state.get_router.strategy == "random",
            bounds,
            lambda: room_tuples(state.alive(0).values()),
        )
        native.set_pending(state.pending)  # misses of pending puts stay the Python handler's
        # Puts too, by the master's one PutRoutes; with per-engine quotas they are Python's.
        native.set_puts(state.put_router.native, state.pending_ttl_s)
        state.quotas.when_set(lambda: native.set_python_puts(True))
        if state.place_feed.native is not None:  # workers' polls, without the interpreter lock
            native.set_place_feed(state.place_feed.native)
        server.route_natively(native, may_wait=not isinstance(self.store, InMemoryMetadataStore))
        # BatchLookup (in memory only: existence, no route) counts its latency alone.
        counters = {
            "BatchRouteGet": self.metrics.batch_route_get,
            "RouteGet": self.metrics.route_get,
            "BatchLookup": None,
            "BatchRoutePut": self.metrics.batch_route_put,
            "PlaceFeed": None,
        }

        def drain() -> None:
            for rpc, counter in counters.items():
                hits, buckets, latency_sum, answered, misses, outcomes = native.drain(rpc)
                for node_id, n in hits.items():
                    counter.labels(node_id).inc(n)
                if misses and counter is not None:
                    self.metrics.route_get_misses.inc(misses)
                for outcome, n in outcomes.items():
                    if n:
                        self.metrics.route_put_outcome.labels(outcome).inc(n)
                if answered:
                    # The histogram has no public way to add counts bucket for bucket.
                    latency = self.metrics.rpc_latency_of(rpc)
                    for value, n in zip(latency._buckets, buckets):
                        if n:
                            value.inc(n)
                    latency._sum.inc(latency_sum)

        self.metrics.before_scrape(drain)

    def _every(self, interval: float, fn, name: str) -> None:
        def loop():
            while not self._stop.wait(interval):
                try:
                    fn()
                except Exception:  # noqa: BLE001 - a failed round must not end the duty
                    log.exception("%s round failed", name)

        t = threading.Thread(target=loop, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _reap(self) -> None:
        dead = self.store.reap_expired(time.time(), self.settings.expiry_s)
        if dead:
            log.warning("dropped clients that missed their heartbeats: %s", ", ".join(dead))
            self.metrics.reaped.inc(len(dead))
            for node_id in dead:
                self.metrics.forget_node(node_id)
                self.state.put_router.forget(node_id)
            self.state.invalidate_clients()
        self.metrics.client_count.set(len(self.state.alive(0)))

    def _gc_hits(self) -> None:
        self.store.external_kv.drop_stale_hits(time.time(), self.settings.hit_index_ttl_s)

    def wait(self) -> None:
        if self._server is not None:
            if self.server_kind == "cpp":
                self._server.wait()
            else:
                self._server.wait_for_termination()

    def route_get_batches(self) -> tuple[int, int]:
        """(batches, calls): the RouteGets the grpc++ server answered together over Redis, a
        batch per round trip, since the start (``MasterGrpcServer.set_native_batch``); (0, 0)
        from another server or store."""
        if self.server_kind != "cpp" or self._server is None:
            return (0, 0)
        batches, calls = self._server.batch_counts("/umbp.UMBPMaster/RouteGet")
        return (int(batches), int(calls))

    def stop(self, grace: float = 1.0) -> None:
        self._stop.set()
        self.state.eviction.stop()
        if self._server is not None:
            if self.server_kind == "cpp":
                self._server.stop(grace)
            else:
                self._server.stop(grace).wait()
            self._server = None
        for t in self._threads:
            t.join(timeout=5)
        self.metrics.shutdown()
        self.peers.close()
        self.store.close()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``umbp_master [listen_address] [metrics_port]`` (MORI's command line)."""
    from mori.core.env import parse_size, setting

    p = argparse.ArgumentParser(prog="umbp_master", description="MORI-UMBP master (gRPC umbp.UMBPMaster)")
    p.add_argument(
        "listen_address",
        nargs="?",
        default=None,
        help="host:port to serve on (default UMBP_MASTER_LISTEN, 0.0.0.0:50051)",
    )
    p.add_argument(
        "metrics_port",
        nargs="?",
        type=int,
        default=None,
        help="Prometheus port (default UMBP_MASTER_METRICS_PORT, 9091; 0: none)",
    )
    p.add_argument(
        "--quota",
        action="append",
        default=[],
        metavar="ENGINE=BYTES",
        help="a per-engine byte quota (repeatable; one process only)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="master processes sharing the port (SO_REUSEPORT); needs UMBP_METADATA_BACKEND=redis. "
        "Worker i serves metrics on metrics_port + i",
    )
    p.add_argument("--worker-index", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s umbp_master %(levelname)s %(message)s")
    listen = args.listen_address or str(setting("UMBP_MASTER_LISTEN"))
    metrics_port = args.metrics_port if args.metrics_port is not None else int(setting("UMBP_MASTER_METRICS_PORT"))
    if args.workers < 1:
        p.error(f"--workers must be >= 1, got {args.workers}")
    if args.workers > 1 and str(setting("UMBP_METADATA_BACKEND")) != "redis":
        p.error("--workers > 1 needs UMBP_METADATA_BACKEND=redis (the processes share the store)")
    if args.workers > 1 and args.quota:
        p.error("--quota counts live in one process: use it with --workers 1")
    secret_hex = str(setting("MORI_JOB_SECRET"))
    secret = None
    if secret_hex:
        from mori.umbp.distributed.master_auth import secret_from_hex

        secret = secret_from_hex(secret_hex)
    group = args.workers > 1 or args.worker_index > 0
    server = MasterServer(
        listen,
        metrics_port=metrics_port + args.worker_index if metrics_port > 0 else None,
        secret=secret,
        reuse_port=group,
        duties=args.worker_index == 0,
    )
    for q in args.quota:
        engine, _, size = q.partition("=")
        server.state.quotas.set_quota(engine, parse_size(size))
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    server.start()
    children = []
    for i in range(1, args.workers):
        children.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "mori.umbp.distributed.master_server",
                    listen,
                    str(metrics_port),
                    "--worker-index",
                    str(i),
                ]
            )
        )
    print(
        f"umbp_master listening on {listen} (port {server.port})"
        + (f", {args.workers} processes" if args.workers > 1 else "")
        + (f", metrics on :{server.metrics_port}" if server.metrics_port else "")
        + (", signed RPCs required" if secret else "")
        + f", {SERVER_NAMES[server.server_kind]} gRPC server",
        flush=True,
    )
    while not done.wait(0.5):
        if any(c.poll() is not None for c in children):
            log.error("a master worker process exited; stopping")
            break
    for c in children:
        if c.poll() is None:
            c.send_signal(signal.SIGTERM)
    for c in children:
        try:
            c.wait(10)
        except subprocess.TimeoutExpired:
            c.kill()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
