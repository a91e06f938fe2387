# SPDX-License-Identifier: MIT
"""The UMBPPeer service a distributed worker serves: the pages it owns, to the pool's writers
and readers (MORI's PeerServiceServer).

Bytes never ride gRPC. A writer allocates a slot (an arena offset) here, writes the value into
the arena through MORI-IO and commits it; a reader resolves a key (the arena offset, size and
XXH3 checksum of the value, pinned under a read lease) and reads it through MORI-IO, or, for a
key only on the SSD, has it staged into a staging slot first. The store's peer hooks
(``UMBPClient.peer_*``, umbp/src/peer_pages.h) do the work; this module maps them onto the RPCs.

Our slots are contiguous: ``page_size`` is the arena's allocation granule and ``pages`` holds the
value's first page only (it spans ``ceil(size / page_size)`` consecutive ones). Buffer 0 of
backend 0 is the DRAM arena; buffer 0 of backend 1 the HBM arena (GPU memory, with
distributed.hbm set); the SSD staging buffer is ``ssd_staging_mem_desc``.

With a job secret every call must be signed (the master's scheme, master_auth.py): a stranger on
the port gets UNAUTHENTICATED and touches nothing.
"""

from __future__ import annotations

import logging
from concurrent import futures
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Optional

import grpc

from mori.core.env import setting
from mori.umbp.distributed.grpc_servers import GrpcDispatcher, cpp_server, server_kind
from mori.umbp.proto import require

pb = require("umbp_pb2")
peer_pb = require("umbp_peer_pb2")
peer_grpc = require("umbp_peer_pb2_grpc")

log = logging.getLogger("mori.umbp.peer")

# The arena's allocation granule (core's HeapAllocator::kMinAlign): every slot offset is a multiple.
PAGE_SIZE = 64
ARENA_BUFFER = 0
ARENA_BACKEND = 0
HBM_BACKEND = 1  # the HBM arena's pages: AllocateSlot with tier HBM, resolves of HBM values

# peer_prepare_ssd_read's outcome -> SsdReadStatus.
_SSD_STATUS = {
    0: peer_pb.SSD_READ_OK,
    1: peer_pb.SSD_READ_NOT_FOUND,
    2: peer_pb.SSD_READ_NO_SLOT,
    3: peer_pb.SSD_READ_SIZE_TOO_LARGE,
    4: peer_pb.SSD_READ_ERROR,
}


@dataclass
class PeerDescriptors:
    """What a peer publishes about itself: its engine and its two registered buffers (packed)."""

    engine_desc: bytes
    arena_desc: bytes
    staging_desc: bytes
    staging_size: int
    hbm_desc: bytes = b""  # the HBM arena (registered as GPU memory); empty: none


