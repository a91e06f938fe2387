# SPDX-License-Identifier: MIT
"""The distributed UMBPClient (``UMBPConfig.distributed`` set): one worker's view of the pool.

It is the local store of the pages this worker OWNS (part 1's DRAM + SSD tiers, with the peer
hooks of umbp/src/peer_pages.h), plus:

- a routing layer: puts go where the master's ``BatchRoutePut`` says (this worker: a local put;
  another: ``BatchAllocateSlots`` there naming where the values lie in this worker's registered
  memory or staging buffer, and the owner reads them through MORI-IO and commits them in that
  call; an owner that does not pull gets a MORI-IO write and ``BatchCommitSlots``); gets are
  served locally when this worker owns the key, otherwise ``BatchRouteGet`` names the owner and,
  for DRAM values, their place in its arena and checksum, and MORI-IO reads them into the
  caller's memory (zero copy when it was ``register_memory``'d, else through a staging buffer);
  values of unknown or stale place are resolved at the owner first (``BatchResolveKeys``); keys
  only on the owner's SSD are staged there first (``PrepareSsdRead``, ``NO_SLOT`` retried; a
  value larger than one staging slot takes adjacent slots, one larger than the owner's whole
  ``ssd_staging_buffer_size`` is a miss, logged with that setting).
  Every value read from a peer is verified against its XXH3 checksum; a mismatch is a miss.
  Values fetched from peers are cached locally per ``cache_remote_fetches`` and its admission;
- the ``UMBPPeer`` service (peer_service.py) on ``peer_service_port``, from a thread pool;
- a heartbeat thread that ships the store's key events (ADD/REMOVE per tier, evictions
  included) to the master in sequenced bundles, and a full snapshot when the master saw a gap
  or lost this worker (a restarted master rebuilds its index from these).

Every RPC has a deadline (UMBP_LOOKUP_TIMEOUT_MS): a dead or hung master turns lookups into
misses (the keys this worker owns are still served) and puts into local puts; a dead peer is a
miss, logged with its node id and address, never a hang (a call sends nothing more to a peer
after one failed transfer, and holds it off). A put costs its writer one master RPC: the owner's
ADD events go in the heartbeat its commit wakes, and until they land the master answers gets and
lookups of the new keys from the put's route, so a get routed anywhere after the put returns
finds them.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import logging
import os
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from mori import _C
from mori.core.errors import InvalidArgument
from mori.umbp.distributed.grpc_channels import Channel
from mori.umbp.proto import require

pb = require("umbp_pb2")
admin_pb = require("umbp_admin_pb2")
peer_pb = require("umbp_peer_pb2")
peer_grpc = require("umbp_peer_pb2_grpc")

log = logging.getLogger("mori.umbp.distributed")

_Native = _C.umbp.UMBPClient  # the native class: its methods serve the owned pages
_MAX_KEY = 4032
_QUOTA_LOG_INTERVAL_S = 10.0  # at most one quota warning per engine this often
# Commits wake the heartbeat thread at most this often; the master answers reads of keys put
# meanwhile from the puts' routes (its pending puts), so a reader does not miss them.
_SHIP_GAP_S = 0.002


# Peers a put or get reaches side by side (the rest queue behind them).
_PEER_CALLS = 8


def _checksum(ptr: int, size: int) -> int:
    # A value read into GPU memory is hashed on a host copy (the bytes reached the device by the
    # copy engine or io/'s staged tcp, past any host pass of ours).
    device = _C.umbp.pointer_device(ptr)
    if device >= 0:
        return _C.umbp.device_value_checksum(ptr, size, device)
    return _C.umbp.value_checksum(ptr, size)


@dataclass
class _Peer:
    """What this worker knows of another: its RPC stub and its published memory."""

    node_id: str
    address: str
    stub: object
    channel: object
    arena: object = None  # MemoryDesc of its DRAM arena
    staging: object = None  # MemoryDesc of its SSD staging buffer (None: no SSD tier)
    staging_size: int = 0  # its bytes: the largest value it stages for a reader
    hbm: object = None  # MemoryDesc of its HBM arena (GPU memory; None: none)


# Locations remembered per reader (LRU beyond this; _C.umbp.UMBPLocationCache): where a key's
# value lay on its owner when this worker last read it under a read lease (owner, arena offset,
# size, checksum), used again with no RPC until the lease runs out (a margin before); ~200 bytes each.
_LOCATION_CACHE_ENTRIES = 1 << 16
# A cached location is used for this fraction of the read lease, counted from before the
# resolve was sent: the rest covers the read itself.
_LOCATION_LEASE_FRACTION = 0.8
# The place feed's poll waits up to this many UMBP_PLACE_FEED_MS periods while nothing comes.
_FEED_IDLE_FACTOR = 10


@dataclass
class _TransferRun:
    """One _transfer call: its deadline and its first failure (nothing more is sent after it)."""

    deadline: float  # time.monotonic()
    failure: Optional[str] = None


@dataclass
class _Region:
    ptr: int
    size: int
    desc: object
    packed: bytes = b""  # desc.pack(): named to owners that pull a put's values from here


@dataclass
class DistributedStats:
    """Counters of the routing layer (merged into ``stats()``)."""

    remote_puts: int = 0
    pulled_puts: int = 0  # of remote_puts: read by their owner in the allocate call (no write, no commit RPC)
    remote_put_bytes: int = 0
    remote_gets: int = 0
    remote_get_bytes: int = 0
    remote_misses: int = 0
    remote_checksum_failures: int = 0
    remote_errors: int = 0
    master_errors: int = 0
    remote_fetches_cached: int = 0
    location_cache_hits: int = 0
    location_cache_stale: int = 0
    location_cache_on_arrival: int = 0  # of location_cache_hits: checked by checksums hashed as the bytes landed
    routed_location_reads: int = 0  # first reads at the place the master's route gave (no resolve)
    routed_location_stale: int = 0  # ... that failed their checksum or the read: resolved instead
    fed_places: int = 0  # places the master's place feed gave (UMBP_PLACE_FEED_MS), remembered for reads
    fed_removals: int = 0  # ... and values it said left their owner's DRAM, forgotten
    full_syncs: int = 0
    heartbeats: int = 0
    quota_refused_puts: int = 0


def _host_of(address: str) -> str:
    host = address.rsplit(":", 1)[0] if ":" in address else address
    return host.strip("[]") or "127.0.0.1"


# A reply's places of one owner as columns: keys, arena offsets, sizes, checksums.
_Places = tuple[list, list, list, list]


def _feed_columns(resp) -> tuple[list[str], dict[int, _Places]]:
    """A PlaceFeedResponse as (keys that left, {node ref: the places to remember}). The last word
    on each key wins (a value may come and go within one slice). Added places without a checksum
    or with no owner listed are left out. Done with numpy over the reply's columns, not key by
    key: the worker's feed thread holds the interpreter lock a third as long for a large reply."""
    keys = list(resp.keys)
    n = len(keys)
    if n == 0:
        return [], {}
    added = np.fromiter(resp.added, dtype=bool, count=n)
    if len(set(keys)) < n:  # a key repeated: keep its last entry only
        last = {k: i for i, k in enumerate(keys)}
        latest = np.zeros(n, dtype=bool)
        latest[list(last.values())] = True
    else:
        latest = np.ones(n, dtype=bool)
    refs = np.fromiter(resp.node_ref, dtype=np.int64, count=n)
    checksums = np.fromiter(resp.checksum, dtype=np.uint64, count=n)
    gone = [keys[i] for i in np.flatnonzero(latest & ~added).tolist()]
    keep = np.flatnonzero(latest & added & (checksums != 0) & (refs > 0) & (refs <= len(resp.nodes)))
    by_ref: dict[int, _Places] = {}
    if keep.size:
        offsets = np.fromiter(resp.offset, dtype=np.uint64, count=n)
        sizes = np.fromiter(resp.size, dtype=np.uint64, count=n)
        order = keep[np.argsort(refs[keep], kind="stable")]
        for part in np.split(order, np.flatnonzero(np.diff(refs[order])) + 1):
            at = part.tolist()
            by_ref[int(refs[part[0]])] = (
                [keys[i] for i in at],
                offsets[part].tolist(),
                sizes[part].tolist(),
                checksums[part].tolist(),
            )
    return gone, by_ref


def _check_batch(what: str, keys, ptrs, sizes) -> None:
    if isinstance(keys, (str, bytes)):
        raise InvalidArgument(f"{what}: keys must be a list of strings, not one string")
    if not (len(keys) == len(ptrs) == len(sizes)):
        raise InvalidArgument(f"{what}: keys, ptrs and sizes differ in length ({len(keys)}, {len(ptrs)}, {len(sizes)})")
    # The common case in bulk (a get's whole Python path is a few microseconds): keys of at most
    # _MAX_KEY / 4 characters fit in _MAX_KEY UTF-8 bytes; the loop below names what is wrong.
    if (
        not keys
        or all(keys)
        and all(ptrs)
        and min(sizes) > 0
        and max(map(len, keys)) <= _MAX_KEY // 4
        and all(isinstance(k, str) for k in keys)
    ):
        return
    for k, p, s in zip(keys, ptrs, sizes):
        if not k or len(k.encode()) > _MAX_KEY:
            raise InvalidArgument(f"{what}: key {k[:64]!r} must be 1..{_MAX_KEY} bytes")
        if not p:
            raise InvalidArgument(f"{what}: ptr of key {k[:64]!r} is null")
        if int(s) <= 0:
            raise InvalidArgument(f"{what}: size of key {k[:64]!r} must be > 0")


from mori.umbp import UMBPClient as _UMBPClient  # noqa: E402


