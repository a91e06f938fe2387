# SPDX-License-Identifier: MIT
"""The call sequences of UMBP's two distributed users, two processes playing two engines, KV
pages checked: vLLM's UMBPStoreConnector in ``mode: distributed`` (a lookup-only scheduler
client from ``mori.cpp`` plus pool workers, reference/umbp.md 6.2) and SGLang's HiCache
``UMBPStore`` with a master address (6.1)."""

from __future__ import annotations

import random
import socket

import pytest
from dist_harness import start_workers
from umbp_master_harness import fast_settings, running_master, uid

pytestmark = pytest.mark.timeout(120)

PAGE = 64 << 10  # one KV page's bytes (per K or V)


def test_vllm_distributed_connector_sequence():
    from mori.cpp import UMBPClient, UMBPConfig, UMBPDeploymentMode, UMBPDistributedConfig

    with running_master(settings=fast_settings(route_put_affinity="local")) as master:
        # The scheduler's client: a zero-sized pool, lookups only (vLLM's _build_client(pool=False)).
        config = UMBPConfig()
        dist = UMBPDistributedConfig()
        dist.master_config.master_address = master.address
        dist.master_config.node_id = f"vllm-{socket.gethostname()}-lookup-{uid('x')}"
        dist.master_config.node_address = "127.0.0.1"
        dist.master_config.auto_heartbeat = True
        config.dram.capacity_bytes = 0
        dist.cache_remote_fetches = False
        dist.ranged_locality_prefetch = False
        config.distributed = dist
        scheduler = UMBPClient(config)
        assert scheduler.get_deployment_mode() == UMBPDeploymentMode.Distributed
        # Two engines' workers: each owns a pool slice and registers its KV buffer (zero-copy).
        e1, e2 = start_workers(
            *[
                dict(master=master.address, node_id=f"vllm-{name}-{uid('w')}", dram=32 << 20, pool_bytes=16 * PAGE)
                for name in ("gpu0", "gpu1")
            ]
        )
        try:
            for w in (e1, e2):
                assert w.info["distributed"] and w.info["mode"].endswith("Distributed")
            keys = [f"{uid('req')}-{i}" for i in range(16)]
            seed = random.randrange(1 << 30)
            assert scheduler.batch_exists(keys) == [False] * 16
            # Engine 1 stores a request's blocks from its KV buffer.
            assert e1.ask("put", keys=keys, size=PAGE, seed=seed, pool=True)["ok"] == [True] * 16
            # The scheduler sees them (via the master), and so does engine 2's lookup.
            assert scheduler.batch_exists(keys) == [True] * 16
            assert scheduler.batch_exists_consecutive(keys + [uid("absent")]) == 16
            # Engine 2 loads them into its KV buffer: the bytes engine 1 stored.
            got = e2.ask("get", keys=keys, size=PAGE, seed=seed, pool=True)
            assert got["right"] == [True] * 16
            # The scheduler stores and loads nothing.
            assert scheduler.batch_put_from_ptr([uid("s")], [1], [8]) == [False]
        finally:
            e1.close()
            e2.close()
            scheduler.close()


def test_sglang_distributed_umbpstore_sequence(monkeypatch):
    """SGLang's UMBPStore with a master address: config from the environment, node ids
    '<addr>:dp<d>:pp<p>:tp<t>', the host KV pool registered, pages put with their radix depth
    (K and V keys per page), prefix existence in pages, pages fetched into the other engine's pool."""
    with running_master(settings=fast_settings(route_put_affinity="local")) as master:
        prefill, decode = start_workers(
            *[
                dict(
                    master=master.address,
                    node_id=f"127.0.0.1:dp{dp}:pp0:tp0",
                    dram=32 << 20,
                    pool_bytes=24 * PAGE,
                    sglang=True,
                )
                for dp in (0, 1)
            ],
            env={"UMBP_SSD_ENABLED": "0"},
        )
        try:
            hashes = [uid("h") for _ in range(12)]
            keys = [f"{h}_0_{kv}" for h in hashes for kv in ("k", "v")]  # MHA: "{hash}_{tp}_k|v"
            depths = [i // 2 for i in range(len(keys))]
            seed = random.randrange(1 << 30)
            assert prefill.ask("put", keys=keys, size=PAGE, seed=seed, pool=True, depths=depths)["ok"] == [True] * 24
            # batch_exists: pages present = batch_exists_consecutive // keys_per_page
            ex = decode.ask("exists", keys=keys + [f"{uid('h')}_0_k", f"{uid('h')}_0_v"])
            assert ex["consecutive"] // 2 == 12
            got = decode.ask("get", keys=keys, size=PAGE, seed=seed, pool=True)
            assert got["right"] == [True] * 24
        finally:
            prefill.close()
            decode.close()


def test_job_secret_guards_the_peers():
    """With MORI_JOB_SECRET the workers sign their calls (to the master and to each other) and
    their peer services refuse a stranger's: nothing allocated, resolved or evicted."""
    import grpc

    from mori import _C
    from mori.umbp.proto import require

    peer_pb, peer_grpc = require("umbp_peer_pb2"), require("umbp_peer_pb2_grpc")
    secret_hex = _C.core.random_secret_hex()
    with running_master(secret=bytes.fromhex(secret_hex), settings=fast_settings()) as master:
        a, b = start_workers(
            dict(master=master.address, node_id=uid("a"), dram=4 << 20),
            dict(master=master.address, node_id=uid("b"), dram=32 << 20),
            env={"MORI_JOB_SECRET": secret_hex},
        )
        try:
            keys = [uid("k") for _ in range(4)]
            seed = random.randrange(1 << 30)
            assert a.ask("put", keys=keys, size=PAGE, seed=seed)["ok"] == [True] * 4  # signed: routed to b
            assert a.ask("get", keys=keys, size=PAGE, seed=seed)["right"] == [True] * 4
            stub = peer_grpc.UMBPPeerStub(grpc.insecure_channel(b.info["peer"]))
            for call, req in (
                (stub.AllocateSlot, peer_pb.AllocateSlotRequest(key=uid("x"), size=64)),
                (stub.BatchResolveKeys, peer_pb.BatchResolveKeysRequest(keys=keys)),
                (stub.EvictKey, peer_pb.EvictKeyRequest(keys=keys)),
                (stub.GetPeerInfo, peer_pb.GetPeerInfoRequest()),
            ):
                with pytest.raises(grpc.RpcError) as err:
                    call(req, timeout=5)
                assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert b.ask("stats")["peer_state"][4] == 0  # no pending slot
            assert a.ask("get", keys=keys, size=PAGE, seed=seed)["right"] == [True] * 4  # nothing evicted
        finally:
            a.close()
            b.close()