class PeerService(peer_grpc.UMBPPeerServicer):
    """The 12 UMBPPeer RPCs over one worker's owned-pages store.

    ``register_engine`` takes the packed engine descriptor a caller sends with GetPeerInfo.
    ``on_commit`` runs after a commit made values visible (the worker's heartbeat ships their
    ADD events). ``pull(source_desc, [(arena offset, source offset, size)], seconds)`` reads
    values from a writer's registered memory into the arena within that time (True: all of
    them): with it, a BatchAllocateSlots that names the values' sources is allocated, read and
    committed in one call.
    """

    def __init__(
        self,
        store,
        descs: PeerDescriptors,
        dram_lease_ms: int,
        ssd_lease_ms: int,
        on_commit: Optional[Callable[[], None]] = None,
        register_engine: Optional[Callable[[bytes], None]] = None,
        pull: Optional[Callable[[bytes, list, float], bool]] = None,
    ) -> None:
        self._store = store
        self._descs = descs
        self._dram_lease_ms = dram_lease_ms
        self._ssd_lease_ms = ssd_lease_ms
        self._on_commit = on_commit
        self._register_engine = register_engine
        self._pull = pull
        self._arena_buffer = pb.BufferMemoryDesc(
            buffer_index=ARENA_BUFFER, desc=descs.arena_desc, backend_id=ARENA_BACKEND
        )
        self._hbm_buffer = (
            pb.BufferMemoryDesc(buffer_index=ARENA_BUFFER, desc=descs.hbm_desc, backend_id=HBM_BACKEND)
            if descs.hbm_desc
            else None
        )

    @property
    def arena_buffer(self):
        """The DRAM arena's BufferMemoryDesc, as every slot in it is answered with."""
        return self._arena_buffer

    def _buffer(self, tier: int):
        """(backend id, BufferMemoryDesc) of the arena holding a value of this tier."""
        if int(tier) == pb.TIER_HBM and self._hbm_buffer is not None:
            return HBM_BACKEND, self._hbm_buffer
        return ARENA_BACKEND, self._arena_buffer

    # -- handshake ---------------------------------------------------------------------------
    def GetPeerInfo(self, request, context):
        if request.engine_desc and self._register_engine is not None:
            # The caller's engine, known here before it connects: its notifications then count.
            try:
                self._register_engine(request.engine_desc)
            except Exception as exc:  # noqa: BLE001 - a malformed descriptor is the caller's error
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"GetPeerInfo: engine_desc: {exc}")
        return peer_pb.GetPeerInfoResponse(
            engine_desc=self._descs.engine_desc,
            ssd_staging_mem_desc=self._descs.staging_desc,
            ssd_staging_size=self._descs.staging_size,
            buffer_descs=[self._arena_buffer] + ([self._hbm_buffer] if self._hbm_buffer is not None else []),
            page_size=PAGE_SIZE,
        )

    # -- slots -------------------------------------------------------------------------------
    _OUTCOMES = {
        1: peer_pb.ALLOCATE_SLOT_OUTCOME_SUCCESS_ALLOCATED,
        2: peer_pb.ALLOCATE_SLOT_OUTCOME_SUCCESS_ALREADY_EXISTS,
        3: peer_pb.ALLOCATE_SLOT_OUTCOME_FAILED,
        4: peer_pb.ALLOCATE_SLOT_OUTCOME_FAILED_NO_SPACE,
    }

    def _allocate(self, entries, source_descs=(), context=None) -> list:
        keys = [e.key for e in entries]
        sizes = [int(e.size) for e in entries]
        # The memory tiers take puts: HBM in the HBM arena (FAILED on a peer without one), DRAM
        # (or UNKNOWN) in the DRAM arena; SSD is never a put target.
        tiers = [int(e.tier) if e.tier in (pb.TIER_HBM, pb.TIER_DRAM) else pb.TIER_UNKNOWN for e in entries]
        bad = [e for e in entries if e.tier not in (pb.TIER_HBM, pb.TIER_DRAM, pb.TIER_UNKNOWN)]
        grants = self._store.peer_allocate(keys, sizes, tiers)
        out = []
        for e, (outcome, slot_id, offset) in zip(entries, grants):
            if e in bad:
                if outcome == 1:
                    self._store.peer_abort([slot_id])
                out.append(peer_pb.AllocateSlotResponse(outcome=peer_pb.ALLOCATE_SLOT_OUTCOME_FAILED))
                continue
            backend, buffer = self._buffer(e.tier)
            resp = peer_pb.AllocateSlotResponse(
                outcome=self._OUTCOMES[outcome],
                slot_id=slot_id,
                page_size=PAGE_SIZE,
                backend_id=backend,
                pending_ttl_ms=30000,
            )
            if outcome == 1:
                resp.pages.add(buffer_index=ARENA_BUFFER, page_index=offset // PAGE_SIZE)
                resp.descs.append(buffer)
            out.append(resp)
        if source_descs and self._pull is not None:
            self._pull_and_commit(entries, grants, list(source_descs), out, context)
        return out

    def _pull_and_commit(self, entries, grants, source_descs: list, out: list, context) -> None:
        """The granted slots whose value the writer named a source for: read from there (one
        MORI-IO batch read per source) and committed; a failed read aborts its slots (FAILED:
        the writer puts those values elsewhere). Only within the writer's deadline: past it the
        writer has given up and may be reusing its memory, so what was read is not committed."""
        by_source: dict[tuple[int, bool], list[int]] = defaultdict(list)
        for j, (e, (outcome, _slot, _off)) in enumerate(zip(entries, grants)):
            if outcome == 1 and 0 < e.source_desc_ref <= len(source_descs) and out[j].pages:
                by_source[(e.source_desc_ref, out[j].backend_id == HBM_BACKEND)].append(j)
        for (ref, into_hbm), js in by_source.items():
            items = [(grants[j][2], int(entries[j].source_offset), int(entries[j].size)) for j in js]
            left = context.time_remaining() if context is not None else None
            try:
                read = left is None or left > 0
                seconds = 30.0 if left is None else left
                if into_hbm:
                    read = read and self._pull(source_descs[ref - 1], items, seconds, into_hbm=True)
                else:
                    read = read and self._pull(source_descs[ref - 1], items, seconds)
            except Exception as exc:  # noqa: BLE001 - a bad descriptor is the writer's; its puts fail
                log.warning("umbp peer: reading %d value(s) from a writer failed: %s", len(js), exc)
                read = False
            left = context.time_remaining() if context is not None else None
            if read and left is not None and left <= 0:
                log.warning("umbp peer: %d value(s) read after their writer's deadline: not committed", len(js))
                read = False
            ids = [grants[j][1] for j in js]
            ok = self._commit(ids, [entries[j].key for j in js]) if read else [False] * len(js)
            if not read:
                self._store.peer_abort(ids)
            for j, good in zip(js, ok):
                if good:
                    out[j].committed = True
                else:
                    out[j].Clear()
                    out[j].outcome = peer_pb.ALLOCATE_SLOT_OUTCOME_FAILED

    def AllocateSlot(self, request, context):
        return self._allocate([request])[0]

    def BatchAllocateSlots(self, request, context):
        return peer_pb.BatchAllocateSlotsResponse(
            entries=self._allocate(list(request.entries), request.source_descs, context)
        )

    def _commit(self, ids: list[int], keys: list[str]) -> list[bool]:
        ok = self._store.peer_commit(ids, keys)
        if any(ok) and self._on_commit is not None:
            self._on_commit()
        return ok

    def CommitSlot(self, request, context):
        return peer_pb.CommitSlotResponse(success=self._commit([request.slot_id], [request.key])[0])

    def BatchCommitSlots(self, request, context):
        ok = self._commit([e.slot_id for e in request.entries], [e.key for e in request.entries])
        return peer_pb.BatchCommitSlotsResponse(success=ok)

    def AbortSlot(self, request, context):
        return peer_pb.AbortSlotResponse(success=self._store.peer_abort([request.slot_id])[0])

    def BatchAbortSlots(self, request, context):
        return peer_pb.BatchAbortSlotsResponse(success=self._store.peer_abort(list(request.slot_ids)))

    # -- reads -------------------------------------------------------------------------------
    def ResolveKey(self, request, context):
        found, tier, offset, size, checksum, lease = self._store.peer_resolve([request.key])[0]
        backend, buffer = self._buffer(tier)
        resp = peer_pb.ResolveKeyResponse(
            found=found, size=size, page_size=PAGE_SIZE, backend_id=backend, checksum=checksum, lease_id=lease
        )
        if found and int(tier) in (pb.TIER_DRAM, pb.TIER_HBM):
            resp.pages.add(buffer_index=ARENA_BUFFER, page_index=offset // PAGE_SIZE)
            resp.descs.append(buffer)
        return resp

    def BatchResolveKeys(self, request, context):
        resolved = self._store.peer_resolve(list(request.keys))
        resp = peer_pb.BatchResolveKeysResponse(page_size=PAGE_SIZE)
        any_dram = any_hbm = False
        for found, tier, offset, size, checksum, lease in resolved:
            hbm = found and int(tier) == pb.TIER_HBM  # a page of the HBM arena: backend_id HBM_BACKEND
            dram = (found and int(tier) == pb.TIER_DRAM) or hbm
            any_hbm = any_hbm or hbm
            any_dram = any_dram or (dram and not hbm)
            resp.found.append(found)
            resp.tier.append(int(tier) if found else pb.TIER_UNKNOWN)
            resp.size.append(size)
            resp.page_count.append(1 if dram else 0)
            resp.backend_id.append(HBM_BACKEND if hbm else ARENA_BACKEND)
            resp.checksum.append(checksum)
            resp.lease_id.append(lease)
            if dram:
                resp.buffer_index.append(ARENA_BUFFER)
                resp.page_index.append(offset // PAGE_SIZE)
        if any_dram and not request.omit_descs:
            resp.descs.append(self._arena_buffer)
        if any_hbm and not request.omit_descs and self._hbm_buffer is not None:
            resp.descs.append(self._hbm_buffer)
        return resp

    def PrepareSsdRead(self, request, context):
        outcome, offset, size, checksum, lease = self._store.peer_prepare_ssd_read(request.key, request.max_size)
        return peer_pb.PrepareSsdReadResponse(
            status=_SSD_STATUS[outcome],
            staging_offset=offset,
            size=size,
            lease_id=lease,
            lease_ttl_ms=self._ssd_lease_ms,
            checksum=checksum,
        )

    def ReleaseSsdLease(self, request, context):
        # One lease namespace: a DRAM read lease (ResolveKey's lease_id) ends here too.
        return peer_pb.ReleaseSsdLeaseResponse(success=self._store.peer_release(request.lease_id))

    # -- master-driven eviction ----------------------------------------------------------------
    def EvictKey(self, request, context):
        keys = list(request.keys)
        freed = self._store.peer_remove(keys) if request.clear else self._store.peer_evict(keys)
        return peer_pb.EvictKeyResponse(
            evicted=[peer_pb.EvictKeyEntry(key=k, bytes_freed=f) for k, f in zip(keys, freed)]
        )


class PeerServer:
    """The gRPC server of a worker's PeerService, on ``host:port`` (0: a free port): grpc++ in C++
    where the build has it (``UMBP_PEER_SERVER``, as the master's), else grpcio's."""

    def __init__(
        self,
        service: PeerService,
        host: str,
        port: int,
        secret: Optional[bytes] = None,
        auth_window_s: float = 30.0,
        max_workers: Optional[int] = None,
        server: Optional[str] = None,
        pull_puts=None,
    ) -> None:
        """``server``: ``cpp``, ``python`` or None (UMBP_PEER_SERVER); ``max_workers``: the threads
        answering calls (None: UMBP_PEER_THREADS, 2); ``pull_puts``: the worker's
        ``mori._C.umbp.PeerPuts``, which the grpc++ server answers BatchAllocateSlots with (in C++,
        where the build has the protobuf messages; what it leaves goes to ``service``)."""
        if max_workers is None:
            max_workers = int(setting("UMBP_PEER_THREADS"))
        if max_workers < 2:
            raise ValueError(f"UMBP_PEER_THREADS (max_workers) must be >= 2, got {max_workers}")
        verifier = None
        if secret is not None:
            from mori.umbp.distributed.master_auth import VerifyingInterceptor

            verifier = VerifyingInterceptor(
                secret,
                auth_window_s,
                on_refused=lambda why: log.warning("umbp peer: refused a call: %s", why),
                name="umbp peer",
            )
        self.service = service
        self.server_kind = server_kind(server, "UMBP_PEER_SERVER")
        if self.server_kind == "cpp":
            dispatch = GrpcDispatcher("umbp peer")
            dispatch.add(service, peer_pb.DESCRIPTOR.services_by_name["UMBPPeer"], peer_pb)
            # handlers_wait: an SSD read waiting for a staging slot must leave threads to the
            # release calls that free one.
            self._server = cpp_server().MasterGrpcServer(
                f"{host}:{port}",
                dispatch,
                workers=max_workers,
                reuse_port=False,
                max_message_bytes=256 << 20,
                handlers_wait=True,
            )
            if verifier is not None:
                self._server.verify_calls(verifier.verifier, dispatch.methods, verifier.on_refused)
            self.native_puts = None
            if pull_puts is not None and cpp_server().HAVE_NATIVE_ROUTES:
                self.native_puts = cpp_server().NativePeerPuts(
                    pull_puts, service.arena_buffer.SerializeToString(), ARENA_BACKEND, ARENA_BUFFER, PAGE_SIZE
                )
                self._server.pull_puts_natively(self.native_puts)
            try:
                self.port = self._server.start()
            except Exception as exc:  # noqa: BLE001 - mori's error says why; this names the address
                raise OSError(f"umbp peer: cannot listen on {host}:{port} ({exc})") from None
        else:
            self.native_puts = None
            self._server = grpc.server(
                futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="umbp-peer"),
                interceptors=[verifier] if verifier is not None else [],
                options=[
                    ("grpc.max_receive_message_length", 256 << 20),
                    ("grpc.max_send_message_length", 256 << 20),
                    ("grpc.so_reuseport", 0),
                ],
            )
            peer_grpc.add_UMBPPeerServicer_to_server(service, self._server)
            self.port = self._server.add_insecure_port(f"{host}:{port}")
            if self.port == 0:
                raise OSError(f"umbp peer: cannot listen on {host}:{port}")
            self._server.start()
        self.address = f"{host}:{self.port}"

    def stop(self, grace: float = 0.5) -> None:
        if self.server_kind == "cpp":
            self._server.stop(grace)
        else:
            self._server.stop(grace).wait(grace + 1.0)