class DistributedUMBPClient(_UMBPClient):
    """``mori.umbp.UMBPClient(config)`` when ``config.distributed`` is set (same API)."""

    def __init__(self, config) -> None:
        from mori.core.env import setting
        from mori.io import BackendType, IOEngine, IOEngineConfig, MemoryLocationType

        d = config.distributed
        config.validate()
        self._lookup_only = config.dram.capacity_bytes == 0
        if self._lookup_only and d.hbm.total_bytes():
            raise InvalidArgument(
                "distributed.hbm: a lookup-only node (dram.capacity_bytes = 0) owns no pages; "
                "unset distributed.hbm.capacity_bytes / buffer_sizes or give it DRAM"
            )
        if self._lookup_only:
            self._init_lookup_only(config)
            return
        _Native.__init__(self, config, True)  # the owned pages
        mc = d.master_config
        self._config = config
        self._node_id = mc.node_id
        self._timeout_s = int(setting("UMBP_LOOKUP_TIMEOUT_MS")) / 1000.0
        self._transfer_timeout_ms = int(setting("UMBP_CALL_TIMEOUT_MS"))
        self._dram_lease_ms = int(setting("UMBP_DRAM_READ_LEASE_MS"))
        self._ssd_lease_ms = int(setting("UMBP_SSD_READ_LEASE_MS"))
        # Lease releases in flight: grpc cancels a call whose future is garbage collected, so
        # each is held here until it is answered (a dropped one left its slots leased until expiry).
        self._releases: set = set()
        self._flush_threshold = 128  # MORI's UMBP_AUTO_FLUSH_EVENT_THRESHOLD default
        secret_hex = str(setting("MORI_JOB_SECRET"))
        self._secret: Optional[bytes] = None
        if secret_hex:
            from mori.umbp.distributed.master_auth import secret_from_hex

            self._secret = secret_from_hex(secret_hex)
        self._cache_remote = bool(d.cache_remote_fetches)
        self._admission = int(d.cache_remote_admission)  # SIZE 0, NEVER 1, ALWAYS 2
        self._admission_max = int(d.admission_max_block_bytes)
        self.dstats = DistributedStats()
        self._stats_lock = threading.Lock()
        self._quota_log_next = 0.0
        self._quota_refused_unlogged = 0
        self._locations = _C.umbp.UMBPLocationCache(_LOCATION_CACHE_ENTRIES)
        self._closed = False

        # -- data plane: one engine, the arena and the staging buffers registered on it --------
        host = d.io_engine.host or _host_of(mc.node_address)
        self._engine = IOEngine(
            f"umbp-{self._node_id}-{os.getpid()}-{uuid.uuid4().hex[:8]}", IOEngineConfig(host, int(d.io_engine.port))
        )
        self._native_engine = self._engine._engine  # the native engine the located read drives
        self._engine.create_backend(BackendType.RDMA)  # tcp between hosts, direct on one host
        self._cpu = MemoryLocationType.CPU
        arena_ptr, arena_size, staging_ptr, staging_size, self._ssd_slot = self.peer_arena()
        self._arena_desc = self._engine.register_memory(arena_ptr, arena_size, -1, self._cpu)
        self._ssd_staging_desc = (
            self._engine.register_memory(staging_ptr, staging_size, -1, self._cpu) if staging_size else None
        )
        self._alloc = _C.umbp.UMBPHostMemAllocator()
        self._staging = self._alloc.alloc(int(d.staging_buffer_size))  # for unregistered caller memory
        self._staging_desc = self._engine.register_memory(self._staging.ptr, int(d.staging_buffer_size), -1, self._cpu)
        self._staging_lock = threading.Lock()
        # Calls to several peers in one put or get run side by side (see _each_peer).
        self._peer_calls: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._peer_calls_lock = threading.Lock()
        self._staging_packed = self._staging_desc.pack()
        # The HBM pages (distributed.hbm): GPU memory on their device, registered as such; io/
        # picks the path (CUDA IPC + copy engine between engines of one node, else tcp staged
        # through pinned host buffers), for which the CUDA IPC backend is made here too.
        hbm_ptr, hbm_size, hbm_device = self.peer_hbm_arena()
        self._hbm_desc = None
        self._gpu_backend = False
        if hbm_size:
            self._ensure_gpu_backend()
            self._hbm_desc = self._engine.register_memory(hbm_ptr, hbm_size, hbm_device, MemoryLocationType.GPU)
        self._gpu = MemoryLocationType.GPU
        self._regions: list[_Region] = []
        self._regions_lock = threading.Lock()
        self._peers: dict[str, _Peer] = {}
        self._peers_lock = threading.Lock()

        # -- the peer service ----------------------------------------------------------------
        from mori.umbp.distributed.peer_service import PeerDescriptors, PeerServer, PeerService

        self._engine_desc = self._engine.get_engine_desc().pack()
        descs = PeerDescriptors(
            engine_desc=self._engine_desc,
            arena_desc=self._arena_desc.pack(),
            staging_desc=self._ssd_staging_desc.pack() if self._ssd_staging_desc else b"",
            staging_size=staging_size,
            hbm_desc=self._hbm_desc.pack() if self._hbm_desc is not None else b"",
        )
        service = PeerService(
            self,
            descs,
            self._dram_lease_ms,
            self._ssd_lease_ms,
            on_commit=self._ship_async,
            register_engine=self._register_engine,
            pull=self._pull,
        )
        # The heartbeat thread's wake-up: commits set it, from Python or from the native put path.
        self._wake = _C.umbp.Wakeup()
        # Pulled puts into the DRAM arena, served in C++ by the grpc++ peer server once a writer's
        # buffer is known (the Python service unpacks it the first time: _pull).
        self._peer_puts = _C.umbp.PeerPuts(
            self, self._native_engine, self._arena_desc, self._wake, self._transfer_timeout_ms
        )
        peer_host = host if host not in ("0.0.0.0", "") else "127.0.0.1"
        self._server = PeerServer(
            service,
            "0.0.0.0" if host == "0.0.0.0" else peer_host,
            int(d.peer_service_port),
            secret=self._secret,
            pull_puts=self._peer_puts,
        )
        self.peer_address = f"{peer_host}:{self._server.port}"

        # -- the control plane -----------------------------------------------------------------
        from mori.umbp.distributed.master_client import UMBPMasterClient

        self._master = UMBPMasterClient(
            mc.master_address,
            mc.node_id,
            mc.node_address,
            lookup_timeout_ms=int(self._timeout_s * 1000),
            secret_hex=secret_hex or "",
            peer_address=self.peer_address,
        )
        self._tags = list(mc.tags)
        self._hb_lock = threading.Lock()  # one heartbeat at a time
        self._bundle_seq = 0
        self._unacked: list = []
        self._registered = False
        self._need_full_sync = True
        self._drop_next_bundle = False  # tests: lose a bundle on the way (the master must ask a full sync)
        self._hb_interval_s = 1.0
        self._master_backoff_until = 0.0  # monotonic time until which the master is not asked
        self._backoff_s = min(5.0, max(1.0, 2 * self._timeout_s))
        self._peers_down: dict[str, float] = {}  # node id -> monotonic time it may be dialled again
        self._stop = threading.Event()
        try:
            self._register()
        except Exception as exc:  # a master that is down now is retried by the heartbeat thread
            log.warning(
                "umbp %s: master %s unreachable at start (%s): serving locally until it answers",
                self._node_id,
                mc.master_address,
                exc,
            )
        self._hb_thread = threading.Thread(target=self._heartbeat_loop, name=f"umbp-hb-{self._node_id}", daemon=True)
        if mc.auto_heartbeat:
            self._hb_thread.start()
        # The master's place feed (master_place_feed.py), polled into the location cache: a first
        # get of a key another worker put is then one read from its owner, with no route.
        self._feed_period_s = int(setting("UMBP_PLACE_FEED_MS")) / 1000.0
        self._feed_horizon_s = int(setting("UMBP_PLACE_FEED_HORIZON_MS")) / 1000.0
        self._feed_id = 0
        self._feed_seq = 0
        self._feed_lock = threading.Lock()
        self._feed_active = False  # a call was made since the last poll
        self._feed_idle = False  # the poll waits longer than its period (a call wakes it)
        self._feed_wake = threading.Event()
        self._feed_thread: Optional[threading.Thread] = None
        if self._feed_period_s > 0 and self._feed_horizon_s > 0:
            self._feed_thread = threading.Thread(target=self._feed_loop, name=f"umbp-feed-{self._node_id}", daemon=True)
            self._feed_thread.start()

    def _init_lookup_only(self, config) -> None:
        """dram.capacity_bytes == 0 (vLLM's scheduler client): no pages, no IO engine, no peer
        service, not registered: it answers batch_exists / batch_exists_consecutive from the
        master. Puts are refused (False) and gets miss."""
        from mori.core.env import setting
        from mori.umbp.distributed.master_client import UMBPMasterClient

        empty = _C.umbp.UMBPConfig()  # the native base: a one-page store nothing is put into
        empty.dram.capacity_bytes = 1 << 16
        empty.dram.prefault = False
        empty.ssd.enabled = False
        _Native.__init__(self, empty)
        mc = config.distributed.master_config
        self._config = config
        self._node_id = mc.node_id
        self._closed = False
        self.dstats = DistributedStats()
        self._stats_lock = threading.Lock()
        self._quota_log_next = 0.0
        self._quota_refused_unlogged = 0
        self._master = UMBPMasterClient(
            mc.master_address, mc.node_id, mc.node_address, lookup_timeout_ms=int(setting("UMBP_LOOKUP_TIMEOUT_MS"))
        )
        self._master_backoff_until = 0.0
        self._backoff_s = 1.0
        self._peers_down: dict[str, float] = {}
        self.peer_address = ""

    # ---------------------------------------------------------------------------------------
    # control plane
    # ---------------------------------------------------------------------------------------
    def _capacities(self) -> list:
        s = _Native.stats(self)
        # The DRAM tier evicts its LRU values to make room by itself: what it can take is all but
        # what is pinned (being read or written, or waiting for its SSD copy).
        caps = [
            pb.TierCapacity(
                tier=pb.TIER_DRAM,
                total_capacity_bytes=s["dram_capacity_bytes"],
                available_capacity_bytes=max(0, s["dram_capacity_bytes"] - s["dram_pinned_bytes"]),
                max_allocatable_bytes=s["dram_capacity_bytes"],
            )
        ]
        hbm_cap, hbm_used, _pinned, _keys, _ev = self.peer_hbm_stats()
        if hbm_cap:
            # Free HBM is what is unused, not what is evictable as for DRAM: a full HBM sends puts
            # on to DRAM (the master routes HBM first) rather than evict hot GPU pages for them.
            # Unused below the high watermark: a slot past it evicts (the page pool's rule), so
            # room above it is no room for a put (4 MiB with 3 MiB used takes no 1 MiB value).
            high = int(hbm_cap * float(self._config.dram.high_watermark))
            caps.append(
                pb.TierCapacity(
                    tier=pb.TIER_HBM,
                    total_capacity_bytes=hbm_cap,
                    available_capacity_bytes=max(0, high - hbm_used),
                    max_allocatable_bytes=hbm_cap,
                )
            )
        if s["ssd_capacity_bytes"]:
            caps.append(
                pb.TierCapacity(
                    tier=pb.TIER_SSD,
                    total_capacity_bytes=s["ssd_capacity_bytes"],
                    available_capacity_bytes=max(0, s["ssd_capacity_bytes"] - s["ssd_used_bytes"]),
                )
            )
        return caps

    def _register(self) -> None:
        with self._hb_lock:
            self._register_inner_locked()

    def _ship(self) -> None:
        """One heartbeat (under _hb_lock): queued events as a new bundle, or a full snapshot."""
        if not self._registered:
            self._register_quietly()
            if not self._registered:
                return
        if self.peer_event_state()[2]:  # events dropped while the master was away
            self._need_full_sync = True
        if self._need_full_sync:
            baseline_seq, keys = self.peer_snapshot()
            self._unacked.clear()  # their changes are in the snapshot
            bundle = pb.EventBundle(
                seq=self._bundle_seq,
                events=[
                    pb.KvEvent(kind=pb.KvEvent.ADD, key=k, tier=int(t), size=z, offset=off, checksum=ck)
                    for k, t, z, off, ck in keys
                ],
            )
            req = pb.HeartbeatRequest(
                node_id=self._node_id,
                bundles=[bundle],
                is_full_sync=True,
                tier_capacities=self._capacities(),
                delta_seq_baseline=self._bundle_seq,
            )
            with self._stats_lock:
                self.dstats.full_syncs += 1
        else:
            events = self.peer_drain_events(0)
            if events:
                self._bundle_seq += 1
                bundle = pb.EventBundle(
                    seq=self._bundle_seq,
                    events=[
                        pb.KvEvent(
                            kind=pb.KvEvent.ADD if kind == 0 else pb.KvEvent.REMOVE,
                            key=k,
                            tier=int(t),
                            size=z,
                            offset=off,
                            checksum=ck,
                        )
                        for kind, k, t, z, _seq, off, ck in events
                    ],
                )
                if self._drop_next_bundle:
                    self._drop_next_bundle = False
                    log.warning("umbp %s: dropping event bundle %d (test hook)", self._node_id, bundle.seq)
                else:
                    self._unacked.append(bundle)
            req = pb.HeartbeatRequest(
                node_id=self._node_id, bundles=self._unacked, is_full_sync=False, tier_capacities=self._capacities()
            )
        try:
            resp = self._master._call("Heartbeat", req)
            self._master_backoff_until = 0.0
        except Exception as exc:
            self._master_backoff_until = time.monotonic() + self._backoff_s
            with self._stats_lock:
                self.dstats.master_errors += 1
            log.debug("umbp %s: heartbeat failed: %s", self._node_id, exc)
            return
        with self._stats_lock:
            self.dstats.heartbeats += 1
        if resp.status == pb.CLIENT_STATUS_UNKNOWN:  # a restarted master, or it expired us
            log.info("umbp %s: the master does not know this worker: registering again", self._node_id)
            self._registered = False
            self._register_quietly()
            return
        if req.is_full_sync:
            self._need_full_sync = False
        if resp.request_full_sync:
            log.info("umbp %s: the master saw a gap in the event bundles: full sync", self._node_id)
            self._need_full_sync = True
            self._ship()
            return
        self._unacked = [b for b in self._unacked if b.seq > resp.acked_seq]

    def _register_quietly(self) -> None:
        try:
            self._register_inner_locked()
        except Exception as exc:
            with self._stats_lock:
                self.dstats.master_errors += 1
            log.debug("umbp %s: registration failed: %s", self._node_id, exc)

    def _register_inner_locked(self) -> None:
        # As _register, called with _hb_lock held: the snapshot goes with the next _ship.
        mc = self._config.distributed.master_config
        req = pb.RegisterClientRequest(
            node_id=self._node_id,
            node_address=mc.node_address,
            tier_capacities=self._capacities(),
            peer_address=self.peer_address,
            engine_desc=self._engine.get_engine_desc().pack(),
            tags=self._tags,
        )
        try:
            resp = self._master._call("RegisterClient", req)
        except Exception as exc:
            if "registered and alive" not in str(exc):
                raise
            self._master._call("UnregisterClient", pb.UnregisterClientRequest(node_id=self._node_id))
            resp = self._master._call("RegisterClient", req)
        if resp.heartbeat_interval_ms:
            self._hb_interval_s = max(0.05, resp.heartbeat_interval_ms / 1000.0)
        self._registered = True
        self._need_full_sync = True
        self._bundle_seq = int(resp.ack_seq)
        self._unacked = []
        self._ship()

    def _ship_soon(self) -> None:
        """After values became visible: their ADD events go to the master before we return."""
        if self._closed or self._lookup_only:
            return
        if time.monotonic() < self._master_backoff_until:
            self._wake.set()  # the master just failed: the heartbeat thread ships when it answers
            return
        with self._hb_lock:
            self._ship()

    def _ship_async(self) -> None:
        """After a put or a commit made values visible: their ADD events go in the heartbeat this
        wakes, off the caller's path. Meanwhile the master answers gets and lookups of those keys
        from the put's route (its pending puts), so no reader misses them."""
        if not self._closed and not self._lookup_only:
            self._wake.set()

    def _heartbeat_loop(self) -> None:
        last = 0.0
        while not self._stop.is_set():
            self._wake.wait(min(self._hb_interval_s, 1.0))
            # Woken by commits: at most one heartbeat per _SHIP_GAP_S, so under a stream of puts
            # one carries the ADD events of several (the Python work of a heartbeat per put,
            # beside the next put's handler, cost an owner ~70 us of that put on the 2-core VM).
            left = last + _SHIP_GAP_S - time.monotonic()
            if left > 0:
                self._stop.wait(left)
            self._wake.clear()
            last = time.monotonic()
            if self._stop.is_set():
                break
            try:
                with self._hb_lock:
                    self._ship()
            except Exception as exc:  # noqa: BLE001 - the thread must outlive any one failure
                log.warning("umbp %s: heartbeat: %s", self._node_id, exc)

    def _feed_loop(self) -> None:
        # A poll that brought nothing while this worker made no call doubles the wait, up to
        # _FEED_IDLE_FACTOR periods: an idle pool of many workers costs its master a few polls a
        # second each, not one per period. A call made meanwhile (_feed_touch) wakes a poll that
        # waits longer than the period, and keeps it at the period while calls come.
        base = self._feed_period_s
        period = base
        while not self._stop.is_set():
            self._feed_wake.wait(period)
            self._feed_wake.clear()
            if self._stop.is_set():
                break
            try:
                more, entries = self._read_place_feed()
                while more and not self._stop.is_set():  # behind: the next slice at once
                    more, _ = self._read_place_feed()
                active, self._feed_active = self._feed_active, False
                period = base if entries or active else min(2 * period, _FEED_IDLE_FACTOR * base)
                self._feed_idle = period > base
            except Exception as exc:  # noqa: BLE001 - the thread must outlive a master that is away
                log.debug("umbp %s: place feed: %s", self._node_id, exc)
                self._stop.wait(self._backoff_s)

    def _feed_touch(self) -> None:
        """A put, get or exists is being made: the place feed polls at its period meanwhile."""
        self._feed_active = True
        if self._feed_idle:
            self._feed_idle = False
            self._feed_wake.set()

    def place_feed_now(self) -> bool:
        """Reads the master's place feed once (UMBP_PLACE_FEED_MS does it in the background):
        the owners' DRAM places it gives are remembered for UMBP_PLACE_FEED_HORIZON_MS, the values
        it says left are forgotten. Returns whether more entries wait. Raises what the master call
        raised."""
        return self._read_place_feed()[0]

    def _read_place_feed(self) -> tuple[bool, int]:
        """place_feed_now(), and how many entries the reply held."""
        if self._lookup_only:
            return False, 0
        with self._feed_lock:
            resp = self._master._call(
                "PlaceFeed",
                admin_pb.PlaceFeedRequest(node_id=self._node_id, feed_id=self._feed_id, since_seq=self._feed_seq),
                admin=True,
            )
            self._feed_id, self._feed_seq = resp.feed_id, resp.next_seq
            gone, by_ref = _feed_columns(resp)
            if gone:
                self._locations.forget(gone)
            fed = self._remember_places(resp.nodes, by_ref, time.monotonic() + self._feed_horizon_s)
        with self._stats_lock:
            self.dstats.fed_places += fed
            self.dstats.fed_removals += len(gone)
        return bool(resp.more), len(resp.keys)

    def heartbeat_now(self) -> None:
        """Ships the queued key events (or a full sync) to the master now."""
        with self._hb_lock:
            self._ship()

    def _master_call(self, method: str, request):
        """A master RPC within the lookup deadline; None (counted, logged) when the master fails.
        After a failure the calls of the next two deadlines (1 to 5 s) answer None at once: a hung
        master costs one deadline, not one per call (the heartbeat thread keeps probing it)."""
        if time.monotonic() < self._master_backoff_until:
            with self._stats_lock:
                self.dstats.master_errors += 1
            return None
        try:
            return self._master._call(method, request)
        except Exception as exc:
            self._master_backoff_until = time.monotonic() + self._backoff_s
            with self._stats_lock:
                self.dstats.master_errors += 1
            log.warning("umbp %s: %s", self._node_id, exc)
            return None

    # ---------------------------------------------------------------------------------------
    # peers
    # ---------------------------------------------------------------------------------------
    def _peer(self, node_id: str, address: str) -> _Peer:
        from mori.io import EngineDesc, MemoryDesc

        down_until = self._peers_down.get(node_id)
        if down_until is not None and time.monotonic() < down_until:
            # A peer that just failed is not dialled again at once: its keys are misses until the
            # hold-off ends (or the master forgets them), not one deadline each.
            raise ConnectionError(f"umbp peer {node_id} at {address} failed {self._backoff_s:.1f} s ago or less")
        with self._peers_lock:
            p = self._peers.get(node_id)
            if p is not None and p.address == address and p.arena is not None:
                return p
        channel = Channel(
            address,
            [(peer_grpc.UMBPPeerStub, peer_pb.DESCRIPTOR.services_by_name["UMBPPeer"], peer_pb)],
            secret=self._secret,
        )
        stub = channel.stubs[0]
        # Our engine's descriptor goes along: the peer registers it, so the notifications our
        # transfers send there come from an engine it knows.
        info = stub.GetPeerInfo(peer_pb.GetPeerInfoRequest(engine_desc=self._engine_desc), timeout=self._timeout_s)
        self._engine.register_remote_engine(EngineDesc.unpack(info.engine_desc))
        p = _Peer(node_id, address, stub, channel)
        for b in info.buffer_descs:
            if b.buffer_index == 0 and b.backend_id == 0:
                p.arena = MemoryDesc.unpack(b.desc)
            elif b.buffer_index == 0 and b.backend_id == 1:  # peer_service.HBM_BACKEND
                p.hbm = MemoryDesc.unpack(b.desc)
        if info.ssd_staging_mem_desc:
            p.staging = MemoryDesc.unpack(info.ssd_staging_mem_desc)
            p.staging_size = int(info.ssd_staging_size)
        if p.arena is None:
            raise RuntimeError(f"umbp peer {node_id} at {address} published no DRAM arena")
        with self._peers_lock:
            old = self._peers.get(node_id)
            self._peers[node_id] = p
        if old is not None:  # places learnt from the old entry are not used again
            self._locations.forget_owner(node_id)
        if old is not None and old.channel is not channel:
            old.channel.close()
        return p

    def _pull(
        self, packed_source: bytes, items: list[tuple[int, int, int]], seconds: float, into_hbm: bool = False
    ) -> bool:
        """The owner's side of a pulled put: reads [(arena offset, source offset, size)] from a
        writer's registered memory (its packed MemoryDesc) into the arena, one MORI-IO batch read
        within seconds (at most UMBP_CALL_TIMEOUT_MS). True when all of them arrived."""
        from mori.io import MemoryDesc, StatusCode

        source = MemoryDesc.unpack(packed_source)
        self._peer_puts.remember_source(packed_source, source)  # this writer's next puts: natively
        st = self._engine.batch_read(
            [self._hbm_desc if into_hbm else self._arena_desc],
            [[a for a, _s, _z in items]],
            [source],
            [[s for _a, s, _z in items]],
            [[z for _a, _s, z in items]],
            [self._engine.allocate_transfer_uid()],
        )[0]
        code = st.WaitFor(max(1, min(self._transfer_timeout_ms, int(seconds * 1000))))
        if code != StatusCode.SUCCESS:
            log.warning(
                "umbp %s: pulling %d put value(s) from their writer failed: %s", self._node_id, len(items), st.Message()
            )
        return code == StatusCode.SUCCESS

    def _register_engine(self, packed: bytes) -> None:
        """A caller's engine (GetPeerInfo), registered before it connects to ours."""
        from mori.io import EngineDesc

        self._engine.register_remote_engine(EngineDesc.unpack(packed))

    def _forget_peer(self, node_id: str) -> None:
        self._locations.forget_owner(node_id)
        with self._peers_lock:
            p = self._peers.pop(node_id, None)
        if p is not None:
            p.channel.close()

    def _quota_refused(self, count: int, quota: int) -> None:
        """Count puts the master refused for this engine's quota; warn at most every few seconds
        (a writer over quota refuses every put, which must not flood the log)."""
        now = time.monotonic()
        with self._stats_lock:
            self.dstats.quota_refused_puts += count
            self._quota_refused_unlogged += count
            if now < self._quota_log_next:
                return
            self._quota_log_next = now + _QUOTA_LOG_INTERVAL_S
            count, self._quota_refused_unlogged = self._quota_refused_unlogged, 0
        log.warning(
            "umbp engine %s is at its quota of %d bytes: %d put(s) refused, not stored", self._node_id, quota, count
        )

    def _down(self, node_id: str) -> bool:
        """Whether the peer failed within its hold-off (not dialled, its keys misses)."""
        until = self._peers_down.get(node_id)
        return until is not None and time.monotonic() < until

    def _peer_failed(self, node_id: str, address: str, what: str, exc) -> None:
        with self._stats_lock:
            self.dstats.remote_errors += 1
        if node_id not in self._peers_down or time.monotonic() >= self._peers_down[node_id]:
            log.warning("umbp %s: peer %s at %s: %s failed: %s", self._node_id, node_id, address, what, exc)
            self._peers_down[node_id] = time.monotonic() + self._backoff_s
        self._forget_peer(node_id)

    # ---------------------------------------------------------------------------------------
    # memory the data plane reaches without a copy
    # ---------------------------------------------------------------------------------------
    def _ensure_gpu_backend(self) -> None:
        """The CUDA IPC backend, made when this worker first handles GPU memory (its HBM pages,
        a CUDA buffer of a caller): then io/ moves GPU memory between engines of one node device
        to device; without it, over tcp staged through pinned buffers. Not made before, so a
        worker that never touches GPU memory never starts CUDA."""
        if self._gpu_backend:
            return
        from mori.io import BackendType

        self._engine.create_backend(BackendType.XGMI)
        self._gpu_backend = True

    def register_memory(self, ptr: int, size: int, loc=None, device: int = -1) -> bool:
        """Registers [ptr, ptr + size) with the IO engine: reads land there and writes leave
        from there without the staging copy."""
        if not ptr or size <= 0:
            raise InvalidArgument(f"register_memory: ptr must be non-null and size > 0 (got {ptr:#x}, {size})")
        if self._lookup_only:
            return True
        # GPU memory (a CUDA tensor's) is registered as such: io/ moves it by CUDA IPC or staged tcp.
        dev = _C.umbp.pointer_device(int(ptr)) if device < 0 else int(device)
        loc = self._gpu if dev >= 0 else self._cpu
        if dev >= 0:
            self._ensure_gpu_backend()
        desc = self._engine.register_memory(int(ptr), int(size), dev if dev >= 0 else -1, loc)
        with self._regions_lock:
            self._regions.append(_Region(int(ptr), int(size), desc, desc.pack()))
            if dev < 0:  # host memory: a destination of the native located read
                self._locations.add_region(int(ptr), int(size), desc)
        return True

    def deregister_memory(self, ptr: int) -> None:
        with self._regions_lock:
            gone = [r for r in self._regions if r.ptr == int(ptr)]
            self._regions = [r for r in self._regions if r.ptr != int(ptr)]
            self._locations.remove_region(int(ptr))
        for r in gone:
            self._engine.deregister_memory(r.desc)

    def _region_packed(self, ptr: int, size: int) -> Optional[tuple[bytes, int]]:
        """(packed MemoryDesc, offset) of the registered region holding [ptr, ptr + size)."""
        with self._regions_lock:
            for r in self._regions:
                if r.ptr <= ptr and ptr + size <= r.ptr + r.size:
                    return r.packed, ptr - r.ptr
        return None

    def _region_of(self, ptr: int, size: int) -> Optional[tuple[object, int]]:
        with self._regions_lock:
            for r in self._regions:
                if r.ptr <= ptr and ptr + size <= r.ptr + r.size:
                    return r.desc, ptr - r.ptr
        return None

    # ---------------------------------------------------------------------------------------
    # transfers (GIL released while they run: WaitFor and the engine's calls are native)
    # ---------------------------------------------------------------------------------------
    def _transfer(self, read: bool, p: _Peer, remote_desc, items: list[tuple[int, int, int]]) -> list[bool]:
        """items: (local ptr, remote offset, size). Moves each, zero-copy where the local memory
        is registered, else through the staging buffer. Returns per-item success.

        The whole call has one deadline (UMBP_CALL_TIMEOUT_MS; MORI-IO fails a silent peer's
        transfers within MORI_IO_TIMEOUT_MS before that). After the first failed transfer nothing
        more is sent to that peer: it is marked failed (its keys are misses for a hold-off, its
        remembered locations forgotten), so a dead owner costs one failure, not one per staged
        batch (each of which would dial it again)."""
        ok = [False] * len(items)
        direct: dict[int, tuple[object, list[int]]] = {}
        staged: list[int] = []
        gpu: list[int] = []
        for i, (ptr, _roff, size) in enumerate(items):
            hit = self._region_of(ptr, size)
            if hit is not None:
                direct.setdefault(id(hit[0]), (hit[0], []))[1].append(i)
            elif _C.umbp.pointer_device(ptr) >= 0:
                gpu.append(i)  # unregistered GPU memory: no host staging copy reaches it
            else:
                staged.append(i)
        local_mems, local_offs, remote_offs, sizes, groups = [], [], [], [], []
        for desc, idx in direct.values():
            local_mems.append(desc)
            local_offs.append([self._region_of(items[i][0], items[i][2])[1] for i in idx])
            remote_offs.append([items[i][1] for i in idx])
            sizes.append([items[i][2] for i in idx])
            groups.append(idx)
        run = _TransferRun(time.monotonic() + self._transfer_timeout_ms / 1000.0)
        if groups:
            self._run(run, read, local_mems, local_offs, remote_desc, remote_offs, sizes, groups, ok)
        if gpu and run.failure is None:
            self._transfer_gpu(run, read, remote_desc, items, gpu, ok)
        if staged and run.failure is None:
            self._transfer_staged(run, read, remote_desc, items, staged, ok)
        if run.failure is not None:
            self._peer_failed(p.node_id, p.address, "MORI-IO read" if read else "MORI-IO write", run.failure)
        return ok

    def _run(
        self, run: "_TransferRun", read, local_mems, local_offs, remote_desc, remote_offs, sizes, groups, ok
    ) -> None:
        uids = [self._engine.allocate_transfer_uid() for _ in groups]
        fn = self._engine.batch_read if read else self._engine.batch_write
        try:
            statuses = fn(local_mems, local_offs, [remote_desc] * len(groups), remote_offs, sizes, uids)
        except Exception as exc:  # noqa: BLE001 - a refused transfer is a failed one, the peer not at fault
            log.warning("umbp %s: transfer refused: %s", self._node_id, exc)
            return
        from mori.io import StatusCode

        for st, idx in zip(statuses, groups):
            code = st.WaitFor(max(1, int((run.deadline - time.monotonic()) * 1000)))
            if code == StatusCode.SUCCESS:
                for i in idx:
                    ok[i] = True
            elif code == StatusCode.ERR_INVALID_ARGS:  # ours (a range), not the peer's
                log.warning("umbp %s: transfer refused: %s", self._node_id, st.Message())
            elif run.failure is None:
                run.failure = st.Message() or f"no completion within UMBP_CALL_TIMEOUT_MS ({code})"

    def _transfer_gpu(
        self, run: "_TransferRun", read: bool, remote_desc, items, idx: list[int], ok: list[bool]
    ) -> None:
        """Values in unregistered GPU memory: each registered with the engine as GPU memory for
        this transfer (io/ then moves it device to device by CUDA IPC on one node, or stages it
        through its pinned buffers over tcp)."""
        self._ensure_gpu_backend()
        descs = []
        try:
            for i in idx:
                ptr, _roff, size = items[i]
                descs.append(self._engine.register_memory(ptr, size, _C.umbp.pointer_device(ptr), self._gpu))
            self._run(
                run,
                read,
                descs,
                [[0] for _ in idx],
                remote_desc,
                [[items[i][1]] for i in idx],
                [[items[i][2]] for i in idx],
                [[i] for i in idx],
                ok,
            )
        finally:
            for d in descs:
                self._engine.deregister_memory(d)

    def _transfer_staged(
        self, run: "_TransferRun", read: bool, remote_desc, items, staged: list[int], ok: list[bool]
    ) -> None:
        cap = int(self._config.distributed.staging_buffer_size)
        with self._staging_lock:
            pos = 0
            while pos < len(staged) and run.failure is None:
                batch, used = [], 0
                while pos < len(staged) and (not batch or used + items[staged[pos]][2] <= cap):
                    i = staged[pos]
                    if items[i][2] > cap:
                        break
                    batch.append((i, used))
                    used += (items[i][2] + 63) // 64 * 64
                    pos += 1
                if not batch:  # larger than the staging buffer: registered for this one transfer
                    i = staged[pos]
                    pos += 1
                    ptr, roff, size = items[i]
                    desc = self._engine.register_memory(ptr, size, -1, self._cpu)
                    try:
                        one = [False]
                        self._run(run, read, [desc], [[0]], remote_desc, [[roff]], [[size]], [[0]], one)
                        ok[i] = one[0]
                    finally:
                        self._engine.deregister_memory(desc)
                    continue
                if not read:
                    for i, off in batch:
                        ctypes.memmove(self._staging.ptr + off, items[i][0], items[i][2])
                res = [False] * len(items)
                self._run(
                    run,
                    read,
                    [self._staging_desc],
                    [[off for _, off in batch]],
                    remote_desc,
                    [[items[i][1] for i, _ in batch]],
                    [[items[i][2] for i, _ in batch]],
                    [[i for i, _ in batch]],
                    res,
                )
                for i, off in batch:
                    if res[i]:
                        if read:
                            ctypes.memmove(items[i][0], self._staging.ptr + off, items[i][2])
                        ok[i] = True

    # ---------------------------------------------------------------------------------------
    # put
    # ---------------------------------------------------------------------------------------
    def put_from_ptr(self, key: str, src: int, size: int) -> bool:
        return self.batch_put_from_ptr([key], [src], [size])[0]

    def batch_put_from_ptr(self, keys: Sequence[str], ptrs: Sequence[int], sizes: Sequence[int]) -> list[bool]:
        _check_batch("batch_put_from_ptr", keys, ptrs, sizes)
        return self._put(list(keys), [int(p) for p in ptrs], [int(s) for s in sizes], None)

    def batch_put_from_ptr_with_depth(self, keys, ptrs, sizes, depths) -> list[bool]:
        _check_batch("batch_put_from_ptr_with_depth", keys, ptrs, sizes)
        if len(depths) != len(keys):
            raise InvalidArgument(f"batch_put_from_ptr_with_depth: {len(keys)} keys but {len(depths)} depths")
        return self._put(list(keys), [int(p) for p in ptrs], [int(s) for s in sizes], [int(d) for d in depths])

    def _put_local(self, idx: list[int], keys, ptrs, sizes, depths) -> list[bool]:
        k = [keys[i] for i in idx]
        p = [ptrs[i] for i in idx]
        z = [sizes[i] for i in idx]
        if depths is not None:
            return _Native.batch_put_from_ptr_with_depth(self, k, p, z, [depths[i] for i in idx])
        return _Native.batch_put_from_ptr(self, k, p, z)

    def _put(self, keys, ptrs, sizes, depths) -> list[bool]:
        n = len(keys)
        ok = [False] * n
        if n == 0 or self._lookup_only:
            return ok
        self._feed_touch()
        # Keys this worker owns already: write-once, nothing to route.
        todo = [i for i, have in enumerate(_Native.batch_exists(self, keys)) if not have]
        for i in set(range(n)) - set(todo):
            ok[i] = True
        exclude: list[str] = []
        local: list[int] = []
        refused: list[int] = []
        local_hbm: set[int] = set()  # routed to this worker's own HBM pages
        quota = 0
        for _attempt in range(3):
            if not todo:
                break
            resp = self._master_call(
                "BatchRoutePut",
                pb.BatchRoutePutRequest(
                    node_id=self._node_id,
                    keys=[keys[i] for i in todo],
                    block_sizes=[sizes[i] for i in todo],
                    exclude_nodes=exclude,
                ),
            )
            if resp is None:  # no master: this worker keeps them (shipped when the master is back)
                local += todo
                todo = []
                break
            by_peer: dict[tuple[str, str], list[int]] = defaultdict(list)
            tiers: dict[int, int] = {}  # the routed tier (HBM or DRAM) of each remote put
            retry: list[int] = []
            for i, e in zip(todo, resp.entries):
                if e.outcome == pb.ROUTE_PUT_OUTCOME_ALREADY_EXISTS:
                    ok[i] = True
                elif e.outcome == pb.ROUTE_PUT_OUTCOME_ROUTED:
                    if e.node_id == self._node_id:
                        local.append(i)
                        if e.tier == pb.TIER_HBM:
                            local_hbm.add(i)
                    else:
                        by_peer[(e.node_id, e.peer_address)].append(i)
                        tiers[i] = int(e.tier)
                elif e.outcome == pb.ROUTE_PUT_OUTCOME_QUOTA_EXCEEDED:
                    # This engine is at its quota: the put fails (ok[i] stays False); keeping the
                    # value here would hold pool bytes past the quota all the same.
                    refused.append(i)
                    quota = e.quota_bytes
                else:
                    # UNAVAILABLE: no node has room by the master's count. That count is of used
                    # bytes, evictable ones included: this worker's own store may still take it
                    # (evicting its LRU values, or onto its SSD), so it tries.
                    local.append(i)
            parts = [(node_id, address, idx, keys, ptrs, sizes, tiers) for (node_id, address), idx in by_peer.items()]
            for (node_id, _address, idx, *_rest), (done, no_space) in zip(
                parts, self._each_peer(self._put_remote, parts)
            ):
                for i in done:
                    ok[i] = True
                if no_space is None:  # the peer failed: try elsewhere
                    retry += [i for i in idx if not ok[i]]
                    exclude.append(node_id)
                elif no_space:
                    retry += no_space
                    exclude.append(node_id)
            todo = retry
        local += todo  # nowhere else took them
        if refused:
            self._quota_refused(len(refused), quota)
        if local and self._hbm_desc is not None:
            # This worker's HBM pages: what the master routed there, and values in GPU memory
            # (the DRAM store copies host memory only). A full HBM leaves them to the DRAM store.
            hl = [i for i in local if i in local_hbm or _C.umbp.pointer_device(ptrs[i]) >= 0]
            if hl:
                res = self.peer_hbm_put([keys[i] for i in hl], [ptrs[i] for i in hl], [sizes[i] for i in hl])
                for i, r in zip(hl, res):
                    ok[i] = r in (1, 2)  # stored, or there already
                local = [i for i in local if not ok[i]]
                self._ship_async()
        if local:
            for i, r in zip(local, self._put_local(local, keys, ptrs, sizes, depths)):
                ok[i] = r
            self._ship_async()
        return ok

    def _each_peer(self, fn, groups: list) -> list:
        """fn(*group) for every group (one peer's part of a put or get), the results in order.
        Several peers' parts run side by side: each is an RPC and its transfer, which release the
        GIL, so a batch the master spread over N owners costs about one owner's time, not N.
        The first part runs on the calling thread."""
        if len(groups) <= 1:
            return [fn(*g) for g in groups]
        with self._peer_calls_lock:
            if self._peer_calls is None:
                self._peer_calls = concurrent.futures.ThreadPoolExecutor(
                    max_workers=_PEER_CALLS, thread_name_prefix="umbp-peers"
                )
            pool = self._peer_calls
        futures = [pool.submit(fn, *g) for g in groups[1:]]
        first = fn(*groups[0])
        return [first] + [f.result() for f in futures]

    def _put_remote(self, node_id: str, address: str, idx: list[int], keys, ptrs, sizes, tiers=None):
        """Puts keys[idx] on one peer. Returns (indices stored, indices with no space), or
        (stored, None) when the peer failed.

        One RPC: BatchAllocateSlots names where each value lies in this worker's registered
        memory (the caller's, or the staging buffer it is copied into), and the owner reads it
        from there and commits it in the same call. Values it did not take that way (an owner
        that does not pull) are written here and committed (BatchCommitSlots), as MORI does."""
        try:
            p = self._peer(node_id, address)
        except Exception as exc:  # noqa: BLE001
            self._peer_failed(node_id, address, "GetPeerInfo", exc)
            return [], None
        # The routed tier: HBM puts land in the owner's HBM pages (tiers: index -> tier).
        entries = [
            peer_pb.AllocateSlotRequest(size=sizes[i], tier=(tiers or {}).get(i, pb.TIER_DRAM), key=keys[i])
            for i in idx
        ]
        sources: list[bytes] = []
        ref_of: dict[int, int] = {}
        unregistered: list[int] = []
        gpu_descs: list = []  # unregistered GPU sources, registered for this call (the owner pulls from them)
        for j, i in enumerate(idx):
            hit = self._region_packed(ptrs[i], sizes[i])
            if hit is None and _C.umbp.pointer_device(ptrs[i]) >= 0:
                self._ensure_gpu_backend()
                desc = self._engine.register_memory(ptrs[i], sizes[i], _C.umbp.pointer_device(ptrs[i]), self._gpu)
                gpu_descs.append(desc)
                hit = (desc.pack(), 0)
            if hit is None:
                unregistered.append(j)
                continue
            packed, off = hit
            ref = ref_of.get(id(packed))
            if ref is None:
                sources.append(packed)
                ref = ref_of[id(packed)] = len(sources)
            entries[j].source_desc_ref, entries[j].source_offset = ref, off
        # Values in unregistered memory: copied into the staging buffer (those that fit), which
        # stays untouched until the owner has read them (the lock is held over the call).
        staging = self._staging_lock if unregistered else contextlib.nullcontext()
        with staging:
            if unregistered:
                cap, used = int(self._config.distributed.staging_buffer_size), 0
                for j in unregistered:
                    i = idx[j]
                    if used + sizes[i] > cap:
                        continue
                    ctypes.memmove(self._staging.ptr + used, ptrs[i], sizes[i])
                    if not sources or sources[-1] is not self._staging_packed:
                        sources.append(self._staging_packed)
                    entries[j].source_desc_ref, entries[j].source_offset = len(sources), used
                    used += (sizes[i] + 63) // 64 * 64
            # The deadline covers the owner's read of these bytes (at 20 MB/s or better); the
            # owner commits nothing it finished reading after it.
            nbytes = sum(sizes[i] for i in idx)
            read_s = min(self._transfer_timeout_ms / 1000.0, 1.0 + nbytes / 20e6)
            try:
                resp = p.stub.BatchAllocateSlots(
                    peer_pb.BatchAllocateSlotsRequest(entries=entries, source_descs=sources),
                    timeout=self._timeout_s + read_s,
                )
            except Exception as exc:  # noqa: BLE001
                self._peer_failed(node_id, address, "BatchAllocateSlots", exc)
                return [], None
            finally:
                for d in gpu_descs:  # the owner has read them (or given up) once the call returns
                    self._engine.deregister_memory(d)
        stored, no_space, granted = [], [], []
        for i, e in zip(idx, resp.entries):
            if e.outcome == peer_pb.ALLOCATE_SLOT_OUTCOME_SUCCESS_ALREADY_EXISTS:
                stored.append(i)
            elif e.outcome == peer_pb.ALLOCATE_SLOT_OUTCOME_SUCCESS_ALLOCATED and e.committed:
                stored.append(i)
                with self._stats_lock:
                    self.dstats.remote_puts += 1
                    self.dstats.pulled_puts += 1
                    self.dstats.remote_put_bytes += sizes[i]
            elif (
                e.outcome == peer_pb.ALLOCATE_SLOT_OUTCOME_SUCCESS_ALLOCATED
                and e.pages
                and (e.backend_id == 0 or p.hbm is not None)
            ):
                # A slot the owner did not pull into: the value was not in the staging buffer
                # (full with the batch's earlier values) nor in registered memory, or the owner
                # does not pull. Written from here into its arena, DRAM or HBM (io/ reaches GPU
                # memory too: tcp staged through pinned buffers, CUDA IPC between GPU buffers).
                granted.append((i, e.slot_id, e.pages[0].page_index * e.page_size, e.backend_id != 0))
            else:
                no_space.append(i)
        if not granted:
            return stored, no_space
        for into_hbm in (False, True):
            part = [(i, off) for i, _s, off, hbm in granted if hbm == into_hbm]
            if part and not all(
                self._transfer(False, p, p.hbm if into_hbm else p.arena, [(ptrs[i], off, sizes[i]) for i, off in part])
            ):
                # The peer failed (_transfer marked it): its slots are reaped there
                # (pending_ttl_ms), the values go elsewhere.
                return stored, None
        commit = [(i, s) for i, s, _o, _h in granted]
        written_here: list[int] = []
        try:
            if commit:
                r = p.stub.BatchCommitSlots(
                    peer_pb.BatchCommitSlotsRequest(
                        entries=[peer_pb.BatchCommitSlotEntry(slot_id=s, key=keys[i]) for i, s in commit]
                    ),
                    timeout=self._timeout_s,
                )
                for (i, _s), good in zip(commit, r.success):
                    if good:
                        stored.append(i)
                        written_here.append(i)
        except Exception as exc:  # noqa: BLE001
            self._peer_failed(node_id, address, "BatchCommitSlots", exc)
            return stored, None
        with self._stats_lock:
            self.dstats.remote_puts += len(written_here)
            self.dstats.remote_put_bytes += sum(sizes[i] for i in written_here)
        return stored, no_space

    # ---------------------------------------------------------------------------------------
    # get
    # ---------------------------------------------------------------------------------------
    def get_into_ptr(self, key: str, dst: int, size: int) -> bool:
        return self.batch_get_into_ptr([key], [dst], [size])[0]

    def batch_get_into_ptr(self, keys: Sequence[str], ptrs: Sequence[int], sizes: Sequence[int]) -> list[bool]:
        if self._lookup_only:
            _check_batch("batch_get_into_ptr", keys, ptrs, sizes)
            return [False] * len(keys)
        self._feed_touch()
        if self._hbm_desc is None and not isinstance(keys, (str, bytes)):
            # The hot path, one native call without the GIL (its own store checks every argument
            # first): this worker's store, then the keys it misses at their held places.
            try:
                fast = self._locations.get(
                    self, self._native_engine, keys, ptrs, sizes, self._transfer_timeout_ms, not self._cache_remote
                )
            except TypeError:  # not lists of str / int: the checks below name the argument
                fast = None
            if fast is not None:
                ok, located = fast
                if located is None:  # counted natively (stats() adds them); ok's misses go routed
                    if all(ok):
                        return ok
                    miss = [i for i, hit in enumerate(ok) if not hit]
                else:
                    miss = self._after_located(located, keys, ptrs, sizes, ok)
                if not miss:
                    return ok
                return self._get_routed(miss, list(keys), list(map(int, ptrs)), list(map(int, sizes)), ok)
        _check_batch("batch_get_into_ptr", keys, ptrs, sizes)
        keys = list(keys)
        ptrs = list(map(int, ptrs))
        sizes = list(map(int, sizes))
        # The keys this worker owns: no RPC at all. The local store copies into host memory only:
        # GPU destinations are read through io/ (from peers' pages).
        devices = _C.umbp.pointer_devices(ptrs)
        if not devices or max(devices) < 0:
            ok = _Native.batch_get_into_ptr(self, keys, ptrs, sizes)
        else:
            host = [i for i, d in enumerate(devices) if d < 0]
            ok = [False] * len(keys)
            if host:
                got = _Native.batch_get_into_ptr(
                    self, [keys[i] for i in host], [ptrs[i] for i in host], [sizes[i] for i in host]
                )
                for i, g in zip(host, got):
                    ok[i] = bool(g)
        miss = [i for i, hit in enumerate(ok) if not hit]
        if miss and self._hbm_desc is not None:  # this worker's HBM pages, into host or GPU memory
            hits = self.peer_hbm_get([keys[i] for i in miss], [ptrs[i] for i in miss], [sizes[i] for i in miss])
            for i, h in zip(miss, hits):
                ok[i] = bool(h)
            miss = [i for i in miss if not ok[i]]
        if miss:
            miss = self._get_located(miss, keys, ptrs, sizes, ok)
        return self._get_routed(miss, keys, ptrs, sizes, ok) if miss else ok

    def _get_routed(self, miss: list[int], keys, ptrs, sizes, ok: list[bool]) -> list[bool]:
        """The keys[i] (i in miss) no place is known for: routed by the master, read from their
        owners; ok[i] set for each read. Returns ok."""
        sent = time.monotonic()
        resp = self._master_call(
            "BatchRouteGet", pb.BatchRouteGetRequest(node_id=self._node_id, keys=[keys[i] for i in miss])
        )
        if resp is None:
            return ok  # no master: misses (within the lookup deadline)
        # Where the owner's ADD event said each DRAM value lies (checksum 0: not known).
        offsets = resp.offset if len(resp.offset) == len(miss) else [0] * len(miss)
        checksums = resp.checksum if len(resp.checksum) == len(miss) else [0] * len(miss)
        by_peer: dict[int, list[int]] = defaultdict(list)
        placed: dict[int, tuple[int, int]] = {}
        for i, ref, tier, size, off, ck in zip(miss, resp.node_ref, resp.tier, resp.size, offsets, checksums):
            if ref and resp.nodes[ref - 1].node_id != self._node_id:
                by_peer[ref].append(i)
                if ck and tier in (pb.TIER_DRAM, pb.TIER_HBM) and size == sizes[i]:
                    placed[i] = (off, ck, tier)
        parts = [
            (resp.nodes[ref - 1].node_id, resp.nodes[ref - 1].peer_address, idx, keys, ptrs, sizes, placed, sent)
            for ref, idx in by_peer.items()
        ]
        for got in self._each_peer(self._get_remote, parts):
            for i in got:
                ok[i] = True
        return ok

    def _get_located(self, miss: list[int], keys, ptrs, sizes, ok: list[bool]) -> list[int]:
        """Reads the keys whose location this worker resolved within its read lease straight from
        their owners (no master route, no resolve: one MORI-IO read per owner). Each value is
        checked against its checksum; one that fails it (removed and its block reused) or whose
        read fails is forgotten and left to the routed path. Returns the indices still missing.

        Into registered host memory (the hot case) it is one native call without the GIL
        (UMBPLocationCache.read: lookup, reads, wait, checks); other destinations (staging, GPU)
        are read here at the places it hands back."""
        located = self._locations.read(
            self,
            self._native_engine,
            keys,
            ptrs,
            sizes,
            miss if len(miss) < len(keys) else [],
            self._transfer_timeout_ms,
        )
        return self._after_located(located, keys, ptrs, sizes, ok)

    def _after_located(self, located: tuple, keys, ptrs, sizes, ok: list[bool]) -> list[int]:
        """What follows a native located read (UMBPLocationCache.read's tuple): failed owners
        held off, the places it left to this side read, ok[i] set and counted for each key read.
        Returns the indices still missing."""
        got, rest, other, places, stale, nbytes, failed, on_arrival = located
        for node_id, address, why in failed:  # a dead owner: one failure, its keys misses for the hold-off
            self._peer_failed(node_id, address, "MORI-IO read", why)
        if other:
            more, more_stale = self._get_located_other(other, places, keys, ptrs, sizes)
            got += more
            nbytes += sum(sizes[i] for i in more)
            stale += more_stale
            rest = sorted(rest + [i for i in other if i not in set(more)])
        if not got and not stale:
            return rest
        for i in got:
            ok[i] = True
        with self._stats_lock:
            self.dstats.location_cache_hits += len(got)
            self.dstats.location_cache_stale += stale
            self.dstats.location_cache_on_arrival += on_arrival
            self.dstats.remote_gets += len(got)
            self.dstats.remote_get_bytes += nbytes
        if self._cache_remote:
            self._cache_fetched(got, keys, ptrs, sizes)
        return rest

    def _get_located_other(self, idx: list[int], places, keys, ptrs, sizes) -> tuple[list[int], int]:
        """The located reads into memory the native read does not write to (unregistered host
        memory, through the staging buffer; GPU memory): (indices read and verified, stale)."""
        by_node: dict[str, list[tuple[int, tuple]]] = defaultdict(list)
        for i, place in zip(idx, places):
            by_node[place[0]].append((i, place))
        got: list[int] = []
        stale: list[str] = []
        for node_id, entries in by_node.items():
            with self._peers_lock:
                p = self._peers.get(node_id)
            if p is None or p.address != entries[0][1][1]:
                continue
            done = self._transfer(True, p, p.arena, [(ptrs[i], pl[2], pl[3]) for i, pl in entries])
            checked = self._checks([(ptrs[i], pl[3], pl[4]) for i, pl in entries], done)
            for (i, _pl), good in zip(entries, checked):
                if good:
                    got.append(i)
                else:
                    stale.append(keys[i])
        if stale:
            self._locations.forget(stale)
        return got, len(stale)

    def _remember(self, p: _Peer, located: list[tuple[str, int, int, int]], expires: float) -> None:
        """located: (key, arena offset, size, checksum) of values just read from p under a lease.
        Nothing is remembered of a peer marked failed meanwhile (its places were just forgotten)."""
        self._remember_columns(
            p,
            [k for k, _o, _z, _c in located],
            [o for _k, o, _z, _c in located],
            [z for _k, _o, z, _c in located],
            [c for _k, _o, _z, c in located],
            expires,
        )

    def _remember_columns(self, p: _Peer, keys, offsets, sizes, checksums, expires: float) -> None:
        """_remember with the places as columns."""
        if self._down(p.node_id):
            return
        self._locations.remember(p.node_id, p.address, p.arena, keys, offsets, sizes, checksums, expires)

    def _get_remote(
        self,
        node_id: str,
        address: str,
        idx: list[int],
        keys,
        ptrs,
        sizes,
        placed: Optional[dict[int, tuple[int, int]]] = None,
        routed_at: float = 0.0,
    ) -> list[int]:
        """Reads the values of keys[idx] from one peer into the caller's memory; the indices read.

        placed: (arena offset, checksum) of the DRAM values whose place the master's route gave
        (from the owner's ADD events): read at once, no resolve. One that fails its checksum (the
        value was removed and its block reused since) or its read is resolved at the owner, as
        the keys of unknown place are."""
        got: list[int] = []
        try:
            p = self._peer(node_id, address)
        except Exception as exc:  # noqa: BLE001
            self._peer_failed(node_id, address, "GetPeerInfo", exc)
            p = None
        if p is not None:
            rest = idx
            if placed:
                got = self._get_placed(p, [i for i in idx if i in placed], keys, ptrs, sizes, placed, routed_at)
                done = set(got)
                rest = [i for i in idx if i not in done]
            if rest and not self._down(node_id):
                got += self._get_resolved(p, rest, keys, ptrs, sizes)
        with self._stats_lock:
            self.dstats.remote_gets += len(got)
            self.dstats.remote_get_bytes += sum(sizes[i] for i in got)
            self.dstats.remote_misses += len(idx) - len(got)
        self._cache_fetched(got, keys, ptrs, sizes)
        return got

    def _get_placed(
        self, p: _Peer, idx: list[int], keys, ptrs, sizes, placed: dict[int, tuple[int, int]], routed_at: float
    ) -> list[int]:
        """The reads at the places the route gave; the indices read and verified."""
        if not idx:
            return []
        # HBM values are read from the owner's HBM pages (a place in its HBM arena).
        hbm = [i for i in idx if len(placed[i]) > 2 and placed[i][2] == pb.TIER_HBM and p.hbm is not None]
        idx = [i for i in idx if i not in set(hbm)]
        read = []
        transfer = idx  # the DRAM values read below through _transfer
        if idx and self._dram_lease_ms > 0:
            # The DRAM places are remembered (read again straight from the owner while a read
            # lease taken then would hold) and read as remembered ones are: one native call
            # (lookup, MORI-IO read, check; a place that fails is forgotten again).
            self._remember(
                p,
                [(keys[i], placed[i][0], sizes[i], placed[i][1]) for i in idx],
                routed_at + _LOCATION_LEASE_FRACTION * self._dram_lease_ms / 1000.0,
            )
            got, _rest, other, places, _stale, _nbytes, failed, _on_arrival = self._locations.read(
                self, self._native_engine, keys, ptrs, sizes, idx, self._transfer_timeout_ms
            )
            for node_id, address, why in failed:
                self._peer_failed(node_id, address, "MORI-IO read", why)
            if other:
                got += self._get_located_other(other, places, keys, ptrs, sizes)[0]
            read += got
            transfer = []
        for arena, part in ((p.arena, transfer), (p.hbm, hbm)):
            if not part:
                continue
            done = self._transfer(True, p, arena, [(ptrs[i], placed[i][0], sizes[i]) for i in part])
            good = self._checks([(ptrs[i], sizes[i], placed[i][1]) for i in part], done)
            read += [i for i, g in zip(part, good) if g]
        idx = idx + hbm
        with self._stats_lock:
            self.dstats.routed_location_reads += len(read)
            self.dstats.routed_location_stale += len(idx) - len(read)
        return read

    def _get_resolved(self, p: _Peer, idx: list[int], keys, ptrs, sizes) -> list[int]:
        """BatchResolveKeys at the owner, then the reads (DRAM: one MORI-IO batch; SSD: staged
        one by one); the indices read and verified."""
        node_id, address = p.node_id, p.address
        sent = time.monotonic()
        try:
            r = p.stub.BatchResolveKeys(
                peer_pb.BatchResolveKeysRequest(keys=[keys[i] for i in idx], omit_descs=True), timeout=self._timeout_s
            )
        except Exception as exc:  # noqa: BLE001
            self._peer_failed(node_id, address, "BatchResolveKeys", exc)
            return []
        # DRAM read leases are not released one RPC each: they run out by themselves
        # (UMBP_DRAM_READ_LEASE_MS), and meanwhile only keep just-read (most recently used)
        # values from eviction. SSD staging slots are few: those are released at once.
        dram, ssd, hbm = [], [], []
        leased: set[int] = set()
        page = 0
        for j, i in enumerate(idx):
            count = r.page_count[j] if j < len(r.page_count) else 0
            first = r.page_index[page] if count else 0
            page += count
            if not r.found[j] or r.size[j] != sizes[i]:
                continue  # a miss (the size must match, as locally)
            if r.tier[j] == pb.TIER_HBM and count and p.hbm is not None:
                hbm.append((i, first * r.page_size, r.checksum[j]))  # not remembered: locations are DRAM's
            elif r.tier[j] == pb.TIER_DRAM and count:
                dram.append((i, first * r.page_size, r.checksum[j]))
                if j < len(r.lease_id) and r.lease_id[j]:
                    leased.add(i)
            elif r.tier[j] == pb.TIER_SSD:
                ssd.append(i)
        got: list[int] = []
        if hbm:
            done = self._transfer(True, p, p.hbm, [(ptrs[i], off, sizes[i]) for i, off, _c in hbm])
            got += [
                i
                for (i, _o, want), d in zip(hbm, done)
                if d and self._verified(node_id, keys[i], ptrs[i], sizes[i], want)
            ]
        if dram and not self._down(node_id):
            done = self._transfer(True, p, p.arena, [(ptrs[i], off, sizes[i]) for i, off, _c in dram])
            checked = self._checks([(ptrs[i], sizes[i], want) for i, _off, want in dram], done)
            located = []
            for (i, off, want), d, good in zip(dram, done, checked):
                if d and not good:
                    self._checksum_failed(node_id, keys[i])
                if good:
                    got.append(i)
                    if i in leased:
                        located.append((keys[i], off, sizes[i], want))
            if located and self._dram_lease_ms > 0:
                self._remember(p, located, sent + _LOCATION_LEASE_FRACTION * self._dram_lease_ms / 1000.0)
        for i in ssd:
            if self._down(node_id):
                break  # a read just failed: the peer is marked failed
            if self._get_staged(p, keys[i], ptrs[i], sizes[i]):
                got.append(i)
        return got

    def _checks(self, items: list[tuple[int, int, int]], done: list[bool]) -> list[bool]:
        """Per (ptr, size, checksum) of values just read (done: arrived): arrived and intact. The
        arrived values are hashed in one native call (PeerPages::verify), spread over a hash team
        once they hold 1 MiB: one core hashes 10-20 GiB/s, a batch read's check came after it."""
        out = [False] * len(items)
        # Values read into GPU memory are hashed through a host copy (_checksum); peer_verify
        # hashes host memory only.
        arrived = []
        for j, d in enumerate(done):
            if d and _C.umbp.pointer_device(items[j][0]) >= 0:
                out[j] = _checksum(items[j][0], items[j][1]) == items[j][2]
            elif d:
                arrived.append(j)
        if arrived:
            match = self.peer_verify(
                [items[j][0] for j in arrived], [items[j][1] for j in arrived], [items[j][2] for j in arrived]
            )
            for j, m in zip(arrived, match):
                out[j] = m
        return out

    def _verified(self, node_id: str, key: str, ptr: int, size: int, want: int) -> bool:
        if _checksum(ptr, size) == want:
            return True
        self._checksum_failed(node_id, key)
        return False

    def _checksum_failed(self, node_id: str, key: str) -> None:
        with self._stats_lock:
            self.dstats.remote_checksum_failures += 1
        log.warning(
            "umbp %s: value of %r read from peer %s fails its checksum: a miss", self._node_id, key[:64], node_id
        )

    def _release(self, p: _Peer, leases: list[int]) -> None:
        # A staging lease expires by itself (UMBP_SSD_READ_LEASE_MS): releasing it early frees
        # the slot for the next reader, without waiting for the answer.
        for lease in leases:
            try:
                call = p.stub.ReleaseSsdLease.future(
                    peer_pb.ReleaseSsdLeaseRequest(lease_id=lease), timeout=self._timeout_s
                )
            except Exception:  # noqa: BLE001
                return
            self._releases.add(call)
            call.add_done_callback(self._releases.discard)

    def _get_staged(self, p: _Peer, key: str, ptr: int, size: int) -> bool:
        if p.staging is None:
            return False
        # Slots leased by other readers come free when released, at the latest when their lease
        # runs out (and the owner reaps it, a round trip later): a reader that waits that long
        # finds the adjacent slots a large value needs.
        deadline = time.monotonic() + (self._ssd_lease_ms + self._timeout_s * 1000.0) / 1000.0
        attempt = 0
        while True:
            attempt += 1
            try:
                r = p.stub.PrepareSsdRead(
                    peer_pb.PrepareSsdReadRequest(key=key, max_size=size), timeout=self._timeout_s
                )
            except Exception as exc:  # noqa: BLE001
                self._peer_failed(p.node_id, p.address, "PrepareSsdRead", exc)
                return False
            if r.status == peer_pb.SSD_READ_NO_SLOT:  # the slots it needs are leased: not a miss, retry
                if time.monotonic() >= deadline:
                    return False
                time.sleep(min(0.002 * attempt, 0.05))
                continue
            if r.status == peer_pb.SSD_READ_SIZE_TOO_LARGE and r.size == size:
                # A value takes adjacent staging slots; one larger than the owner's whole staging
                # buffer cannot be staged: a miss, and the log names the setting to raise.
                log.warning(
                    "umbp %s: %r (%d bytes) lives only on the SSD of peer %s, whose staging buffer "
                    "(distributed.ssd_staging_buffer_size = %d bytes) is smaller: not readable remotely; "
                    "raise that setting on the owner",
                    self._node_id,
                    key[:64],
                    size,
                    p.node_id,
                    p.staging_size,
                )
                return False
            if r.status != peer_pb.SSD_READ_OK or r.size != size:
                return False
            try:
                done = self._transfer(True, p, p.staging, [(ptr, r.staging_offset, size)])[0]
            finally:
                self._release(p, [r.lease_id])
            return done and self._verified(p.node_id, key, ptr, size, r.checksum)

    def _cache_fetched(self, idx: list[int], keys, ptrs, sizes) -> None:
        """Remote-fetch caching: keep a local copy of values read from peers, per the admission."""
        if not self._cache_remote or not idx or self._admission == 1:
            return
        keep = [i for i in idx if self._admission == 2 or sizes[i] <= self._admission_max]
        keep = [i for i in keep if _C.umbp.pointer_device(ptrs[i]) < 0]  # the store keeps host copies only
        if keep:
            _Native.batch_put_from_ptr(self, [keys[i] for i in keep], [ptrs[i] for i in keep], [sizes[i] for i in keep])
            with self._stats_lock:
                self.dstats.remote_fetches_cached += len(keep)
            self._wake.set()

    # ---------------------------------------------------------------------------------------
    # existence
    # ---------------------------------------------------------------------------------------
    def exists(self, key: str) -> bool:
        return self.batch_exists([key])[0]

    def batch_exists(self, keys: Sequence[str]) -> list[bool]:
        """Whether each key is in the pool. The keys this worker does not hold are routed by the
        master (BatchRouteGet, not BatchLookup: the same answer, routed puts not yet reported
        included, plus where each DRAM value lies). Those places are remembered as a read's
        would be, so the get that follows (SGLang's load: batch_exists_consecutive, then
        batch_get_v1) reads from the owner at once, with no second master round trip. A key
        whose copies are all on failed or expired nodes is not found (it could not be read). A key
        whose place this worker already holds (read under a lease, or given by the place feed) is
        found without asking. A lookup-only client (a scheduler's) asks BatchLookup: existence only."""
        keys = list(keys)
        if self._lookup_only:
            out = list(_Native.batch_exists(self, keys))
        else:
            # Keys whose place this worker holds (a read's lease, or the place feed) exist as far
            # as a read can tell, with no master call (a value gone since is a miss at the get):
            # one native call for both.
            out = self._locations.exists(self, keys)
            self._feed_touch()
        miss = [i for i, have in enumerate(out) if not have]
        if miss and self._lookup_only:
            # A scheduler's client reads nothing: existence only (no lease, no access-time bump).
            resp = self._master_call(
                "BatchLookup", pb.BatchLookupRequest(node_id=self._node_id, keys=[keys[i] for i in miss])
            )
            if resp is not None:
                for i, f in zip(miss, resp.found):
                    out[i] = bool(f)
        elif miss:
            sent = time.monotonic()
            resp = self._master_call(
                "BatchRouteGet", pb.BatchRouteGetRequest(node_id=self._node_id, keys=[keys[i] for i in miss])
            )
            if resp is not None:
                for i, ref in zip(miss, resp.node_ref):
                    out[i] = ref != 0
                self._remember_routes([keys[i] for i in miss], resp, sent)
        return out

    def _remember_routes(self, keys: list[str], resp, sent: float) -> None:
        """Remembers the DRAM places a BatchRouteGet of ``keys`` gave (those with a checksum), for
        the part of the read lease a get's route would have them (a place gone stale since fails
        its checksum at the read, which then takes the routed path)."""
        if self._dram_lease_ms <= 0 or len(resp.offset) != len(keys) or len(resp.checksum) != len(keys):
            return
        by_node: dict[int, _Places] = defaultdict(lambda: ([], [], [], []))
        for key, ref, tier, size, off, ck in zip(keys, resp.node_ref, resp.tier, resp.size, resp.offset, resp.checksum):
            if ref and ck and tier == pb.TIER_DRAM:
                cols = by_node[ref]
                cols[0].append(key)
                cols[1].append(off)
                cols[2].append(size)
                cols[3].append(ck)
        self._remember_places(resp.nodes, by_node, sent + _LOCATION_LEASE_FRACTION * self._dram_lease_ms / 1000.0)

    def _remember_places(self, nodes, by_ref: dict[int, _Places], expires: float) -> int:
        """Remembers places a master reply gave: ``by_ref`` maps a 1-based index into ``nodes``
        (each with node_id and peer_address) to its columns (keys, offsets, sizes, checksums).
        This worker's own values (read locally) and failed owners' are skipped. Returns how many
        were remembered."""
        n = 0
        for ref, located in by_ref.items():
            node = nodes[ref - 1]
            if node.node_id == self._node_id or self._down(node.node_id):
                continue
            try:
                p = self._peer(node.node_id, node.peer_address)  # a located read needs the peer known
            except Exception as exc:  # noqa: BLE001
                self._peer_failed(node.node_id, node.peer_address, "GetPeerInfo", exc)
                continue
            self._remember_columns(p, *located, expires)
            n += len(located[0])
        return n

    def batch_exists_consecutive(self, keys: Sequence[str]) -> int:
        keys = list(keys)
        if self._lookup_only:
            n = _Native.batch_exists_consecutive(self, keys)
        else:
            # One native call: this worker's own keys, then those whose place it holds (SGLang asks
            # this before each prefill, for the pages a get reads next).
            n = self._locations.exists_consecutive(self, keys)
            if n > 0:
                self._feed_touch()
        if n == len(keys):
            return n
        found = self.batch_exists(keys[n:])
        for f in found:
            if not f:
                break
            n += 1
        return n

    # ---------------------------------------------------------------------------------------
    # the rest of the API
    # ---------------------------------------------------------------------------------------
    def is_distributed(self) -> bool:
        return True

    def get_deployment_mode(self):
        return _C.umbp.UMBPDeploymentMode.Distributed

    def clear(self) -> bool:
        """Clears the values this worker owns (their REMOVE events reach the master);
        ``UMBPMasterClient.clear_cluster()`` clears the whole pool."""
        ok = _Native.clear(self)
        self._ship_soon()
        return ok

    def flush(self) -> bool:
        ok = _Native.flush(self)
        self._ship_soon()
        return ok

    def report_external_kv_blocks(self, hashes, tier) -> bool:
        return self._external("report_external_kv_blocks", self._node_id, list(hashes), tier)

    def revoke_external_kv_blocks(self, hashes, tier) -> bool:
        return self._external("revoke_external_kv_blocks", self._node_id, list(hashes), tier)

    def revoke_all_external_kv_blocks_at_tier(self, tier) -> bool:
        return self._external("revoke_all_external_kv_blocks_at_tier", self._node_id, tier)

    def match_external_kv(self, hashes, count_as_hit: bool = False) -> list:
        try:
            return self._master.match_external_kv(list(hashes), count_as_hit)
        except Exception as exc:  # noqa: BLE001
            log.warning("umbp %s: match_external_kv: %s", self._node_id, exc)
            return []

    def get_external_kv_hit_counts(self, hashes) -> list:
        try:
            return self._master.get_external_kv_hit_counts(list(hashes))
        except Exception as exc:  # noqa: BLE001
            log.warning("umbp %s: get_external_kv_hit_counts: %s", self._node_id, exc)
            return []

    def _external(self, method: str, *args) -> bool:
        try:
            getattr(self._master, method)(*args)
            return True
        except Exception as exc:  # noqa: BLE001
            log.warning("umbp %s: %s: %s", self._node_id, method, exc)
            return False

    def stats(self) -> dict:
        s = _Native.stats(self)
        with self._stats_lock:
            s.update(vars(self.dstats))
        if not self._lookup_only:  # the located reads the native get counted itself
            got, stale, on_arrival, got_bytes = self._locations.tallied()
            s["location_cache_hits"] += got
            s["location_cache_stale"] += stale
            s["location_cache_on_arrival"] += on_arrival
            s["remote_gets"] += got
            s["remote_get_bytes"] += got_bytes
        if not self._lookup_only and self._hbm_desc is not None:  # the HBM pages, as the dram_* keys
            cap, used, pinned, keys, evictions = self.peer_hbm_stats()
            s.update(
                hbm_capacity_bytes=cap,
                hbm_used_bytes=used,
                hbm_pinned_bytes=pinned,
                hbm_keys=keys,
                hbm_evictions=evictions,
            )
        if not self._lookup_only:
            # Writers' BatchAllocateSlots this worker's peer server answered in C++ (pulled puts).
            native = getattr(self._server, "native_puts", None)
            s["peer_native_allocate_calls"] = native.answered if native is not None else 0
        return s

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._lookup_only:
            self._master.close()
            _Native.close(self)
            return
        self._stop.set()
        self._wake.set()
        if self._hb_thread.is_alive():
            self._hb_thread.join(timeout=5)
        if self._feed_thread is not None:
            self._feed_wake.set()
            self._feed_thread.join(timeout=5)
        try:
            with self._hb_lock:
                if self._registered:
                    self._ship()
                    self._master._call("UnregisterClient", pb.UnregisterClientRequest(node_id=self._node_id))
        except Exception as exc:  # noqa: BLE001 - a master that is gone expires us
            log.debug("umbp %s: unregister: %s", self._node_id, exc)
        if self._peer_calls is not None:
            self._peer_calls.shutdown(wait=True)
        self._server.stop(0.2)
        self._master.close()
        with self._peers_lock:
            peers, self._peers = list(self._peers.values()), {}
        for p in peers:
            p.channel.close()
        # Peers lose access to the arena (the engine revokes it) before the store unmaps it.
        for r in self._regions:
            self._locations.remove_region(r.ptr)
            self._engine.deregister_memory(r.desc)
        self._regions = []
        self._engine.deregister_memory(self._arena_desc)
        if self._hbm_desc is not None:  # before the store frees the device arena
            self._engine.deregister_memory(self._hbm_desc)
        if self._ssd_staging_desc is not None:
            self._engine.deregister_memory(self._ssd_staging_desc)
        self._engine.deregister_memory(self._staging_desc)
        _Native.close(self)
        self._alloc.free(self._staging)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        if not hasattr(self, "_master"):
            return  # __init__ failed before there was anything to close
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass
